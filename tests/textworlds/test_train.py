"""dreamgym train on generated text worlds from the command line: real-only GRPO of a tiny index policy,
evaluated on a held-out game that no store of the run holds for training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import dreamgym
from tiny_models import tiny_policy

from dreamgym.textworlds import GameInfo

SPEC = "textworld:custom?rooms=2&objects=3&quest=2"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, cache_home: Path, tiny_games: dict[int, GameInfo]) -> Path:
    root = tmp_path_factory.mktemp("tw-train")
    dreamgym("train", "--mode", "mixed", "--real-share", "1", "--tasks", SPEC, "--train-seeds", "0-1",
             "--eval-seeds", "1000", "--updates", "1", "--group-size", "2", "--groups-per-update", "1",
             "--policy-model", str(tiny_policy(root / "policy")), "--policy-mode", "index", "--max-steps", "4",
             "--store", str(root / "store"), "--output-dir", str(root / "out"), "--json",
             env={"DREAMGYM_CACHE": str(cache_home)})  # fmt: skip
    return root


def _seeds(store: Path, tmp_path: Path) -> set[int]:
    out = tmp_path / f"{store.name}.jsonl"
    dreamgym("replay", "export", str(store), "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {row["seed"] for row in rows if row.get("kind") == "step"}


@pytest.mark.slow
def test_real_only_training_on_text_worlds_writes_a_final_policy(trained: Path) -> None:
    assert (trained / "out" / "final").is_dir()


@pytest.mark.slow
def test_the_training_store_holds_only_training_games(trained: Path, tmp_path: Path) -> None:
    assert _seeds(trained / "store", tmp_path) <= {0, 1}


@pytest.mark.slow
def test_the_held_out_game_is_played_only_into_the_evaluation_store(trained: Path, tmp_path: Path) -> None:
    assert _seeds(trained / "out" / "eval-store", tmp_path) == {1000}


@pytest.mark.slow
def test_the_held_out_game_differs_in_content_from_every_training_game(
    trained: Path, tiny_task: object, tiny_games: dict[int, GameInfo]
) -> None:
    from dreamgym.textworlds import seeds_apart

    assert seeds_apart(tiny_task, [0, 1], [1000]) == [0, 1]  # type: ignore[arg-type]
