"""``dreamgym demo`` end to end, as a user runs it: real Chromium, real local transformers models (tiny, built here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import DEMO_PAGE_PROBE, OpenedPage, dreamgym, open_page, tensorboard_events
from tiny_models import TASK

from dreamgym.bridge import BrowserConfig, BrowserPool
from dreamgym.core import ConfigError
from dreamgym.jobs.demo import PHASES, DemoSettings
from dreamgym.replay import LmdbReplayStore


async def stored_seeds(path: Path) -> set[int | None]:
    async with LmdbReplayStore(path, readonly=True) as store:
        last = (await store.stats()).last_seq
        return {step.seed for step in await store.get_steps(range(1, last + 1))}


async def shadow_model_ids(path: Path) -> dict[str, set[str]]:
    """The experience models that shadowed each training update's real steps (by group id prefix)."""
    async with LmdbReplayStore(path, readonly=True) as store:
        last = (await store.stats()).last_seq
        steps = [s for s in await store.get_steps(range(1, last + 1)) if s.episode_id.endswith("/shadow")]
    return {f"train/u{u}": {s.experience_model_id for s in steps if s.group_id.startswith(f"train/u{u}/")}
            for u in (0, 1)}  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_runs_every_phase_and_reports_honest_counts(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = dreamgym(
        "demo", "--out", str(out), "--tasks", TASK, "--sim-epochs", "1", "--warm-epochs", "1",
        "--train-seeds", "0-1", "--held-out-seeds", "1000-1001", "--demonstration-seeds", "2-3", "--group-size", "2",
        "--rollout-groups", "2",
        "--real-share", "0.5", "--max-steps", "3", "--embedder", "hashing-64", "--train-updates", "2",
        "--train-groups-per-update", "2", "--report-to", "tensorboard", "--sim-refit-every", "1",
        "--sim-refit-epochs", "0.5", "--sim-layers", "3", "--sim-alias", "--sim-builds", "2",
        "--sim-more-epochs", "0.5",
    )  # fmt: skip
    assert "success before training" in result.stdout and "simulator reward accuracy" in result.stdout
    assert "did it learn?" in result.stdout
    # each phase ends in one summary line on stderr: the demo-size experience model, the policy's GRPO updates
    assert "✓ train the experience model" in result.stderr and "✓ train the policy (mixed, GRPO): 2 updates" in (
        result.stderr
    )

    report = json.loads((out / "report.json").read_text())
    assert "success before training" in (out / "report.md").read_text()
    # phase 2 checked its build on the demonstrations, and trained the next seed where it failed; one is kept
    checks = report["experience_model_checks"]
    # a build that fails is trained half an epoch more (--sim-more-epochs), not trained anew with the next seed
    assert [(check["seed"], check["epochs"]) for check in checks] == [(0, 1.0), (0, 1.5)][: len(checks)]
    assert 1 <= len(checks) <= 2
    assert sum(check["kept"] for check in checks) == 1 and list(checks[0]["tasks"]) == [f"miniwob/{TASK}"]
    assert checks[-1]["passed"] or len(checks) == 2
    model_meta = json.loads((out / "experience-model" / "dreamgym_model.json").read_text())
    assert model_meta["template"]["target_alias"] and model_meta["config"]["scratch"]["layers"] == 3
    assert "Experience-model builds checked before use" in (out / "report.md").read_text()
    training = report["training"]
    assert training["status"] == "trained", training
    metrics = training["metrics"]
    # 2 updates of 2 groups, half drawn real; a group whose episodes all scored alike is played again
    # (resample_flat). The trust gate plays every group drawn synthetic on real pages here: a simulator earns a
    # task with 8 shadowed deciding steps, and 2 updates of groups of 2 never give it that many.
    assert metrics["train/updates"] == 2
    assert metrics["train/synthetic_groups"] == 0 and metrics["train/gated_groups"] >= 2
    assert metrics["train/real_groups"] >= 2 + metrics["train/gated_groups"]
    assert metrics["train/real_steps"] > 0 and metrics["train/synthetic_steps"] == 0
    assert metrics["train/teaching_groups/synthetic"] == 0  # what each side taught: all real here
    assert metrics["train/teaching_groups/real"] <= metrics["train/real_groups"]
    assert "groups that carried a gradient" in (out / "report.md").read_text()
    # every real step was one policy turn: the model ran on its prompt, or a recent equal prompt's logits served
    turns = metrics["train/policy_prompts_run"] + metrics["train/policy_prompts_reused"]
    assert metrics["train/policy_prompts_run"] > 0 and turns >= metrics["train/real_steps"]
    assert "drawn synthetic played real" in result.stdout + (out / "report.md").read_text()
    # every update anchored to the warm start's demonstrations (the seed set's and demonstration seeds')
    assert metrics["train/anchor_examples"] > 0 and metrics["train/anchor_weight"] == 1.0
    assert "anchored to the warm start's" in (out / "report.md").read_text()
    # one refit, after update 1 (none after the last): half a pass over the store's real steps, from the demo-size
    # model; update 2's real steps are shadowed by the refitted model, and only its answers count for the gate
    assert metrics["train/sim_refits"] == 1 and metrics["train/sim_refit_seconds"] > 0
    refitted = out / "train" / "sim-refits" / "refit-1"
    assert json.loads((refitted / "dreamgym_model.json").read_text())["parent"] == str(out / "experience-model")
    assert "experience model refit 1 time" in (out / "report.md").read_text()
    shadow_models = anyio.run(shadow_model_ids, out / "store")
    assert shadow_models["train/u0"] and all("refit-1" not in m for m in shadow_models["train/u0"])
    assert shadow_models["train/u1"] and all("refit-1" in m for m in shadow_models["train/u1"])
    assert report["real_steps"] == (
        report["seed_set"]["steps"] + report["rollouts"]["real_steps"] + metrics["train/real_steps"]
    )
    assert report["seed_set"]["steps"] > 0
    assert report["seed_set"]["episodes"] == 6  # 2 seeds x (demonstrator + explorer + near miss)
    # the trackers get the demo's own figures beside the trainer's: before and after, the simulator's fidelity
    scalars = tensorboard_events(out / "train" / "runs")["scalars"]
    assert scalars["eval/before/success_rate"][-1][1] == pytest.approx(report["before"]["success_rate"])
    assert scalars["eval/after/success_rate"][-1][1] == pytest.approx(report["after"]["success_rate"])
    assert "eval/fidelity/all_held-out_steps/model/similarity" in scalars and "train/loss" in scalars
    assert report["rollouts"]["real_groups"] == report["rollouts"]["synthetic_groups"] == 1
    assert report["rollouts"]["real_steps"] > 0 and report["synthetic_steps"] > 0
    for phase in ("before", "after"):
        played = report[phase]["episodes"] + report[phase]["cut"]
        assert played == 2  # 1 task x 2 held-out seeds (an infrastructure cut is counted apart)
        assert len(report[phase]["success_ci95"]) == 2
    held = report["simulator_held_out"]
    assert held["n"] == report["before"]["steps"]  # every held-out real step of the first evaluation, scored
    assert 0 <= held["reward_correct"] <= held["n"]
    assert held["zero_reward_correct"] <= held["majority_reward_correct"] <= held["n"]
    shadow = report["shadow"]
    assert shadow["n"] == report["rollouts"]["real_steps"]  # every real rollout step was shadowed
    assert 0 <= shadow["reward_correct"] <= shadow["n"] and shadow["unusable"] <= shadow["n"]
    assert list(report["phases_s"]) == list(PHASES)  # no model given: the demo trains its demo-size one
    assert report["models"]["experience_model_kind"] == "demo-size"
    assert (out / "experience-model" / "config.json").exists() and (out / "policy" / "config.json").exists()
    warm = report["warm_start"]
    # the warm start clones the seed set's 2 demonstrations and those of the 2 demonstration seeds, which stay
    # out of the demo's store (the experience model never trains on or retrieves them)
    assert warm["base"] == "tiny index policy" and warm["episodes"] == 4 and warm["examples"] > 0

    # Held-out pages stay in evaluation's own store, out of the simulator's reach.
    assert anyio.run(stored_seeds, out / "store") == {0, 1}
    assert anyio.run(stored_seeds, out / "demonstrations") == {2, 3}
    assert anyio.run(stored_seeds, out / "eval-store") == {1000, 1001}

    # The page: the fidelity table beside both baselines, the curve of both updates, the shadowed examples.
    fidelity = report["simulator_held_out_fidelity"]
    assert list(fidelity["all held-out steps"]) == ["model", "copy_top_retrieved", "unchanged"]
    assert fidelity["all held-out steps"]["model"]["n"] == held["n"]
    assert sum(split["model"]["n"] for name, split in fidelity.items() if name.startswith("page ")) == held["n"]
    assert [row["update"] for row in report["learning_curve"]] == [1, 2]
    shown = len(report["examples"])  # a solved, a failed, the worst predicted: of the 2 real rollout episodes here
    assert 0 < shown <= min(3, report["rollouts"]["real_episodes"])
    opened = anyio.run(open_demo_page, out / "report.html")
    assert opened.problems == []
    assert opened.requests == [(out / "report.html").as_uri()]
    assert opened.probe["episodes"] == shown
    assert opened.probe["overflowing"] == 0
    assert "Simulator on held-out real steps, one step at a time" in opened.probe["headings"]


async def open_demo_page(path: Path) -> OpenedPage:
    async with BrowserPool(BrowserConfig(processes=1, max_contexts=1)) as pool:
        return await open_page(pool, path, DEMO_PAGE_PROBE)


def test_missing_default_experience_model_names_the_command_that_builds_it(tmp_path: Path) -> None:
    result = dreamgym(
        "demo", "--out", str(tmp_path / "demo"), "--sim-model", "default",
        check=False, env={"DREAMGYM_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 1
    assert "dreamgym sim build-default" in result.stderr and "python -m dreamgym.jobs.sim_default" in result.stderr
    assert not (tmp_path / "demo").exists()  # it failed before collecting anything


def test_settings_refuse_held_out_seeds_that_are_also_training_seeds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="held-out seeds must differ"):
        DemoSettings(train_seeds=(0, 1), held_out_seeds=(1, 1000), out=tmp_path)
    with pytest.raises(ConfigError, match="held-out seeds must differ"):
        DemoSettings(train_seeds=(0, 1), demonstration_seeds=(5, 1000), held_out_seeds=(1000,), out=tmp_path)
    with pytest.raises(ConfigError, match="no scripted demonstrator"):
        DemoSettings(tasks=("no-such-task",), out=tmp_path)
    with pytest.raises(ConfigError, match="step_cost must be in"):
        DemoSettings(step_cost=1.0, out=tmp_path)  # before any phase runs, not at the train phase
    with pytest.raises(ConfigError, match="resample_flat is out of range"):
        DemoSettings(resample_flat=-1, out=tmp_path)
    with pytest.raises(ConfigError, match="micro_batch_size must divide the 16 episodes"):
        DemoSettings(micro_batch_size=3, out=tmp_path)
    with pytest.raises(ConfigError, match="sim_layers and sim_builds must be >= 1"):
        DemoSettings(sim_builds=0, out=tmp_path)
    with pytest.raises(ConfigError, match="sim_more_epochs must be >= 0"):
        DemoSettings(sim_more_epochs=-0.5, out=tmp_path)


def test_every_demo_setting_is_a_flag_and_the_flags_build_the_settings(tmp_path: Path) -> None:
    import dataclasses

    from dreamgym.cli import _parser
    from dreamgym.cli.demo import demo_settings
    from dreamgym.jobs.demo import DemoSettings
    from dreamgym.jobs.sim_default import default_model_dir

    argv = {
        "tasks": (("--tasks", "miniwob:click-button,enter-text"), ("click-button", "enter-text")),
        "train_seeds": (("--train-seeds", "0-2,7"), (0, 1, 2, 7)),
        "held_out_seeds": (("--held-out-seeds", "1000-1001"), (1000, 1001)),
        "demonstration_seeds": (("--demonstration-seeds", "40-41"), (40, 41)),
        "explorers": (("--explorers", "2"), 2),
        "near_misses": (("--near-misses", "0"), 0),
        "group_size": (("--group-size", "3"), 3),
        "rollout_groups": (("--rollout-groups", "5"), 5),
        "real_share": (("--real-share", "0.5"), 0.5),
        "max_steps": (("--max-steps", "4"), 4),
        "real_concurrency": (("--real-concurrency", "1"), 1),
        "temperature": (("--temperature", "0.7"), 0.7),
        "eval_temperature": (("--eval-temperature", "0.1"), 0.1),
        "policy_model": (("--policy-model", str(tmp_path / "p")), tmp_path / "p"),
        "warm_epochs": (("--warm-epochs", "0.5"), 0.5),
        "sim_model": (("--sim-model", str(tmp_path / "s")), tmp_path / "s"),
        "sim_epochs": (("--sim-epochs", "2.5"), 2.5),
        "sim_outcome_weight": (("--sim-outcome-weight", "5"), 5.0),
        "sim_layers": (("--sim-layers", "4"), 4),
        "sim_alias": (("--sim-alias",), True),
        "sim_builds": (("--sim-builds", "3"), 3),
        "sim_more_epochs": (("--sim-more-epochs", "0.5"), 0.5),
        "outcome_judge": (("--no-outcome-judge",), False),
        "sim_refit_every": (("--sim-refit-every", "3"), 3),
        "sim_refit_epochs": (("--sim-refit-epochs", "0.25"), 0.25),
        "out": (("--out", str(tmp_path / "o")), tmp_path / "o"),
        "train_updates": (("--train-updates", "0"), 0),
        "train_groups_per_update": (("--train-groups-per-update", "3"), 3),
        "resample_flat": (("--resample-flat", "2"), 2),
        "micro_batch_size": (("--micro-batch-size", "3"), 3),
        "sim_trust": (("--sim-trust", "0.8"), 0.8),
        "step_cost": (("--step-cost", "0.05"), 0.05),
        "anchor_weight": (("--anchor-weight", "0"), 0.0),
        "learning_rate": (("--learning-rate", "0.01"), 0.01),
        "seed": (("--seed", "4"), 4),
        "report_to": (("--report-to", "tensorboard"), ("tensorboard",)),
    }
    fields = {item.name for item in dataclasses.fields(DemoSettings)} - {"embedder"}  # --embedder takes a name
    assert set(argv) == fields
    flags = [flag for given, _ in argv.values() for flag in given]
    settings = demo_settings(_parser(["demo", *flags]).parse_args(["demo", *flags, "--embedder", "hashing-32"]))
    for name, (_, expected) in argv.items():
        assert getattr(settings, name) == expected, name
    assert settings.embedder is not None and settings.embedder.dim == 32
    default = demo_settings(_parser(["demo"]).parse_args(["demo", "--sim-model", "default"])).sim_model
    assert default == default_model_dir()
    assert demo_settings(_parser(["demo"]).parse_args(["demo"])).sim_model is None  # a demo-size model


def test_the_warm_starts_demonstrations_come_in_task_and_seed_order_whatever_order_they_were_stored_in(
    tmp_path: Path,
) -> None:
    """Two browser contexts finish episodes in any order; the tokenizer and the cloning batches are drawn from this
    list, so a seed must give the same list whichever finished first."""
    import msgspec
    from helpers import make_step

    from dreamgym.bridge import MiniWobDemonstrator
    from dreamgym.jobs._demo_policy import _demonstrator_episodes
    from dreamgym.replay import HashingEmbedder

    pairs = [("click-option", 3), ("click-button", 7), ("click-option", 1), ("click-button", 2)]

    def steps_of(task: str, seed: int) -> list[Any]:
        return [
            msgspec.structs.replace(
                make_step(index, task_id=f"miniwob/{task}", episode_id=f"ep-{task}-{seed}", seed=seed),
                policy_id=MiniWobDemonstrator.policy_id,
            )
            for index in (1, 0)  # stored last step first
        ]

    async def episodes_when_stored(order: list[tuple[str, int]], out: Path) -> list[list[tuple[str, int, int]]]:
        settings = DemoSettings(tasks=("click-button", "click-option"), train_seeds=(1, 2, 3, 7),
                                held_out_seeds=(1000,), demonstration_seeds=(), out=out)  # fmt: skip
        async with LmdbReplayStore(settings.store_dir, embedder=HashingEmbedder(16)) as store:
            for task, seed in order:
                await store.append(steps_of(task, seed))
            await store.append([make_step(0, task_id="miniwob/click-button", episode_id="explorer", seed=2)])
        episodes = await _demonstrator_episodes(settings)
        return [[(step.task_id, step.seed or 0, step.step_index) for step in episode] for episode in episodes]

    first = anyio.run(episodes_when_stored, pairs, tmp_path / "a")
    second = anyio.run(episodes_when_stored, pairs[::-1], tmp_path / "b")
    assert first == second == [
        [(f"miniwob/{task}", seed, 0), (f"miniwob/{task}", seed, 1)]
        for task, seed in sorted(pairs)
    ]  # fmt: skip
