"""The synthetic side on text worlds: a tiny experience model trained on a text-world store by the real SFT
pipeline, then ``dreamgym rollout`` and ``dreamgym train`` in all three modes on generated games.

The tiny model's answers are mostly unusable (it has seen four transitions); these tests check that every
job runs text worlds through the same simulator path, not what the model predicts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from helpers import dreamgym
from tiny_models import TEMPLATE, TINY, tiny_policy

from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import SimTrainConfig, build_sft_examples, train_experience_model
from dreamgym.textworlds import GameInfo

SPEC = "textworld:custom?rooms=2&objects=3&quest=2"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, cache_home: Path, tiny_games: dict[int, GameInfo]) -> Path:
    """A store of demonstrator and random episodes, a tiny experience model trained on it, a tiny policy."""
    root = tmp_path_factory.mktemp("tw-sim")
    env = {"DREAMGYM_CACHE": str(cache_home)}
    for policy in ("demonstrator", "random"):
        dreamgym("collect", "--store", str(root / "store"), "--tasks", SPEC, "--seeds", "0-1", "--policy", policy,
                 "--max-steps", "4", "--embedder", "hashing-64", "--again", env=env)  # fmt: skip

    async def examples() -> list[object]:
        async with LmdbReplayStore(root / "store", embedder=HashingEmbedder(64)) as store:
            return list(await build_sft_examples(store, TEMPLATE))

    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, learning_rate=3e-3, max_length=4096)
    train_experience_model(anyio.run(examples)[:4], root / "sim", config, template=TEMPLATE)  # type: ignore[arg-type]
    tiny_policy(root / "policy")
    return root


def _run(setup: Path, cache_home: Path, *args: str) -> str:
    return dreamgym(*args, "--tasks", SPEC, "--sim-model", str(setup / "sim"), "--max-steps", "2",
                    env={"DREAMGYM_CACHE": str(cache_home)}).stdout  # fmt: skip


def test_rollout_plays_synthetic_episodes_of_text_worlds(setup: Path, cache_home: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(setup / "store", store)  # real first pages: synthetic groups start from them
    _run(setup, cache_home, "rollout", "--store", str(store), "--seeds", "0-1", "--real-share", "0.5",
         "--policy", "random", "--embedder", "hashing-64")  # fmt: skip
    out = tmp_path / "records.jsonl"
    dreamgym("replay", "export", str(store), "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert "synthetic" in {row["source"] for row in rows if row.get("kind") == "step"}


@pytest.mark.parametrize(
    "mode", [("synthetic",), ("mixed", "--real-share", "0.5"), ("sim2real", "--switch-at", "1")], ids=lambda m: m[0]
)
def test_every_training_mode_runs_on_text_worlds(
    setup: Path, cache_home: Path, tmp_path: Path, mode: tuple[str, ...]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(setup / "store", store)
    out = _run(setup, cache_home, "train", "--mode", *mode, "--train-seeds", "0-1", "--eval-seeds", "",
               "--updates", "2", "--group-size", "2", "--groups-per-update", "1", "--policy-model",
               str(setup / "policy"), "--policy-mode", "index", "--store", str(store), "--output-dir",
               str(tmp_path / "out"))  # fmt: skip
    assert f"{mode[0]}: 2 updates" in out


def test_validate_live_on_a_text_world_writes_its_report(setup: Path, cache_home: Path, tmp_path: Path) -> None:
    """The game is the live environment: a validation seed's game is played into a new store, then the model
    is validated on its steps beside the baselines."""
    dreamgym("validate", "--live", "--store", str(tmp_path / "live"), "--model", str(setup / "sim"),
             "--retrieval", str(setup / "store"), "--tasks", SPEC, "--seeds", "2000", "--policy", "random",
             "--episodes", "1", "--max-steps", "2", "--limit", "1", "--out", str(tmp_path / "report"),
             env={"DREAMGYM_CACHE": str(cache_home)})  # fmt: skip
    assert (tmp_path / "report" / "validation.json").is_file()
