"""The validation metrics on hand-made cases whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from validate_helpers import (
    INVENTED,
    TASK,
    BrokenModel,
    OracleModel,
    WrongModel,
    all_steps,
    episodes,
    fill_store,
    open_store,
    page,
)

from dreamgym.core import ExperienceQuery, Neighbour, Step, parse_action
from dreamgym.replay import LmdbReplayStore
from dreamgym.simulator import CopyTopRetrieved, LLMExperienceModel, OpenAIBackend, TemplateConfig, UnchangedPage
from dreamgym.simulator import ExperienceModelConfig as ModelConfig
from dreamgym.validate import ValidationConfig, ValidationReport, ablation_variants, select_episodes, validate

pytestmark = pytest.mark.anyio

SEEDS = range(10, 13)  # 3 seeds: 15 steps, 3 rewarded, 6 that change the page, 3 action errors
ALL_HELD_OUT = ((TASK.task_id, None),)


async def run(tmp_path: Path, model: object, **config: object) -> ValidationReport:
    steps = all_steps(SEEDS)
    async with open_store(tmp_path / "store") as store:
        await fill_store(store, range(0, 13))
        return await validate(model, steps, store=store, config=ValidationConfig(**config))  # type: ignore[arg-type]


async def test_a_perfect_simulator_scores_perfectly(tmp_path: Path) -> None:
    report = await run(tmp_path, OracleModel(all_steps(SEEDS)), open_loop=3)
    model = report.one_step["model"]
    assert (model.n, report.steps, report.episodes, report.tasks) == (15, 15, 6, 1)
    for key in ("reward_accuracy", "done_accuracy", "exact_match", "similarity", "precision", "recall", "f1"):
        assert getattr(model, key) == 1.0, key
    assert model.hallucination_rate == 0.0 and model.failures == 0
    confusion = report.reward["model"]
    assert (confusion.true_positive, confusion.false_negative, confusion.false_positive, confusion.true_negative) == (
        3, 0, 0, 12,
    )  # fmt: skip
    assert confusion.mean_abs_error == 0.0
    # the deciding steps: two Submits a seed end an episode (one of them paid); every one right
    deciding = report.deciding["model"]
    assert (deciding.steps, deciding.right, deciding.by_task) == (6, 6, {"toy/name": (6, 6)})
    errors = report.action_errors["model"]
    assert (errors.n, errors.predicted_error, errors.predicted_unchanged, errors.predicted_reward_zero) == (3, 1, 1, 1)
    assert list(report.by_depth["model"]) == ["0", "1", "2"]
    assert [s.n for s in report.by_depth["model"].values()] == [6, 6, 3]
    # Keeping the page is right on every unchanged page; held to the simulator's typed-text rule, it is also right
    # on the pages here that change, since only typing changes them (the rule writes the typed text, not the model).
    unchanged = report.by_change["unchanged"]
    assert unchanged["page unchanged"].exact_match == 1.0 and unchanged["page changed"].exact_match == 1.0
    assert report.by_change["model"]["page changed"].n == 6
    assert sum(s.n for s in report.by_change["model"].values()) == report.steps
    assert list(report.by_site["model"]) == ["toy"] and list(report.by_task["model"]) == ["toy/name"]
    drift = report.open_loop["model"]
    assert [(p.k, p.n, p.running) for p in drift] == [(1, 6, 6), (2, 6, 6), (3, 3, 3)]
    assert all(p.similarity == p.f1 == p.reward_accuracy == 1.0 for p in drift)
    assert report.worst_cases == []


async def test_a_known_wrong_simulator_scores_what_it_should(tmp_path: Path) -> None:
    report = await run(tmp_path, WrongModel(all_steps(SEEDS)))
    model = report.one_step["model"]
    # Every page gets one invented element beside its 3 real ones; rewards and ends are all flipped.
    assert (model.reward_accuracy, model.done_accuracy, model.exact_match) == (0.0, 0.0, 0.0)
    assert model.precision == 0.75 and model.recall == 1.0 and model.hallucination_rate == 0.25
    assert model.f1 == pytest.approx(6 / 7, abs=1e-4) and model.similarity == pytest.approx(6 / 7, abs=1e-4)
    confusion = report.reward["model"]
    assert (confusion.true_positive, confusion.false_negative, confusion.false_positive, confusion.true_negative) == (
        0, 3, 12, 0,
    )  # fmt: skip
    assert confusion.mean_abs_error == 1.0 and confusion.success_recall == 0.0
    # each flipped end makes a step deciding (an end predicted where the episode went on), and each is wrong
    assert (report.deciding["model"].steps, report.deciding["model"].right, report.deciding["model"].accuracy) == (
        15, 0, 0.0,
    )  # fmt: skip
    errors = report.action_errors["model"]
    assert (errors.n, errors.predicted_error, errors.predicted_unchanged, errors.predicted_reward_zero) == (3, 0, 0, 0)
    assert report.worst_cases and all(INVENTED in case.predicted_state for case in report.worst_cases)
    assert len(report.worst_cases) == 2 and report.unusable_cases == []  # at most two per task


async def test_the_baselines_score_what_they_should(tmp_path: Path) -> None:
    report = await run(tmp_path, OracleModel(all_steps(SEEDS)), exclude_task_seeds=ALL_HELD_OUT, open_loop=3)
    unchanged = report.one_step["unchanged"]
    # Every page right (the typed-text rule writes what typing changes), but never the reward of a Submit that
    # wins (1 of 5 steps per seed) and never the end of an episode (2 of 5: the Submit and the stop).
    assert (unchanged.exact_match, unchanged.reward_accuracy, unchanged.done_accuracy) == (1.0, 0.8, 0.6)
    assert unchanged.similarity == unchanged.f1 == 1.0
    assert unchanged.hallucination_rate == 0.0
    assert report.action_errors["unchanged"].predicted_error == 0.0
    assert report.action_errors["unchanged"].predicted_unchanged == 1.0
    # reward 0 and no end: the six real ends decide, and it misses each (right on the other nine, which hide it)
    assert (report.deciding["unchanged"].steps, report.deciding["unchanged"].right) == (6, 0)
    # With every pair of the task held out, nothing is retrieved and copying the top neighbour keeps the page.
    copy = report.one_step["copy_top_retrieved"]
    untimed = {"name": "", "seconds_per_step": 0.0}  # scores, not how long each took (a loaded machine varies)
    assert {**copy.as_dict(), **untimed} == {**unchanged.as_dict(), **untimed}
    # Open loop, the pages stay right (typing is the rule's) but the winning Submit at k=2 earns nothing.
    drift = report.open_loop["unchanged"]
    assert [(point.n, point.similarity, point.reward_accuracy) for point in drift] == [
        (6, 1.0, 1.0),
        (6, 1.0, 0.5),
        (3, 1.0, 1.0),
    ]


async def test_copy_top_retrieved_replays_the_neighbours_change_on_this_page() -> None:
    neighbour = episodes([1])[0][0]  # types "Bo" on seed 1's page
    query = ExperienceQuery(
        task=TASK, history=(), observation=page(2), action=parse_action("type [e2] [Bo] [0]"),
        neighbours=(Neighbour(seq=1, score=0.9, step=neighbour),),
    )  # fmt: skip
    prediction = await CopyTopRetrieved().predict(query)
    assert prediction.observation.state == page(2, "Bo").state  # seed 2's goal line kept, the box filled
    assert (prediction.reward, prediction.terminated) == (0.0, False)
    submit = episodes([1])[0][1]
    found = (Neighbour(seq=2, score=0.9, step=submit),)
    query = ExperienceQuery(task=TASK, history=(), observation=page(2), action=submit.action, neighbours=found)
    prediction = await CopyTopRetrieved().predict(query)
    assert (prediction.reward, prediction.terminated) == (1.0, True)
    alone = ExperienceQuery(task=TASK, history=(), observation=page(2), action=submit.action)
    assert (await CopyTopRetrieved().predict(alone)).observation == (await UnchangedPage().predict(alone)).observation


async def test_an_unusable_model_scores_zero_and_is_counted(tmp_path: Path) -> None:
    report = await run(tmp_path, BrokenModel(), open_loop=2)
    model = report.one_step["model"]
    assert model.failures == 15 and model.similarity == 0.0 and model.reward_accuracy == 0.0
    assert report.reward["model"].failed == 15 and report.reward["model"].true_negative == 0
    assert (report.deciding["model"].steps, report.deciding["model"].right) == (6, 0)  # the real ends, all wrong
    assert report.action_errors["model"].failures == 3
    # The error step is answered by the simulator's rule, the others end the simulation at once.
    first = report.open_loop["model"][0]
    assert (first.n, first.running) == (6, 3) and first.similarity == 0.5
    assert report.open_loop["model"][1].running == 0
    assert report.worst_cases == []  # nothing to compare: the unusable answers are listed apart, with the reason
    assert len(report.unusable_cases) == 1  # one per task
    assert report.unusable_cases[0].error == "no usable answer" and report.unusable_cases[0].predicted_state == ""


async def test_retrieval_never_returns_the_evaluated_episode_or_a_held_out_pair(tmp_path: Path) -> None:
    oracle = OracleModel(all_steps(SEEDS))
    held_out = ((TASK.task_id, 11), (TASK.task_id, 4))
    await run(tmp_path, oracle, exclude_task_seeds=held_out, open_loop=3, neighbours=8)
    assert len(oracle.seen) == 15 + 12  # one step for each step, open loop for each but the rule-answered errors
    retrieved = 0
    for query, neighbours in oracle.seen:
        for neighbour in neighbours:
            retrieved += 1
            assert neighbour.step.seed not in (11, 4)
            assert neighbour.step.episode_id != oracle.real(query).episode_id
    assert retrieved > 0


def test_a_limit_takes_whole_episodes_round_robin_over_tasks() -> None:
    steps = all_steps(range(4))
    other = [Step(**{f: getattr(s, f) for f in s.__struct_fields__ if f not in ("task_id", "episode_id")},
                  task_id="toy/other", episode_id="o-" + s.episode_id) for s in steps]  # fmt: skip
    chosen = select_episodes(list(reversed(steps + other)), limit=9)
    assert [(e[0].task_id, e[0].seed, len(e)) for e in chosen] == [
        ("toy/name", 0, 3), ("toy/other", 0, 3), ("toy/name", 0, 2),
    ]  # fmt: skip
    assert all([s.step_index for s in e] == list(range(len(e))) for e in chosen)
    assert sum(map(len, select_episodes(steps))) == len(steps)


def test_ablations_switch_the_template_off_and_say_why_a_row_does_not_apply() -> None:
    backend = OpenAIBackend(model="unused", base_url="http://127.0.0.1:9/v1")
    model = LLMExperienceModel(backend, config=ModelConfig(template=TemplateConfig(history=2, neighbours=3)))
    variants = ablation_variants(model, trained_with_reasoning=False)
    assert isinstance(variants["no_retrieval"], LLMExperienceModel)
    assert variants["no_retrieval"].config.template.neighbours == 0
    assert isinstance(variants["no_history"], LLMExperienceModel)
    assert variants["no_history"].config.template.history == 0
    assert variants["no_reasoning"] == "the model was trained without reasoning"
    thinking = LLMExperienceModel(backend, config=ModelConfig(template=TemplateConfig(reasoning=True, history=0)))
    variants = ablation_variants(thinking, trained_with_reasoning=True)
    assert isinstance(variants["no_reasoning"], LLMExperienceModel)
    assert variants["no_reasoning"].config.template.reasoning is False
    assert variants["no_history"] == "the model was trained without history"


async def test_ablation_rows_and_the_flat_metrics(tmp_path: Path) -> None:
    steps = all_steps(SEEDS)
    oracle = OracleModel(steps)
    async with open_store(tmp_path / "store") as store:
        await fill_store(store, SEEDS)
        report = await validate(
            oracle, steps, store=store, config=ValidationConfig(open_loop=2),
            ablations={"no_retrieval": WrongModel(steps), "no_reasoning": "the model was trained without reasoning"},
        )  # fmt: skip
    assert list(report.ablations) == ["full", "no_retrieval", "no_reasoning"]
    assert report.ablations["full"] == report.one_step["model"]
    assert report.ablations["no_reasoning"] == "the model was trained without reasoning"
    data = json.loads(json.dumps(report.as_dict()))
    assert data["ablations"]["no_reasoning"] == {"n/a": "the model was trained without reasoning"}
    assert data["ablations"]["no_retrieval"]["reward_accuracy"] == 0.0
    assert set(data["one_step"]) == {"model", "copy_top_retrieved", "unchanged"}
    metrics = report.as_metrics()
    assert metrics["validate/model/reward_accuracy"] == 1.0 and metrics["validate/model/deciding_accuracy"] == 1.0
    assert data["deciding"]["unchanged"] == {
        "steps": 6, "right": 0, "accuracy": 0.0, "by_task": {"toy/name": {"steps": 6, "right": 0, "accuracy": 0.0}}
    }  # fmt: skip
    assert metrics["validate/ablation/no_retrieval/reward_accuracy"] == 0.0
    assert metrics["validate/open_loop/model/similarity@2"] == 1.0
    assert all(key.startswith("validate/") for key in metrics)


async def test_validate_refuses_a_store_without_real_steps() -> None:
    from dreamgym.core import ConfigError

    with pytest.raises(ConfigError, match="no real steps"):
        await validate(UnchangedPage(), [], store=None)


async def test_the_store_is_left_readable(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_store(store, SEEDS)
    async with LmdbReplayStore(tmp_path / "store", readonly=True) as store:
        report = await validate(OracleModel(all_steps(SEEDS)), all_steps(SEEDS), store=store)
    assert report.one_step["model"].f1 == 1.0
