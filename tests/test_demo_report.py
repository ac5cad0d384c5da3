"""The demo's report from real parts: a real store of shadowed toy episodes and training episodes, a real
validation run on held-out toy steps, written to report.json and a report.html that Chromium opens offline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers import DEMO_PAGE_PROBE, open_page
from validate_helpers import INVENTED, TASK, OracleModel, WrongModel, all_steps, episodes, open_store

from dreamgym.bridge import BrowserPool
from dreamgym.core import Episode, Observation, Step
from dreamgym.core.protocols import ExperienceQuery, Prediction
from dreamgym.jobs._demo_figures import (
    ALL_STEPS,
    fidelity_by_change,
    pick_examples,
    shadowed_episodes,
    training_curve,
)
from dreamgym.jobs._demo_report import score_predictions, score_shadows, score_summary
from dreamgym.jobs.demo import DemoReport, RolloutFigures, write_report
from dreamgym.replay import LmdbReplayStore
from dreamgym.runtime import GroupResult, Rollout
from dreamgym.simulator import predict_steps, teacher_forced_queries
from dreamgym.trainer import EvalResult, SeedOutcome, TaskScore
from dreamgym.validate import ValidationConfig, validate

pytestmark = pytest.mark.anyio

ROLLOUT_SEEDS = (0, 1, 2)
HELD_OUT_SEEDS = (10, 11)


class HalfRightModel(WrongModel):
    """Right on even seeds, wrong (an invented element, reward and end flipped) on odd ones."""

    model_id = "test:half-right"

    async def predict(self, query: ExperienceQuery) -> Prediction:
        if (self.real(query).seed or 0) % 2 == 0:
            return await OracleModel.predict(self, query)
        return await super().predict(query)


def summary(steps: list[Step], *, group_id: str) -> Episode:
    last = steps[-1]
    return Episode(
        episode_id=last.episode_id, task_id=last.task_id, source="real", group_id=group_id, seed=last.seed,
        num_steps=len(steps), total_reward=last.reward, success=last.reward >= 1.0, terminated=last.terminated,
    )  # fmt: skip


def shadow(step: Step, *, invent: bool = False, cut: str = "") -> Step:
    """The simulator's prediction of ``step`` as the runtime stores it; ``invent`` adds a line and flips the reward."""
    state = step.next_observation.state + (f"\n{INVENTED}" if invent else "")
    return msgspec.structs.replace(
        step, source="synthetic", episode_id=step.episode_id + "/shadow", experience_model_id="test:shadow",
        next_observation=Observation(state=state, goal=step.observation.goal),
        reward=1.0 - step.reward if invent else step.reward, truncated=bool(cut), truncation_reason=cut,
    )  # fmt: skip


async def store_rollouts(store: LmdbReplayStore) -> list[GroupResult]:
    """Real rollout groups of the toy task, shadowed: seed 1's detour badly (invented lines, flipped rewards,
    its first prediction missing), seed 1's right episode with a malformed answer, the rest exactly."""
    results = []
    for seed in ROLLOUT_SEEDS:
        rollouts = []
        for steps in episodes([seed]):
            episode = summary(steps, group_id=f"rollout/g{seed}")
            detour, bad = "detour" in episode.episode_id, seed == 1
            guesses = [shadow(s, invent=bad and detour, cut="model_output" if bad and not detour and n else "")
                       for n, s in enumerate(steps) if not (bad and detour and n == 0)]  # fmt: skip
            await store.append(steps, episodes=[episode])
            await store.append(guesses)
            rollouts.append(Rollout(episode=episode, steps=tuple(steps)))
        results.append(GroupResult(group_id=f"rollout/g{seed}", task=TASK, source="real",
                                   rollouts=tuple(rollouts), consistent=True))  # fmt: skip
    return results


def played(group_id: str, source: str, reward: float, n: int, *, cut: str = "") -> Episode:
    return Episode(
        episode_id=f"{group_id}/{n}", task_id=TASK.task_id, source=source,  # type: ignore[arg-type]
        group_id=group_id, total_reward=reward, success=reward >= 1.0, terminated=not cut, truncated=bool(cut),
        truncation_reason=cut,
    )  # fmt: skip


async def store_training(store: LmdbReplayStore, run: Path) -> Path:
    """Two updates' episodes (one cut by a deadline), and the trainer's metrics.jsonl of them."""
    for episode in (
        played("train/u0/g0", "real", 1.0, 0), played("train/u0/g0", "real", 0.0, 1),
        played("train/u0/g1", "synthetic", 1.0, 0), played("train/u0/g1", "synthetic", 1.0, 1),
        played("train/u1/g0", "real", 1.0, 0), played("train/u1/g0", "real", 1.0, 1),
        played("train/u1/g0", "real", 0.0, 2, cut="deadline"),
        played("train/u1/g1r1", "synthetic", 0.0, 0), played("train/u1/g1r1", "synthetic", 1.0, 1),
    ):  # fmt: skip
        await store.put_episode(episode)
    run.mkdir(parents=True, exist_ok=True)
    rows = [{"kind": "train", "update": 0, "train/loss": 0.1, "train/reward": 0.75},
            {"kind": "eval", "update": 1, "eval/success_rate": 0.5},
            {"kind": "train", "update": 1, "train/loss": 0.2, "train/reward": 0.5}]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run / "metrics.jsonl"


def evaluation(successes: int, n: int = 8) -> EvalResult:
    """``n`` held-out seeds, the first ``successes`` of them solved."""
    tasks = (TaskScore(task_id=TASK.task_id, episodes=n, successes=successes, steps=2 * n),)
    outcomes = tuple(SeedOutcome(task_id=TASK.task_id, seed=seed, solved=seed < successes) for seed in range(n))
    return EvalResult(episodes=n, successes=successes, steps=2 * n, tasks=tasks, outcomes=outcomes)


async def demo_report(tmp_path: Path) -> DemoReport:
    held = all_steps(HELD_OUT_SEEDS)
    async with open_store(tmp_path / "store") as store:
        results = await store_rollouts(store)
        metrics = await store_training(store, tmp_path / "train")
        await store.flush()
        validation = await validate(HalfRightModel(held), held, store=store, config=ValidationConfig(worst_cases=0))
        shadowed = await shadowed_episodes(store, results)
        curve = await training_curve(store, metrics)
    training: dict[str, Any] = {"status": "trained", "metrics": {
        "train/updates": 2.0, "train/real_groups": 2.0, "train/synthetic_groups": 2.0, "train/dropped_groups": 0.0,
        "train/real_steps": 9.0, "train/synthetic_steps": 8.0}}  # fmt: skip
    real_steps = sum(len(r.steps) for g in results for r in g.rollouts)
    return DemoReport(
        settings={"tasks": [TASK.task_id]}, models={"policy": "test-policy", "experience_model": "test:half-right"},
        seed_set={"steps": 20, "episodes": 8, "successes": 4, "vectors": 20}, warm_start={"base": "test-policy"},
        before=evaluation(1), rollouts=RolloutFigures(
            groups=3, real_groups=3, synthetic_groups=0, real_episodes=6, synthetic_episodes=0,
            real_steps=real_steps, synthetic_steps=0, real_successes=3, synthetic_successes=0),
        shadow=score_shadows(shadowed),
        held_out=score_summary(validation.one_step["model"], held, validation.deciding["model"]),
        training=training, after=evaluation(8), store={"real": real_steps, "synthetic": real_steps},
        phases={"1 collect": 1.0}, held_out_fidelity=fidelity_by_change(validation), curve=curve,
        examples=pick_examples(shadowed),
    )  # fmt: skip


async def test_the_examples_are_a_solved_a_failed_and_the_worst_predicted_episode(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        examples = pick_examples(await shadowed_episodes(store, await store_rollouts(store)))
    assert [(e.why, e.seed, e.success) for e in examples] == [
        ("solved", 0, True), ("failed", 0, False), ("prediction differed most", 1, False),
    ]  # fmt: skip
    worst = examples[2].steps
    assert worst[0].predicted_reward is None
    assert worst[0].error == "no prediction stored (it raised)"
    assert worst[1].predicted_state.endswith(INVENTED)
    assert examples[0].similarity == 1.0
    assert examples[0].reward_correct == 2


async def test_an_episode_that_played_as_a_chosen_one_did_is_not_shown_again(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        shadowed = await shadowed_episodes(store, await store_rollouts(store))
    worst = pick_examples(shadowed)[2]
    original = next(s for s in shadowed if s.episode.episode_id == worst.episode_id)
    twin = dataclasses.replace(original, episode=msgspec.structs.replace(original.episode, episode_id="twin"))
    examples = pick_examples([*shadowed, twin], count=4)  # the twin would be the next most different
    assert "twin" not in [e.episode_id for e in examples]
    assert [e.why for e in examples] == ["solved", "failed", "prediction differed most", "next most different"]
    assert len({e.episode_id for e in examples}) == 4
    only_twins = pick_examples([original, twin])  # nothing else to show: one example, not the same one twice
    assert [e.episode_id for e in only_twins] == [original.episode.episode_id]


async def test_a_malformed_shadow_answer_is_unusable_and_scored_wrong(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        shadowed = await shadowed_episodes(store, await store_rollouts(store))
    seed_1_right = next(s for s in shadowed if s.episode.episode_id == "toy-1-right")
    assert seed_1_right.reasons == ("", "the model's answer was malformed after its retries")
    score = score_shadows(shadowed)
    assert score.n == 15
    assert score.unusable == 2  # seed 1: the malformed answer and the missing one


async def test_the_learning_curve_splits_each_update_by_side_and_leaves_cut_episodes_out(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await store_rollouts(store)  # rollout groups are not training's
        curve = await training_curve(store, await store_training(store, tmp_path / "train"))
    rows = [(r.update, r.real_reward, r.real_episodes, r.synthetic_reward, r.synthetic_episodes) for r in curve]
    assert rows == [(1, 0.5, 2, 1.0, 2), (2, 1.0, 2, 0.5, 2)]
    assert [r.trained_reward for r in curve] == [0.75, 0.5]


async def test_held_out_counts_from_validate_agree_with_scoring_each_prediction(tmp_path: Path) -> None:
    held = all_steps(HELD_OUT_SEEDS)
    model = HalfRightModel(held)
    async with open_store(tmp_path / "store") as store:
        validation = await validate(model, held, store=store, config=ValidationConfig(worst_cases=0))
        queries = await teacher_forced_queries(held, store=store)
        made = await predict_steps(model, queries)
    direct = score_predictions([step for step, _ in queries], made.predictions)
    derived = score_summary(validation.one_step["model"], held, validation.deciding["model"])
    assert dataclasses.replace(derived, similarity=0.0) == dataclasses.replace(direct, similarity=0.0)
    assert derived.similarity == pytest.approx(direct.similarity, abs=1e-4)
    assert derived.reward_correct == 5  # right on the even seed only
    # deciding: the even seed's two Submits (right); on the odd seed every flipped end decides (5 steps, wrong)
    assert dict(derived.deciding_by_task) == {TASK.task_id: (7, 2)}
    assert (derived.deciding, derived.deciding_correct) == (7, 2)


async def test_report_json_carries_the_fidelity_table_the_curve_and_the_examples(tmp_path: Path) -> None:
    write_report(await demo_report(tmp_path), tmp_path / "out")
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    fidelity = data["simulator_held_out_fidelity"]
    assert list(fidelity) == [ALL_STEPS, "page changed", "page unchanged"]
    assert list(fidelity[ALL_STEPS]) == ["model", "copy_top_retrieved", "unchanged"]
    assert fidelity[ALL_STEPS]["model"]["n"] == 10
    # Only typing changes these pages, and the simulator's typed-text rule writes it for every predictor: keeping
    # the page is right on every page, changed or not; the split still counts each step once.
    assert (
        fidelity["page changed"]["unchanged"]["similarity"]
        == fidelity["page unchanged"]["unchanged"]["similarity"]
        == 1.0
    )
    assert fidelity["page changed"]["model"]["n"] + fidelity["page unchanged"]["model"]["n"] == 10
    assert [row["update"] for row in data["learning_curve"]] == [1, 2]
    held = data["simulator_held_out"]
    assert (held["deciding"], held["deciding_correct"], held["deciding_by_task"]) == (7, 2, {TASK.task_id: [7, 2]})
    assert data["shadow"]["deciding"] >= data["shadow"]["deciding_correct"] > 0
    assert [example["why"] for example in data["examples"]] == ["solved", "failed", "prediction differed most"]
    assert data["examples"][2]["steps"][1]["predicted_state"].endswith(INVENTED)
    # before 1/8, after 8/8 on the same seeds: 7 solved only after, none only before; 2 * (1/2)**7
    assert data["paired"] == {"pairs": 8, "only_after": 7, "only_before": 0, "both": 1, "p_value": 2 / 128}
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "the same seeds, pair by pair | +7 / −0 | of 8 pairs: 7 solved only after training, 0 only" in markdown
    assert "exact McNemar p = 0.016" in (tmp_path / "out" / "report.html").read_text()


async def test_chromium_opens_the_demo_page_offline_without_errors(tmp_path: Path, pool: BrowserPool) -> None:
    write_report(await demo_report(tmp_path), tmp_path / "out")
    html_path = tmp_path / "out" / "report.html"
    opened = await open_page(pool, html_path, DEMO_PAGE_PROBE)
    seen = opened.probe
    assert opened.problems == []
    assert opened.requests == [html_path.as_uri()]  # the page itself, nothing else
    assert seen["banner"].startswith("Did the policy learn? learnt")
    assert "1/8" in seen["banner"]
    assert "8/8" in seen["banner"]
    assert "Simulator on held-out real steps, one step at a time" in seen["headings"]
    assert "Learning curve" in seen["headings"]
    assert seen["episodes"] == 3
    assert seen["sides"] == 7  # solved 2 steps + failed 3 + the worst 3, less its first (no usable prediction)
    assert seen["overflowing"] == 0
    assert not seen["wider"]  # nothing makes the page scroll sideways
    html = html_path.read_text()
    assert "Where an outcome is decided" in html and "2/7 = 0.29" in html  # the held-out deciding steps
