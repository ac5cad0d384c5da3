"""``dreamgym train`` as a user runs it: collect a real seed set in Chromium, then sim2real with tiny real models,
anchored to the collected demonstrations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import dreamgym, tensorboard_events
from tiny_models import TASK


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_collect_then_sim2real_then_resume(tmp_path: Path, tiny_models: tuple[Path, Path]) -> None:
    policy, sim = tiny_models
    store, out = tmp_path / "store", tmp_path / "run"
    dreamgym("collect", "--store", str(store), "--tasks", TASK, "--seeds", "0-1", "--max-steps", "3",
             "--embedder", "hashing-64")  # fmt: skip
    train = (
        "train", "--mode", "sim2real", "--updates", "2", "--switch-at", "1", "--group-size", "2",
        "--groups-per-update", "1", "--tasks", TASK, "--train-seeds", "0-1", "--eval-seeds", "1000",
        "--policy-model", str(policy), "--sim-model", str(sim), "--store", str(store), "--out", str(out),
        "--max-steps", "3", "--lr", "1e-3", "--anchor-weight", "0.5", "--json",
    )  # fmt: skip
    result = json.loads(dreamgym(*train).stdout)
    assert (result["update"], result["switched_at"]) == (2, 1)
    assert (result["synthetic_groups"], result["real_groups"]) == (1, 1)
    assert result["real_steps"] > 0 and result["synthetic_steps"] > 0 and result["model_calls"] > 0
    assert [e["update"] for e in result["evaluations"]] == [0, 2]
    assert all(e["episodes"] == 1 for e in result["evaluations"]), [e["cut_reasons"] for e in result["evaluations"]]
    assert (out / "checkpoint-1" / "dreamgym_trainer.json").exists()  # kept at the switch
    assert (out / "checkpoint-2" / "dreamgym_trainer.json").exists() and (out / "final").is_dir()
    logged = tensorboard_events(out / "runs")  # every figure reaches TensorBoard through TRL's loggers
    assert [step for step, _ in logged["scalars"]["eval/success_rate"]] == [0, 2]
    assert [step for step, _ in logged["scalars"]["train/synthetic_groups"]][-1] == 2
    # the anchor: the demonstrator's episodes collected above, on the training seeds
    assert {"train/loss", "train/anchor_loss", "eval/episodes", "train/real_transitions"} <= set(logged["scalars"])
    assert f"| {'miniwob/' + TASK} | 1000 |" in logged["texts"]["eval/examples/text_summary"][0]
    kinds = {json.loads(line)["kind"] for line in (out / "metrics.jsonl").read_text().splitlines()}
    assert kinds >= {"train", "eval"}

    again = json.loads(dreamgym(*train).stdout)  # a finished run resumes at its end and trains no further
    assert (again["update"], again["real_steps"], again["synthetic_steps"]) == (
        2, result["real_steps"], result["synthetic_steps"]
    )  # fmt: skip
