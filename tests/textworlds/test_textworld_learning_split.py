"""benchmarks/textworld_learning.py tells held-out games apart by content: no held-out game's hash is among the
games it clones, sizes the warm start on, or trains on, whatever seed makes it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from textworld_recipes import TINY

from dreamgym.textworlds import GameCache, GameInfo, generated_task

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "textworld_learning.py"


@pytest.fixture(scope="module")
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("textworld_learning", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def repeating(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> object:
    """A task whose held-out seed 1000 makes the same world as training seed 3 and demonstration seed 0."""
    cache = GameCache(tmp_path)
    for seed, source in ((0, 0), (1, 1), (2, 1), (3, 0), (1000, 0), (2000, 1)):
        shutil.copytree(tiny_games[source].path.parent, cache.folder(TINY, seed))
    return generated_task(TINY, cache_root=tmp_path)


def test_games_that_repeat_a_held_out_game_are_left_out(benchmark: ModuleType, repeating: object) -> None:
    games = benchmark.split_games(repeating, bc_seeds=[0, 1], val_seeds=[2000], train_seeds=[2, 3],
                                  held_out_seeds=[1000])  # fmt: skip
    assert (games.bc_seeds, games.val_seeds, games.train_seeds) == ((1,), (2000,), (2,))
    assert games.dropped == {"bc": (0,), "val": (), "train": (3,)}


def test_no_held_out_hash_is_among_the_other_games(benchmark: ModuleType, repeating: object) -> None:
    games = benchmark.split_games(repeating, bc_seeds=[0, 1], val_seeds=[2000], train_seeds=[2, 3],
                                  held_out_seeds=[1000])  # fmt: skip
    assert all(not (hashes & games.held_out_hashes) for hashes in games.hashes.values())
    assert games.summary()["held_out_hashes_in_other_roles"] == 0
