"""``dreamgym demo`` end to end, as a user runs it: real Chromium, real local transformers models (tiny, built here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from dreamgym.agents import render_observation, system_message
from dreamgym.core import ConfigError, Observation
from dreamgym.demo import DemoSettings
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.sim_default import CollectPlan, collect_miniwob
from dreamgym.simulator import SimTrainConfig, TemplateConfig, build_sft_examples, train_experience_model
from dreamgym.simulator._sft import ScratchModelConfig, scratch_model, train_tokenizer

TASK = "click-button"
TINY = ScratchModelConfig(vocab_size=600, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip
TEMPLATE = TemplateConfig(history=1, neighbours=2)


def dreamgym(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dreamgym.cli", *args],
        capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})},
    )  # fmt: skip


def tiny_policy(path: Path) -> Path:
    """A randomly initialised tiny Llama with a chat-template tokenizer, saved the way LocalPolicy.load reads it."""
    page = Observation(
        state='[e1] RootWebArea "Click Test"\n  [e2] button "ONE"\n  [e3] button "TWO"', goal="Click ONE"
    )
    texts = [system_message("action"), render_observation(page), 'click [e2] "ONE"', "Click on the button."]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    scratch_model(tokenizer, TINY, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


async def tiny_experience_model(root: Path) -> Path:
    """A tiny experience model trained from scratch by the real SFT pipeline on real click-button episodes."""
    async with LmdbReplayStore(root / "store", embedder=HashingEmbedder(64)) as store:
        await collect_miniwob(store, CollectPlan(tasks=(TASK,), seeds=(0, 1), explorers=1, max_steps=3))
        await store.flush()
        examples = await build_sft_examples(store, TEMPLATE)
    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, learning_rate=3e-3, max_length=4096)
    return await anyio.to_thread.run_sync(
        lambda: train_experience_model(examples, root / "sim", config, template=TEMPLATE)
    )


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(policy directory, experience model directory)."""
    root = tmp_path_factory.mktemp("demo-models")
    return tiny_policy(root / "policy"), anyio.run(tiny_experience_model, root)


async def stored_seeds(path: Path) -> set[int | None]:
    async with LmdbReplayStore(path, readonly=True) as store:
        last = (await store.stats()).last_seq
        return {step.seed for step in await store.get_steps(range(1, last + 1))}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_runs_every_phase_and_reports_honest_counts(tmp_path: Path, tiny_models: tuple[Path, Path]) -> None:
    policy, sim = tiny_models
    out = tmp_path / "demo"
    result = dreamgym(
        "demo", "--out", str(out), "--policy-model", str(policy), "--sim-model", str(sim), "--tasks", TASK,
        "--train-seeds", "0-1", "--held-out-seeds", "1000-1001", "--group-size", "2", "--rollout-groups", "2",
        "--real-share", "0.5", "--max-steps", "3", "--embedder", "hashing-64", "--train-updates", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "success before training" in result.stdout and "simulator reward accuracy" in result.stdout

    report = json.loads((out / "report.json").read_text())
    assert "success before training" in (out / "report.md").read_text()
    training = report["training"]
    assert training["status"] == "trained", training
    metrics = training["metrics"]
    assert metrics["train/updates"] == 2 and metrics["train/real_groups"] == metrics["train/synthetic_groups"] == 2
    assert metrics["train/real_steps"] > 0 and metrics["train/synthetic_steps"] > 0
    assert report["real_steps"] == (
        report["seed_set"]["steps"] + report["rollouts"]["real_steps"] + metrics["train/real_steps"]
    )
    assert report["seed_set"]["steps"] > 0 and report["seed_set"]["episodes"] == 4  # 2 seeds x (demonstrator + 1)
    assert report["rollouts"]["real_groups"] == report["rollouts"]["synthetic_groups"] == 1
    assert report["rollouts"]["real_steps"] > 0 and report["synthetic_steps"] > 0
    for phase in ("before", "after"):
        assert report[phase]["episodes"] == 2  # 1 task x 2 held-out seeds
        assert len(report[phase]["success_ci95"]) == 2
    shadow = report["shadow"]
    assert shadow["n"] == report["rollouts"]["real_steps"]  # every real rollout step was shadowed
    assert 0 <= shadow["reward_correct"] <= shadow["n"] and shadow["unusable"] <= shadow["n"]
    assert set(report["phases_s"]) >= {"1 collect", "2 ground", "3 evaluate before", "4 rollouts", "5 train",
                                       "6 evaluate after"}  # fmt: skip

    # Held-out pages stay in evaluation's own store, out of the simulator's reach.
    assert anyio.run(stored_seeds, out / "store") == {0, 1}
    assert anyio.run(stored_seeds, out / "eval-store") == {1000, 1001}


def test_missing_default_experience_model_names_the_command_that_builds_it(tmp_path: Path) -> None:
    result = dreamgym("demo", "--out", str(tmp_path / "demo"), env={"DREAMGYM_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 1
    assert "make sim-default" in result.stderr and "python -m dreamgym.sim_default" in result.stderr
    assert not (tmp_path / "demo").exists()  # it failed before collecting anything


def test_settings_refuse_held_out_seeds_that_are_also_training_seeds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="held-out seeds must differ"):
        DemoSettings(train_seeds=(0, 1), held_out_seeds=(1, 1000), out=tmp_path)
    with pytest.raises(ConfigError, match="no scripted demonstrator"):
        DemoSettings(tasks=("no-such-task",), out=tmp_path)
