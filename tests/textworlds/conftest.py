"""Tiny real TextWorld games, generated once per test session into one cache (a few seconds each)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textworld_recipes import COOKING, TINY

from dreamgym.core import Task
from dreamgym.textworlds import GameCache, GameInfo, generated_task


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``$DREAMGYM_CACHE`` points at in the command-line tests: games live in its ``textworld/``."""
    return tmp_path_factory.mktemp("dreamgym-cache")


@pytest.fixture(scope="session")
def cache(cache_home: Path) -> GameCache:
    return GameCache(cache_home / "textworld")


@pytest.fixture(scope="session")
def tiny_task(cache: GameCache) -> Task:
    return generated_task(TINY, cache_root=cache.root)


@pytest.fixture(scope="session")
def tiny_games(cache: GameCache) -> dict[int, GameInfo]:
    return {seed: cache.game(TINY, seed) for seed in (0, 1)}


@pytest.fixture(scope="session")
def cooking_task(cache: GameCache) -> Task:
    cache.game(COOKING, 0)
    return generated_task(COOKING, cache_root=cache.root)


@pytest.fixture(scope="session")
def dense_cooking_task(cache: GameCache, cooking_task: Task) -> Task:
    return generated_task(COOKING, dense=True, cache_root=cache.root)
