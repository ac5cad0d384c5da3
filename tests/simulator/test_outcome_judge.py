"""The outcome judge: task-agnostic features, a fit that pays unseen strings only where the page matches the goal,
its file, and the experience model that takes its reward and end from it."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest
from sim_helpers import ScriptedBackend, open_store

from dreamgym.core import (
    ChatMessage,
    Completion,
    ConfigError,
    ExperienceQuery,
    Observation,
    Sampling,
    Step,
    Task,
    parse_action,
)
from dreamgym.simulator import (
    FEATURES,
    JUDGE_FILE,
    LLMExperienceModel,
    OutcomeJudge,
    fit_judge,
    fit_store_judge,
    outcome_features,
)

pytestmark = pytest.mark.anyio

SITE = "forms"


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijkmnopqrstuvwxyzABCDEFGH23456789") for _ in range(rng.randint(2, 7)))


def signup_page(goal: str, email: str = "", handle: str = "") -> str:
    """A sign-up form with two labelled fields (the label is the text line before each field)."""
    email_box = f"  [e3] textbox: {email}" if email else "  [e3] textbox"
    handle_box = f"  [e5] textbox: {handle}" if handle else "  [e5] textbox"
    lines = [f"[e1] generic: {goal}", "[e2] paragraph", "  text: Email", email_box, "[e4] paragraph", "  text: Handle",
             handle_box, '[e6] button "Join"']  # fmt: skip
    return "\n".join(lines)


def toppings_page(goal: str, names: list[str], checked: set[str]) -> str:
    lines = [f"[e1] generic: {goal}"]
    for n, name in enumerate(names, start=2):
        lines.append(f"[e{n}] checkbox {json.dumps(name)}{' [checked]' if name in checked else ''}")
    lines.append(f'[e{len(names) + 2}] button "Order"')
    return "\n".join(lines)


def _step(task: str, seed: int, index: int, page: str, action: str, goal: str, reward: float, end: bool) -> Step:
    return Step(
        source="real", task_id=f"{SITE}/{task}", episode_id=f"{task}-{seed}-{index}-{reward}-{action}",
        step_index=index, seed=seed, site=SITE, observation=Observation(state=page, goal=goal),
        action=parse_action(action), next_observation=Observation(state=page, goal=goal), reward=reward,
        terminated=end,
    )  # fmt: skip


def signup_steps(seed: int) -> list[Step]:
    """Per seed: typing steps, a win, and near misses (a wrong value, the values swapped, a field left empty)."""
    rng = random.Random(seed)
    email, handle = _word(rng), _word(rng)
    goal = f'Enter the email "{email}" and the handle "{handle}" and press join.'
    steps = [
        _step("signup", seed, 0, signup_page(goal), f"type [e3] [{email}]", goal, 0.0, False),
        _step("signup", seed, 1, signup_page(goal, email), f"type [e5] [{handle}]", goal, 0.0, False),
        _step("signup", seed, 2, signup_page(goal, email, handle), 'click [e6] "Join"', goal, 1.0, True),
    ]
    for index, (e, h) in enumerate([(email, _word(rng)), (handle, email), (email, "")], start=3):
        steps.append(_step("signup", seed, index, signup_page(goal, e, h), 'click [e6] "Join"', goal, 0.0, True))
    return steps


def toppings_steps(seed: int) -> list[Step]:
    """Per seed: ticking steps, a win, and near misses (one asked box left out, one more box ticked)."""
    rng = random.Random(1000 + seed)
    names = [_word(rng) for _ in range(4)]
    wanted = set(names[:2])
    goal = f"Tick {names[0]}, {names[1]} and press Order."
    steps = [
        _step("toppings", seed, 0, toppings_page(goal, names, set()), "click [e2]", goal, 0.0, False),
        _step("toppings", seed, 1, toppings_page(goal, names, {names[0]}), "click [e3]", goal, 0.0, False),
        _step("toppings", seed, 2, toppings_page(goal, names, wanted), 'click [e6] "Order"', goal, 1.0, True),
    ]
    for index, checked in enumerate([{names[0]}, {*wanted, names[3]}], start=3):
        steps.append(_step("toppings", seed, index, toppings_page(goal, names, checked), 'click [e6] "Order"', goal,
                           0.0, True))  # fmt: skip
    return steps


def forms(seeds: range) -> list[Step]:
    return [step for seed in seeds for step in (*signup_steps(seed), *toppings_steps(seed))]


def named_features(goal: str, page: str, action: str) -> dict[str, float]:
    return dict(zip(FEATURES, outcome_features(goal, page, parse_action(action)).tolist(), strict=True))


def test_features_compare_the_goals_strings_with_the_pages_fields_and_selections() -> None:
    goal = 'Enter the email "q7" and the handle "zed" and press join.'
    right = named_features(goal, signup_page(goal, "q7", "zed"), "click [e6]")
    swapped = named_features(goal, signup_page(goal, "zed", "q7"), "click [e6]")
    assert right["fields_right"] == 1.0
    assert right["fields_label_right"] == pytest.approx(2 / 5)
    assert swapped["fields_label_wrong"] == pytest.approx(2 / 5)
    assert swapped["fields_right"] == 0.0
    assert right["target_button"] == 1.0
    assert right["target_named"] == 1.0
    ticked = named_features("Tick Ab, cd.", toppings_page("Tick Ab, cd.", ["Ab", "cd", "x"], {"Ab", "x"}), "click [e5]")
    assert ticked["selected_named"] == pytest.approx(1 / 5)
    assert ticked["selected_unnamed"] == pytest.approx(1 / 5)
    assert ticked["unselected_named"] == pytest.approx(1 / 5)
    assert ticked["selections_right"] == 0.0


def test_a_page_that_does_not_parse_reads_as_an_empty_page() -> None:
    assert named_features('Type "a".', "[e1 broken line\n  [", "click [e1]")["target_missing"] == 1.0


def test_a_fit_judge_pays_unseen_strings_only_where_the_page_matches_the_goal() -> None:
    judge = fit_judge(forms(range(30)))
    held = forms(range(100, 120))
    verdicts = [(judge.outcome(s.observation.goal, s.observation.state, s.action), s) for s in held]
    wins = [(reward, end) for (reward, end), s in verdicts if s.reward == 1.0]
    misses = [(reward, end) for (reward, end), s in verdicts if s.terminated and s.reward == 0.0]
    running = [(reward, end) for (reward, end), s in verdicts if not s.terminated]
    assert wins == [(1.0, True)] * len(wins)
    assert misses == [(0.0, True)] * len(misses)
    assert running == [(0.0, False)] * len(running)


def lenient_steps(seed: int) -> list[Step]:
    """A grader that pays a selection more than half right (a box agrees when it is ticked iff asked for), on forms
    of 2 to 6 boxes that ask for any of them: per seed, an Order on 6 pages ticked at random."""
    rng = random.Random(2000 + seed)
    names = [_word(rng) for _ in range(rng.randint(2, 6))]
    wanted = {name for name in names if rng.random() < 0.5}
    asked = ", ".join(name for name in names if name in wanted) or "nothing"
    goal = f"Tick {asked} and press Order."
    steps = []
    for index in range(6):
        checked = {name for name in names if rng.random() < 0.5}
        agree = sum((name in checked) == (name in wanted) for name in names)
        page, order = toppings_page(goal, names, checked), f'click [e{len(names) + 2}] "Order"'
        steps.append(_step("lenient", seed, index, page, order, goal, float(agree > len(names) / 2), True))
    return steps


def test_a_judge_learns_a_grader_that_pays_a_selection_mostly_right() -> None:
    """Partial credit (more than half the boxes right pays) learnt on some forms, applied to forms with unseen names
    and other sizes: counts of right and wrong boxes cannot tell 3 of 5 from 2 of 4; the share that agrees can."""
    assert named_features("Tick Ab, cd.", toppings_page("Tick Ab, cd.", ["Ab", "cd", "x"], {"Ab"}), "click [e5]")[
        "selections_agree"
    ] == pytest.approx(2 / 3)
    judge = fit_judge([step for seed in range(60) for step in lenient_steps(seed)])
    held = [step for seed in range(100, 140) for step in lenient_steps(seed)]
    paid = [judge.outcome(s.observation.goal, s.observation.state, s.action)[0] for s in held]
    assert 0.3 < sum(s.reward for s in held) / len(held) < 0.7
    assert paid == [s.reward for s in held]


def test_a_judge_fit_on_steps_without_an_end_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="end an episode"):
        fit_judge([s for s in forms(range(3)) if not s.terminated])
    with pytest.raises(ConfigError, match="real steps"):
        fit_judge([])


def test_a_saved_judge_loads_as_it_was(tmp_path: Path) -> None:
    judge = fit_judge(forms(range(5)), iterations=200)
    judge.save(tmp_path)
    loaded = OutcomeJudge.load(tmp_path)
    assert loaded is not None
    assert loaded.judge_id == OutcomeJudge(np.round(judge.weights, 6), judge.trained_on).judge_id
    assert loaded.trained_on == judge.trained_on
    assert OutcomeJudge.load(tmp_path / "nowhere") is None


def test_a_judge_fit_on_other_features_or_a_broken_file_is_a_config_error(tmp_path: Path) -> None:
    fit_judge(forms(range(5)), iterations=50).save(tmp_path)
    payload = json.loads((tmp_path / JUDGE_FILE).read_text())
    payload["features"] = [*payload["features"][:-1], "something_else"]
    (tmp_path / JUDGE_FILE).write_text(json.dumps(payload))
    with pytest.raises(ConfigError, match="fit it again"):
        OutcomeJudge.load(tmp_path)
    (tmp_path / JUDGE_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="not a readable outcome judge"):
        OutcomeJudge.load(tmp_path)


async def test_a_store_judge_leaves_the_held_out_pairs_out(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        for seed in range(6):
            await store.append(signup_steps(seed))
        await store.flush()
        everything = await fit_store_judge(store)
        held_out = await fit_store_judge(store, exclude_task_seeds=[(f"{SITE}/signup", 5), (f"{SITE}/signup", 4)])
        steps = await store.get_steps(await store.task_seqs(f"{SITE}/signup", source="real"))
        one_episode = steps[0].episode_id
        without_one = await fit_store_judge(store, exclude_episodes=[one_episode])
    assert everything.trained_on == 36
    assert held_out.trained_on == 24
    dropped = sum(step.episode_id == one_episode for step in steps)
    assert dropped > 0 and without_one.trained_on == 36 - dropped


async def test_an_experience_model_with_a_judge_takes_the_judges_reward_and_end_and_names_it() -> None:
    goal = 'Enter the email "q7" and the handle "zed" and press join.'
    page = signup_page(goal, "q7", "")
    # the model pays the click though a field is empty; the judge knows better
    answer = "<diff>\n</diff>\n<reward>1</reward>\n<done>yes</done>"
    judge = await anyio.to_thread.run_sync(fit_judge, forms(range(30)))
    query = ExperienceQuery(
        task=Task(task_id=f"{SITE}/signup", instruction=goal, site=SITE),
        history=(),
        observation=Observation(state=page, goal=goal),
        action=parse_action('click [e6] "Join"'),
    )
    bare = LLMExperienceModel(ScriptedBackend([answer], backend_id="b"))
    judged = LLMExperienceModel(ScriptedBackend([answer], backend_id="b"), judge=judge)
    alone, with_judge = await bare.predict(query), await judged.predict(query)
    assert (alone.reward, alone.terminated) == (1.0, True)
    assert (with_judge.reward, with_judge.terminated) == (0.0, True)
    assert bare.model_id == "b"
    assert judged.model_id == f"b+judge@{judge.judge_id}"
    assert with_judge.model_id == judged.model_id


def test_the_simulator_names_no_benchmark_task() -> None:
    """Rewards and ends come from learned parts and task-agnostic rules: no MiniWoB++ task name anywhere in the
    simulator's code (docstrings included), so the recipe holds on tasks nobody tuned it on."""
    import miniwob

    pages = Path(miniwob.__file__).parent / "html" / "miniwob"
    names = sorted(p.stem for p in pages.glob("*.html"))
    assert len(names) > 100
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    simulator = Path(__file__).resolve().parents[2] / "dreamgym" / "simulator"
    found = {
        f"{path.relative_to(simulator)}: {match}"
        for path in simulator.rglob("*.py")
        for match in pattern.findall(path.read_text())
    }
    assert found == set()


GARBLED = '<diff>\n- [e2] checkbox "A] radio "x]\n</diff>\n<reward>0</reward>\n<done>no</done>'
"""A tiny model's answer to a click on a box: a line that names no page line, read by its id, removes the box."""


@pytest.mark.parametrize("answer", [GARBLED, "the page is unchanged"], ids=["repaired", "malformed"])
async def test_a_garbled_first_answer_on_a_rule_written_step_takes_the_rules_page_and_the_judges_outcome(
    answer: str,
) -> None:
    from dreamgym.simulator import SimulatedEnv

    goal = "Tick Ab, cd and press Order."
    page = Observation(state=toppings_page(goal, ["Ab", "cd", "x"], set()), goal=goal)
    judge = await anyio.to_thread.run_sync(fit_judge, forms(range(30)))
    task = Task(task_id=f"{SITE}/toppings", instruction=goal, site=SITE)
    backend = ScriptedBackend([answer])
    model = LLMExperienceModel(backend, judge=judge)
    result = await SimulatedEnv(model).predict_step(task, (), page, parse_action('click [e2] "Ab"'))
    assert len(backend.calls) == 1
    assert '[e2] checkbox "Ab" [checked]' in result.observation.state
    assert (result.reward, result.terminated) == (0.0, False)
    assert model.stats.rule_pages == 1


class SteeredBackend(ScriptedBackend):
    """Answers as a guarded backend does where it overruled the model: the text applies, ``steered`` says so."""

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        answer = await super().complete(messages, sampling)
        return Completion(text=answer.text, steered=2)


async def test_a_steered_first_answer_takes_the_rules_page_on_a_rule_step_and_stands_elsewhere() -> None:
    """An answer the guard kept to the form against the model's choice applies, but is not what the model meant:
    on a step the rules write it is replaced by the rules' page (as a garbled one is); elsewhere it stands,
    counted either way."""
    from dreamgym.simulator import SimulatedEnv

    goal = "Tick Ab, cd and press Order."
    page = Observation(state=toppings_page(goal, ["Ab", "cd", "x"], set()), goal=goal)
    judge = await anyio.to_thread.run_sync(fit_judge, forms(range(30)))
    task = Task(task_id=f"{SITE}/toppings", instruction=goal, site=SITE)
    wrong = '<diff>\n  [e4] checkbox "x"\n+ [e9] checkbox "6"\n</diff>\n<reward>0</reward>\n<done>no</done>'
    model = LLMExperienceModel(SteeredBackend([wrong]), judge=judge)
    result = await SimulatedEnv(model).predict_step(task, (), page, parse_action('click [e2] "Ab"'))
    assert '[e2] checkbox "Ab" [checked]' in result.observation.state and "[e9]" not in result.observation.state
    assert (model.stats.steered_answers, model.stats.rule_pages, model.stats.clean_first_answers) == (1, 1, 0)
    elsewhere = await SimulatedEnv(model).predict_step(task, (), page, parse_action('click [e5] "Order"'))
    assert '[e9] checkbox "6"' in elsewhere.observation.state  # no rule writes a button's page: it stands
    assert (model.stats.steered_answers, model.stats.rule_pages) == (2, 1)


async def test_without_a_judge_a_garbled_answer_is_repaired_and_the_check_rule_puts_the_box_back() -> None:
    """The model's repaired answer, taken as it was, drops the box it clicked; the check rule puts it back,
    checked (a click removes no box from a page that stays)."""
    from dreamgym.simulator import SimulatedEnv

    goal = "Tick Ab, cd and press Order."
    page = Observation(state=toppings_page(goal, ["Ab", "cd", "x"], set()), goal=goal)
    task = Task(task_id=f"{SITE}/toppings", instruction=goal, site=SITE)
    model = LLMExperienceModel(ScriptedBackend([GARBLED]))
    result = await SimulatedEnv(model).predict_step(task, (), page, parse_action('click [e2] "Ab"'))
    assert '[e2] checkbox "Ab" [checked]' in result.observation.state
    assert model.stats.repaired_answers == 1 and "checked" in result.info["rules"]
