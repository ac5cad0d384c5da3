"""The text worlds' Gymnasium ids: made with gymnasium.make, they pass check_env and play a generated game."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import dreamgym  # noqa: F401  (registers the ids)
from dreamgym.textworlds import GameCache, GameInfo

ID = "dreamgym/textworld.custom-v0"


@pytest.fixture(scope="module")
def env(cache: GameCache, tiny_games: dict[int, GameInfo]) -> Iterator[gymnasium.Env[Any, Any]]:
    made = gymnasium.make(ID, rooms=2, objects=3, quest=2, cache=str(cache.root), max_steps=5, render_mode="ansi")
    yield made
    made.close()


def test_both_challenges_are_registered() -> None:
    assert {"dreamgym/textworld.cooking-v0", ID} <= set(gymnasium.registry)


@pytest.mark.slow
def test_the_text_world_id_passes_gymnasiums_env_checker(env: gymnasium.Env[Any, Any]) -> None:
    check_env(env.unwrapped)


def test_a_seeded_reset_plays_that_seeds_game(env: gymnasium.Env[Any, Any], tiny_games: dict[int, GameInfo]) -> None:
    observation, _ = env.reset(seed=1)
    assert observation["url"] == f"textworld://{tiny_games[1].content_hash}"


def test_the_walkthrough_typed_as_strings_wins(env: gymnasium.Env[Any, Any], tiny_games: dict[int, GameInfo]) -> None:
    env.reset(seed=0)
    rewards = [env.step(f"type [cmd] [{command}]")[1] for command in tiny_games[0].walkthrough]
    assert rewards[-1] == 1.0
