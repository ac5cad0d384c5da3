"""Training examples with their element ids permuted (``SimTrainConfig.relabel_ids``)."""

from __future__ import annotations

import random
import re

import pytest

from dreamgym.core import ConfigError, ExperienceQuery, Neighbour, Observation, Step, Task, parse_action, parse_state
from dreamgym.simulator import SFTExample, SimTrainConfig, TemplateConfig, answer_text, history_of, parse_answer
from dreamgym.simulator._relabel import element_ids, relabel_examples, relabeled

TASK = Task(task_id="toy/checks", instruction="Select the boxes the page names and press Submit.", site="toy")
GOAL = "Select HF2 and click Submit."
NAMES = ("AU", "HF2", "qx", "Zy7")


def page(checked: tuple[str, ...] = ()) -> Observation:
    lines = [f"[e1] generic: {GOAL}"]
    for n, name in enumerate(NAMES, 2):
        lines.append(f'[e{n}] checkbox "{name}"' + (" [checked]" if name in checked else ""))
        lines.append(f"text: {name}")
    lines.append('[e6] button "Submit"')
    return Observation(
        state="\n".join(lines), goal=GOAL, url="http://127.0.0.1/toy", focused_id="e2" if checked else ""
    )


def step(index: int, before: tuple[str, ...], action: str, after: tuple[str, ...], episode_id: str = "a") -> Step:
    return Step(source="real", task_id=TASK.task_id, episode_id=episode_id, seed=0, site="toy", step_index=index,
                observation=page(before), action=parse_action(action), next_observation=page(after))  # fmt: skip


FIRST = step(0, (), 'click [e2] "AU"', ("AU",))
SECOND = step(1, ("AU",), 'click [e3] "HF2"', ("AU", "HF2"))
NEIGHBOUR = step(0, (), 'click [e5] "Zy7"', ("Zy7",), episode_id="b")


def example(template: TemplateConfig | None = None) -> SFTExample:
    template = template or TemplateConfig(history=2, neighbours=1)
    neighbours = (Neighbour(seq=1, score=0.9, step=NEIGHBOUR),)
    query = ExperienceQuery(task=TASK, history=history_of([FIRST]), observation=SECOND.observation,
                            action=SECOND.action, neighbours=neighbours)  # fmt: skip
    completion = answer_text(template, observation=SECOND.observation, next_observation=SECOND.next_observation,
                             reward=0.0, done=False)  # fmt: skip
    return SFTExample(messages=tuple(template.messages(query)), completion=completion, episode_id="a", step_index=1,
                      task_id=TASK.task_id, seed=0, action_name="click")  # fmt: skip


def current_page(example: SFTExample) -> str:
    text = example.messages[-1].content
    body = text.split("Current state:\n", 1)[1]
    return body.split("\nFocused:", 1)[0]


def named(example: SFTExample) -> str:
    """The element id the example's action names."""
    found = re.search(r"^Action: click \[(\w+)\]", example.messages[-1].content, re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_element_ids_are_the_ids_that_start_state_lines_not_props() -> None:
    text = '[e1] generic: x\n  [e2] checkbox "a" [checked]\n- [e3] checkbox "b"\n+ [e3] checkbox "b" [checked]'
    assert element_ids(text) == ["e1", "e2", "e3"]
    assert element_ids('click [e9] "x"\nFocused: [e4]\ntext: [e7] here') == []


@pytest.mark.parametrize("seed", range(8))
def test_a_relabeled_example_is_the_same_transition_under_permuted_ids(seed: int) -> None:
    original = example()
    new = relabeled(original, random.Random(seed))
    ids = element_ids("\n".join(m.content for m in original.messages[1:]) + "\n" + original.completion)
    mapping = dict(zip(ids, element_ids("\n".join(m.content for m in new.messages[1:]) + "\n" + new.completion),
                       strict=True))  # fmt: skip
    assert sorted(mapping.values()) == sorted(ids)  # a permutation of the page's own ids, nothing new
    before, after = parse_state(current_page(new)), parse_state(current_page(original))
    # the action names the same element (role and name) on the relabeled page
    target, was = before.find(named(new)), after.find(named(original))
    assert target is not None and was is not None and (target.role, target.name) == (was.role, was.name)
    assert named(new) == mapping[named(original)]
    # the relabeled answer applied to the relabeled page is the real next page, relabeled
    parsed = parse_answer(new.completion, current_page(new))
    expected = SECOND.next_observation.state
    for old, replacement in mapping.items():
        expected = expected.replace(f"[{old}]", f"[@{replacement}]")
    assert parsed.state == parse_state(expected.replace("[@", "["))
    assert f"Focused: [{mapping['e2']}]" in new.messages[-1].content
    assert new.messages[0] == original.messages[0]  # the system message is every example's
    assert new.completion.count("[checked]") == original.completion.count("[checked]")
    assert (new.episode_id, new.step_index, new.task_id, new.action_name) == (
        original.episode_id, original.step_index, original.task_id, original.action_name)  # fmt: skip


def test_some_seed_moves_the_actions_id_and_the_permutation_is_seeded() -> None:
    original = example()
    moved = [named(relabeled(original, random.Random(seed))) != named(original) for seed in range(8)]
    assert any(moved)
    assert relabeled(original, random.Random(3)) == relabeled(original, random.Random(3))


def test_relabel_examples_keeps_count_and_order_and_changes_only_its_share() -> None:
    examples = [example() for _ in range(200)]
    assert relabel_examples(examples, 0.0) == examples
    half = relabel_examples(examples, 0.5, seed=1)
    assert len(half) == len(examples)
    changed = sum(new != old for new, old in zip(half, examples, strict=True))
    assert 60 < changed < 140  # drawn per example (an identity draw leaves one as it was)
    assert half == relabel_examples(examples, 0.5, seed=1)
    assert half != relabel_examples(examples, 0.5, seed=2)


def test_an_example_with_fewer_than_two_ids_is_left_as_it_is() -> None:
    answer = "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"
    single = SFTExample(messages=example().messages[:1], completion=answer, episode_id="a", step_index=0,
                        task_id=TASK.task_id, seed=0)  # fmt: skip
    assert relabeled(single, random.Random(0)) is single


def test_the_share_must_be_a_fraction() -> None:
    with pytest.raises(ConfigError, match="relabel_ids must be in"):
        SimTrainConfig(relabel_ids=1.5)
    with pytest.raises(ConfigError, match="relabel_ids must be in"):
        SimTrainConfig(relabel_ids=-0.1)
