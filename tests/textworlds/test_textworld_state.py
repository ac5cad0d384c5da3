"""A text observation in core's state format: the pure rendering functions."""

from __future__ import annotations

from dreamgym.core import candidate_actions, parse_state, render_state
from dreamgym.textworlds import CommandIds, TextFrame, clean_game_text, command_f1, render_text_state

FRAME = TextFrame(
    description="-= Kitchen =-\nYou are in a kitchen.\n\nThere is a fridge here.",
    feedback="You take the apple.",
    inventory="You are carrying: an apple.",
    score=1,
    max_score=3,
    commands=("eat apple", "go east"),
)


def test_the_rendered_state_parses_back_to_itself() -> None:
    text = render_text_state(FRAME, CommandIds())
    assert render_state(parse_state(text)) == text


def test_the_room_name_is_the_heading() -> None:
    assert render_text_state(FRAME, CommandIds()).startswith('heading "Kitchen"\n')


def test_each_command_is_a_button_a_chooser_can_click() -> None:
    state = parse_state(render_text_state(FRAME, CommandIds()))
    labels = [action.label for action in candidate_actions(state, "win", include_scroll=False)]
    assert labels == ["eat apple", "go east"]


def test_a_command_keeps_its_id_when_others_come_and_go() -> None:
    ids = CommandIds()
    render_text_state(FRAME, ids)
    later = TextFrame(commands=("open fridge", "go east"))
    assert '[c2] button "go east"' in render_text_state(later, ids)


def test_a_new_command_gets_the_next_free_id() -> None:
    ids = CommandIds()
    render_text_state(FRAME, ids)
    later = TextFrame(commands=("open fridge",))
    assert '[c3] button "open fridge"' in render_text_state(later, ids)


def test_the_score_is_a_region() -> None:
    assert 'region "score": 1 of 3' in render_text_state(FRAME, CommandIds())


def test_cleaning_drops_the_prompt_and_status_line() -> None:
    assert clean_game_text("\nYou take the apple.\n\n>   -= Kitchen =-0/2") == "You take the apple."


def test_cleaning_drops_the_end_of_game_menu() -> None:
    text = "You win.\n\nWould you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?\n>"
    assert clean_game_text(text) == "You win."


def _listing(*commands: str) -> str:
    return render_text_state(TextFrame(commands=commands), CommandIds())


def test_command_f1_of_the_same_commands_is_one() -> None:
    assert command_f1(_listing("look", "go east"), _listing("go east", "look")) == 1.0


def test_command_f1_counts_missing_and_invented_commands() -> None:
    assert command_f1(_listing("look", "dance"), _listing("look", "go east")) == 0.5


def test_command_f1_of_no_commands_on_either_side_is_one() -> None:
    assert command_f1(_listing(), _listing()) == 1.0
