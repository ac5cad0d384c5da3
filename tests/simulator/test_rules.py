"""The simulator's rules on any predictor's answer: typed text stays in its field, a selected option stands
selected, a clicked check control is checked as a browser leaves it, ``stop`` ends, the element acted on takes the
focus."""

from __future__ import annotations

import pytest
import toy_form
from sim_helpers import TOY_TEMPLATE, ScriptedBackend

from dreamgym.core import ExperienceQuery, Observation, parse_action
from dreamgym.simulator import (
    ExperienceModelConfig,
    LLMExperienceModel,
    SimulatedEnv,
    UnchangedPage,
    checked_page,
    focus_after,
    predict_steps,
    selected_option_page,
    typed_text_page,
)

pytestmark = pytest.mark.anyio

FORM = '[e1] form "Login"\n  [e2] textbox "Username"\n  [e3] textbox "Password": old\n  [e4] button "Login"'


def test_typed_text_replaces_the_fields_content_even_nested() -> None:
    after = typed_text_page(FORM, FORM, ("e3", "s3cret  pass", "0"))
    assert after == FORM.replace('"Password": old', '"Password": s3cret pass')


@pytest.mark.parametrize(
    ("after", "why"),
    [
        ('[e1] heading "Welcome"\n[e2] link "Home"', "the page moved on: the field is gone"),
        ('[e1] form "Login"\n  [e3] button "Password"', "same id, another element"),
        ('[e1] form "Login"\n  [e3] textbox "Email"', "same id and role, another name"),
        (FORM.replace(": old", ": karrie"), "the field already holds the text"),
    ],
)
def test_typed_text_leaves_pages_where_it_does_not_apply(after: str, why: str) -> None:
    assert typed_text_page(FORM, after, ("e3", "karrie", "1")) is None, why


def test_typing_without_enter_writes_no_other_field() -> None:
    # the model wrote the second field's change onto the first (cleared it) and left the typed one empty
    written = FORM.replace('"Password": old', '"Password"').replace('"Username"', '"Username": karrie')
    after = typed_text_page(FORM, written, ("e3", "s3cret", "0"))
    assert after == FORM.replace('"Password": old', '"Password": s3cret')
    # only the other field went wrong: the rule still puts it back
    assert typed_text_page(FORM, FORM.replace('"Username"', '"Username": x'), ("e3", "old", "0")) == FORM


def test_typing_with_enter_leaves_the_other_fields_as_predicted() -> None:
    # Enter may submit the form, which can clear or fill its other fields: the model's page stands
    written = FORM.replace('"Password": old', '"Password": s3cret').replace('"Username"', '"Username": karrie')
    assert typed_text_page(FORM, written, ("e3", "s3cret", "1")) is None


def test_typed_text_only_writes_text_entry_fields() -> None:
    assert typed_text_page(FORM, FORM, ("e4", "karrie", "0")) is None  # a button holds no typed text


async def test_simulated_env_writes_the_typed_text_the_model_got_wrong() -> None:
    wrong = "<diff>\n- [e2] textbox\n+ [e2] textbox: 9x\n</diff>\n<reward>0</reward>\n<done>no</done>"
    model = LLMExperienceModel(ScriptedBackend([wrong]), config=ExperienceModelConfig(template=TOY_TEMPLATE))
    env = SimulatedEnv(model)
    env.start_from(toy_form.TASK, toy_form.page(1))
    result = await env.step(parse_action("type [e2] [Bo] [0]"))
    assert result.observation.state == toy_form.page(1, "Bo").state
    assert result.info["rules"] == ["typed_text", "focus"] and env.stats.typed_text_rule == 1


@pytest.mark.parametrize(
    ("focused", "action", "after", "expected"),
    [
        ("", "type [e3] [pw] [0]", FORM, "e3"),  # a typed field has the focus
        ("e3", "click [e4]", FORM, "e4"),  # so has a clicked button
        ("e3", "click [e1]", FORM, ""),  # a click on what cannot take the focus takes it away
        ("e3", "click [e4]", '[e1] heading "Welcome"', ""),  # the page moved on: the button is gone
        ("e3", "scroll [down]", FORM, "e3"),  # other actions leave it where it was...
        ("e3", "scroll [down]", '[e1] heading "Welcome"', ""),  # ...if that element is still there
        ("", "scroll [down]", FORM, ""),
        ("e3", "select [e2] [Ida]", FORM, "e3"),  # Playwright selects without focusing the list
    ],
)
def test_the_element_acted_on_takes_the_focus(focused: str, action: str, after: str, expected: str) -> None:
    assert focus_after(focused, after, parse_action(action)) == expected


async def test_simulated_pages_carry_the_focus_the_model_never_writes() -> None:
    """A model answers with the page only; the focus of each simulated page comes from the rule, so the next
    prompt says ``Focused: [e2]`` as a real page's would."""
    typed = "<diff>\n- [e2] textbox\n+ [e2] textbox: Bo\n</diff>\n<reward>0</reward>\n<done>no</done>"
    backend = ScriptedBackend([typed, typed])
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE))
    env = SimulatedEnv(model)
    env.start_from(toy_form.TASK, toy_form.page(1))
    result = await env.step(parse_action("type [e2] [Bo] [0]"))
    assert result.observation.focused_id == "e2" and result.info["rules"] == ["focus"]
    await env.step(parse_action("scroll [down]"))
    messages, _ = backend.calls[-1]
    assert "Focused: [e2]" in messages[-1].content


async def test_teacher_forced_predictions_are_held_to_the_same_rules() -> None:
    def ask(action: str, observation: Observation) -> ExperienceQuery:
        return ExperienceQuery(task=toy_form.TASK, history=(), observation=observation, action=parse_action(action))

    typed, stopped = toy_form.episode(2, "Cyd")[0], toy_form.episode(2, "Cyd")[1]
    queries = [(typed, ask("type [e2] [Cyd] [0]", toy_form.page(2))), (stopped, ask("stop [Cyd]", toy_form.page(2)))]
    made = await predict_steps(UnchangedPage(), queries)
    first, second = made.predictions
    assert first is not None and first.observation.state == toy_form.page(2, "Cyd").state
    assert second is not None and second.terminated and second.observation.state == toy_form.page(2).state


LIST = "\n".join(
    ["[e1] generic: Select Rosa.", "[e2] combobox", '  option "Ida" [selected]', '  option "Rosa"', '  option "Roda"',
     '[e3] button "Submit"']
)  # fmt: skip
NESTED = "\n".join(
    ['[e2] listbox "Names"', '  group "A"', '    option "Ann" [disabled] [selected]', '  group "B"',
     '    option "Bo" [disabled]']
)  # fmt: skip


def test_a_selected_option_becomes_the_lists_only_selected_one() -> None:
    chosen = LIST.replace('"Ida" [selected]', '"Ida"').replace('"Rosa"', '"Rosa" [selected]')
    assert selected_option_page(LIST, LIST, ("e2", "Rosa")) == chosen
    assert selected_option_page(LIST, chosen, ("e2", "Rosa")) is None  # already as the rule writes it
    # options inside groups, other props kept in the snapshot's order
    nested = selected_option_page(NESTED, NESTED, ("e2", "Bo"))
    assert nested == NESTED.replace("[disabled] [selected]", "[disabled]").replace(
        '"Bo" [disabled]', '"Bo" [disabled] [selected]'
    )


@pytest.mark.parametrize(
    ("after", "args", "why"),
    [
        ('[e1] heading "Thanks"', ("e2", "Rosa"), "the page moved on: the list is gone"),
        (LIST.replace("[e2] combobox", '[e2] combobox "Other"'), ("e2", "Rosa"), "same id, another list"),
        (LIST, ("e2", "Grenada"), "no option of that name"),
        (LIST, ("e3", "Rosa"), "a button is not a list"),
    ],
)
def test_a_selected_option_leaves_pages_where_it_does_not_apply(after: str, args: tuple[str, str], why: str) -> None:
    assert selected_option_page(LIST, after, args) is None, why


async def test_simulated_env_selects_the_option_the_model_got_wrong() -> None:
    """A model that wrote the selection onto the wrong option: the chosen one stands selected, and it is counted."""
    wrong = "<diff>\n- [e2] combobox\n+ [e2] combobox\n</diff>\n<reward>0</reward>\n<done>no</done>"
    model = LLMExperienceModel(ScriptedBackend([wrong]), config=ExperienceModelConfig(template=TOY_TEMPLATE))
    env = SimulatedEnv(model)
    env.start_from(toy_form.TASK, Observation(state=LIST, goal="Select Rosa."))
    result = await env.step(parse_action("select [e2] [Rosa]"))
    assert '  option "Rosa" [selected]' in result.observation.state.split("\n")
    assert '  option "Ida"' in result.observation.state.split("\n")
    assert result.info["rules"] == ["selected_option"] and env.stats.selected_option_rule == 1


async def test_a_selection_written_onto_a_neighbours_options_is_made_by_the_rule_on_the_page_as_it_is() -> None:
    """What the small models answer for a ``select``: the selection moved between the options of a list retrieved
    from another page. Its lines name options this list lacks, so none can be placed: the page stands (no retry),
    and the rule selects the option the action named."""
    borrowed = (
        '<diff>\n-   option "Theodora"\n+   option "Theodora" [selected]\n-   option "Theodora" [selected]\n'
        '+   option "Theodora"\n</diff>\n<reward>0</reward>\n<done>no</done>'
    )
    backend = ScriptedBackend([borrowed])
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE))
    env = SimulatedEnv(model)
    env.start_from(toy_form.TASK, Observation(state=LIST, goal="Select Rosa."))
    result = await env.step(parse_action("select [e2] [Rosa]"))
    assert result.observation.state == LIST.replace('"Ida" [selected]', '"Ida"').replace('"Rosa"', '"Rosa" [selected]')
    assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
    assert result.info["rules"] == ["selected_option"]
    assert len(backend.calls) == 1 and model.stats.repaired_answers == 1 and model.stats.malformed_answers == 0


CHOICES = (
    '[e1] group "Toppings"\n  [e2] checkbox "Ham" [checked]\n  [e3] checkbox "Egg"\n'
    '[e4] group "Size"\n  [e5] radio "S" [checked]\n  [e6] radio "M"\n[e7] radio "Elsewhere" [checked]'
)


@pytest.mark.parametrize(
    ("target", "written", "expected"),
    [
        ("e3", CHOICES, CHOICES.replace('"Egg"', '"Egg" [checked]')),
        ("e2", CHOICES, CHOICES.replace('"Ham" [checked]', '"Ham"')),
        ("e2", CHOICES.replace('"Egg"', '"Egg" [checked]'), CHOICES.replace('"Ham" [checked]', '"Ham"')),
        ("e3", CHOICES.replace('"Ham" [checked]', '"Ham"'), CHOICES.replace('"Egg"', '"Egg" [checked]')),
        ("e6", CHOICES, CHOICES.replace('"S" [checked]', '"S"').replace('"M"', '"M" [checked]')),
        ("e6", CHOICES.replace('"Elsewhere" [checked]', '"Elsewhere"'),
         CHOICES.replace('"S" [checked]', '"S"').replace('"M"', '"M" [checked]')),
        ("e3", CHOICES.replace('"Egg"', '"Egg" [checked]').replace('"M"', '"M" [checked]'),
         CHOICES.replace('"Egg"', '"Egg" [checked]')),
    ],
    ids=["a box flips on", "a box flips off", "the model ticked the wrong box too",
         "the model unticked another box", "a radio and its siblings", "a radio group elsewhere stays",
         "a radio the model checked beside the box stays as it was"],
)  # fmt: skip
def test_a_clicked_check_control_is_left_as_a_browser_leaves_it(target: str, written: str, expected: str) -> None:
    assert checked_page(CHOICES, written, (target,)) == expected


@pytest.mark.parametrize(
    ("before", "target", "why"),
    [
        (CHOICES, "e1", "not a check control"),
        (CHOICES.replace('"Egg"', '"Egg" [disabled]'), "e3", "a disabled box does not flip"),
        (CHOICES, "e9", "no such element"),
    ],
)
def test_a_click_the_check_rule_does_not_cover_leaves_the_page(before: str, target: str, why: str) -> None:
    assert checked_page(before, before, (target,)) is None, why


def test_a_check_control_the_model_dropped_from_a_page_that_stays_is_put_back() -> None:
    """The model's page lost the clicked box's line (and another's): both come back where they were, the clicked
    one flipped, the other as it was."""
    dropped = CHOICES.replace('  [e2] checkbox "Ham" [checked]\n', "").replace('  [e3] checkbox "Egg"\n', "")
    assert checked_page(CHOICES, dropped, ("e3",)) == CHOICES.replace('"Egg"', '"Egg" [checked]')
    radio = CHOICES.replace('  [e6] radio "M"\n', "")
    expected = CHOICES.replace('"S" [checked]', '"S"').replace('"M"', '"M" [checked]')
    assert checked_page(CHOICES, radio, ("e6",)) == expected
    moved = dropped.replace('[e4] group "Size"', '[e8] dialog "Done"')  # the page went elsewhere: left as written
    assert checked_page(CHOICES, moved, ("e3",)) is None


def test_the_check_rule_leaves_a_page_the_click_led_away_from() -> None:
    assert checked_page(CHOICES, '[e1] heading "Thanks"', ("e3",)) is None
    assert checked_page(CHOICES, CHOICES.replace('"Egg"', '"Bacon"'), ("e3",)) is None


async def test_simulated_env_checks_the_box_the_model_left_unchecked() -> None:
    page = Observation(state=CHOICES, goal="Tick Egg and press Order.")
    answer = "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"
    env = SimulatedEnv(LLMExperienceModel(ScriptedBackend([answer])))
    result = await env.predict_step(toy_form.TASK, (), page, parse_action('click [e3] "Egg"'))
    assert '[e3] checkbox "Egg" [checked]' in result.observation.state
    assert result.info["rules"] == ["checked", "focus"] and env.stats.checked_rule == 1
    assert env.stats.as_metrics()["sim/env_checked_rule"] == 1
