"""The action's element shown as ``[e0]`` (``TemplateConfig.target_alias``): prompts, answers, SFT targets."""

from __future__ import annotations

import anyio
import pytest
from sim_helpers import ScriptedBackend

from dreamgym.core import ExperienceQuery, Neighbour, Observation, Step, Task, parse_action, parse_state
from dreamgym.core.state import flatten
from dreamgym.simulator import (
    ExperienceModelConfig,
    LLMExperienceModel,
    TemplateConfig,
    answer_text,
    history_of,
    parse_answer,
)
from dreamgym.simulator._alias import TARGET_ALIAS, Alias, alias_for, aliased_query

TASK = Task(task_id="toy/checks", instruction="Select the boxes the page names and press Submit.", site="toy")
GOAL = "Select HF2 and click Submit."
NAMES = ("AU", "HF2", "qx", "Zy7")
TEMPLATE = TemplateConfig(history=2, neighbours=1, past_actions=True, target_alias=True)


def page(checked: tuple[str, ...] = (), *, first_id: int = 1, focused: str = "") -> Observation:
    lines = [f"[e{first_id}] generic: {GOAL}"]
    for n, name in enumerate(NAMES, first_id + 1):
        lines.append(f'[e{n}] checkbox "{name}"' + (" [checked]" if name in checked else ""))
        lines.append(f"text: {name}")
    lines.append(f'[e{first_id + 5}] button "Submit"')
    return Observation(state="\n".join(lines), goal=GOAL, url="http://127.0.0.1/toy", focused_id=focused)


def step(index: int, before: Observation, action: str, after: Observation, episode_id: str = "a") -> Step:
    return Step(source="real", task_id=TASK.task_id, episode_id=episode_id, seed=0, site="toy", step_index=index,
                observation=before, action=parse_action(action), next_observation=after)  # fmt: skip


FIRST = step(0, page(), 'click [e2] "AU"', page(("AU",), focused="e2"))
SECOND = step(1, page(("AU",), focused="e2"), 'click [e5] "Zy7"', page(("AU", "Zy7"), focused="e5"))
NEIGHBOUR = step(0, page(), 'click [e3] "HF2"', page(("HF2",), focused="e3"), episode_id="b")


def query(current: Step = SECOND, history: tuple[Step, ...] = (FIRST,)) -> ExperienceQuery:
    neighbours = (Neighbour(seq=1, score=0.9, step=NEIGHBOUR),)
    return ExperienceQuery(task=TASK, history=history_of(history), observation=current.observation,
                           action=current.action, neighbours=neighbours)  # fmt: skip


def test_the_prompt_shows_the_actions_element_as_e0_and_each_neighbour_its_own() -> None:
    assert TEMPLATE.template_id == "experience/v1:h2:k1:direct:diff:acts:alias"
    text = TEMPLATE.messages(query())[-1].content
    assert text.splitlines()[-1] == f'Action: click [{TARGET_ALIAS}] "Zy7"'
    current = text.split("Current state:\n", 1)[1]
    assert f'[{TARGET_ALIAS}] checkbox "Zy7"' in current and "[e5]" not in current
    # the retrieved transition clicked its own element ([e3]); it shows that one as [e0], its [e5] as it is
    neighbour = text.split("#1 ", 1)[1].split("History", 1)[0]
    assert f'action: click [{TARGET_ALIAS}] "HF2"' in neighbour
    assert f'+ [{TARGET_ALIAS}] checkbox "HF2" [checked]' in neighbour
    # the history is the same page, under the same swap
    assert 'step 1: click [e2] "AU"' in text and 'Actions so far: click [e2] "AU"' in text
    assert "Focused: [e2]" in text
    plain = TemplateConfig(history=2, neighbours=1, past_actions=True).messages(query())[-1].content
    assert plain.splitlines()[-1] == 'Action: click [e5] "Zy7"' and f"[{TARGET_ALIAS}]" not in plain


def test_the_answer_written_against_the_shown_page_reads_back_as_the_real_next_page() -> None:
    shown, alias = aliased_query(query())
    before, after = alias.observation(SECOND.observation), alias.observation(SECOND.next_observation)
    answer = answer_text(TEMPLATE, observation=before, next_observation=after, reward=0.0, done=False)
    assert answer.splitlines()[1:3] == [
        f'- [{TARGET_ALIAS}] checkbox "Zy7"',
        f'+ [{TARGET_ALIAS}] checkbox "Zy7" [checked]',
    ]
    assert parse_answer(answer, shown.observation.state).state == parse_state(alias.text(SECOND.next_observation.state))
    assert parse_answer(alias.text(answer), SECOND.observation.state).state == parse_state(
        SECOND.next_observation.state
    )
    assert alias.observation(alias.observation(SECOND.next_observation)) == SECOND.next_observation  # its own inverse


def test_a_page_with_its_own_e0_shows_it_under_the_targets_id() -> None:
    before, after = page(first_id=0), page(("HF2",), first_id=0)  # ids e0..e5; the action clicks [e2] "HF2"
    mine = step(0, before, 'click [e2] "HF2"', after)
    shown, alias = aliased_query(query(mine, history=()))
    shown_page = parse_state(shown.observation.state)
    ids = [item.element.id for item in flatten(shown_page) if item.element.id]  # text lines have none
    assert sorted(ids) == ["e0", "e1", "e2", "e3", "e4", "e5"]  # a permutation: nothing lost or doubled
    target, own = shown_page.find(TARGET_ALIAS), shown_page.find("e2")
    assert target is not None and target.name == "HF2"
    assert own is not None and own.role == "generic"  # the page's own e0
    answer = answer_text(TEMPLATE, observation=shown.observation, next_observation=alias.observation(after),
                         reward=0.0, done=False)  # fmt: skip
    assert parse_answer(alias.text(answer), before.state).state == parse_state(after.state)


@pytest.mark.parametrize("action", ["scroll [down]", 'click [e9] "gone"', "press [Enter]", "stop [done]"])
def test_an_action_that_names_no_element_of_the_page_swaps_nothing(action: str) -> None:
    assert alias_for(SECOND.observation, parse_action(action)) == Alias()
    current = step(1, SECOND.observation, action, SECOND.observation)
    shown, alias = aliased_query(query(current))
    assert shown.observation == current.observation and shown.action == current.action
    assert alias.text('- [e5] checkbox "Zy7"') == '- [e5] checkbox "Zy7"'


def test_typing_swaps_only_the_element_not_the_text() -> None:
    form = Observation(state='[e1] textbox "Name"\n[e2] button "Submit"', goal="Type e2.")
    typed = parse_action("type [e1] [[e2]] [0]")
    shown, alias = aliased_query(ExperienceQuery(task=TASK, history=(), observation=form, action=typed))
    assert shown.action.args == (TARGET_ALIAS, *typed.args[1:])
    assert alias.id("e1") == TARGET_ALIAS and alias.id(TARGET_ALIAS) == "e1" and alias.id("e2") == "e2"
    assert alias.text("[e12] [e1] [e0]") == "[e12] [e0] [e1]"  # whole ids only


def test_the_model_decodes_against_the_shown_page_and_records_the_pages_own_ids() -> None:
    answers = [
        '<diff>\n- [e0] checkbox "Zy7"\n+ [e0] checkbox "Zy7" [checked]\n</diff>\n<reward>0</reward>\n<done>no</done>'
    ]
    backend = ScriptedBackend(answers)
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TEMPLATE))
    prediction = anyio.run(model.predict, query())
    assert parse_state(prediction.observation.state) == parse_state(SECOND.next_observation.state)
    assert "[e5]" in prediction.raw and f"[{TARGET_ALIAS}]" not in prediction.raw  # the store reads the page's ids
    copy_lines = backend.calls[0][1].copy_lines
    assert f'[{TARGET_ALIAS}] checkbox "Zy7"' in copy_lines and not any("[e5]" in line for line in copy_lines)
    assert model.stats.clean_first_answers == 1


def test_an_action_on_the_pages_own_e0_shows_everything_as_it_is() -> None:
    before = page(first_id=0)
    mine = step(0, before, "click [e0]", before)
    shown, alias = aliased_query(query(mine, history=()))
    assert alias == Alias(TARGET_ALIAS)
    assert shown.observation == before and shown.action == mine.action
    assert alias.text('- [e0] generic\n+ [e3] checkbox "qx"') == '- [e0] generic\n+ [e3] checkbox "qx"'
