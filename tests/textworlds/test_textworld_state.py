"""A text observation in core's state format: the pure rendering functions."""

from __future__ import annotations

from dreamgym.core import candidate_actions, parse_state, render_state
from dreamgym.core.state import flatten, lean_diff
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


ROOM = TextFrame(
    description="-= Kitchen =-\nYou see a fridge. The fridge contains a block of cheese and a carrot. "
    "What's that over there? It looks like it's an oven.",
    commands=("take block of cheese from fridge",),
)


def _paragraphs(state: str) -> list[str]:
    return [f.element.text for f in flatten(parse_state(state)) if f.element.role == "paragraph"]


def test_each_sentence_of_the_room_is_its_own_line() -> None:
    assert _paragraphs(render_text_state(ROOM, CommandIds())) == [
        "You see a fridge.",
        "The fridge contains a block of cheese and a carrot.",
        "What's that over there?",
        "It looks like it's an oven.",
    ]


def test_a_sentence_is_not_cut_inside_a_title() -> None:
    frame = TextFrame(description='You see a copy of "Cooking: A Modern Approach (3rd Ed.)" on the table. It is old.')
    assert _paragraphs(render_text_state(frame, CommandIds())) == [
        'You see a copy of "Cooking: A Modern Approach (3rd Ed.)" on the table.',
        "It is old.",
    ]


def test_paragraph_lines_keep_each_paragraph_whole() -> None:
    state = render_text_state(ROOM, CommandIds(), lines="paragraph")
    assert _paragraphs(state) == [ROOM.description.split("\n")[1]]
    assert render_state(parse_state(state)) == state


def test_taking_an_item_changes_one_line_of_the_room() -> None:
    """The point of sentence lines: the diff the experience model writes for a step is the changed sentence."""
    ids = CommandIds()
    before = render_text_state(ROOM, ids)
    taken = TextFrame(description=ROOM.description.replace("a block of cheese and ", ""), commands=ROOM.commands)
    after = render_text_state(taken, ids)
    changed = [line for line in lean_diff(before, after).splitlines() if line[:2] in ("- ", "+ ")]
    assert changed == [
        "- paragraph: The fridge contains a block of cheese and a carrot.",
        "+ paragraph: The fridge contains a carrot.",
    ]
    whole = [render_text_state(f, CommandIds(), lines="paragraph") for f in (ROOM, taken)]
    assert len(lean_diff(*whole)) > 2 * len("\n".join(changed))
