"""The walkthrough demonstrator wins generated games and the command line collects them into a store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import dreamgym

from dreamgym.core import Task
from dreamgym.textworlds import GameInfo, TextWorldEnv, WalkthroughDemonstrator

SPEC = "textworld:custom?rooms=2&objects=3&quest=2"


async def _episode(task: Task, seed: int) -> tuple[float, list[str]]:
    env, policy = TextWorldEnv(), WalkthroughDemonstrator(seeds=[seed])
    observation = await env.reset(task, seed=seed)
    history: list[object] = []
    actions, reward = [], 0.0
    for _ in range(20):
        decision = await policy.act(task, history, observation)  # type: ignore[arg-type]
        result = await env.step(decision.action)
        actions.append(str(decision.action))
        history.append(result)
        observation, reward = result.observation, result.reward
        if result.terminated or result.truncated:
            break
    await env.aclose()
    return reward, actions


@pytest.mark.anyio
@pytest.mark.parametrize("seed", [0, 1])
async def test_the_demonstrator_wins_each_generated_game(
    tiny_task: Task, tiny_games: dict[int, GameInfo], seed: int
) -> None:
    reward, _ = await _episode(tiny_task, seed)
    assert reward == 1.0


@pytest.mark.anyio
async def test_the_demonstrator_clicks_the_commands_the_game_lists(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    _, actions = await _episode(tiny_task, 0)
    assert all(action.startswith("click [c") for action in actions)


@pytest.mark.anyio
async def test_the_demonstrator_finds_the_game_in_the_cache_without_seeds(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    observation = await env.reset(tiny_task, seed=1)
    await env.aclose()
    decision = await WalkthroughDemonstrator().act(tiny_task, [], observation)
    assert decision.action.label == tiny_games[1].walkthrough[0]


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory, cache_home: Path, tiny_games: dict[int, GameInfo]) -> Path:
    store = tmp_path_factory.mktemp("tw-store") / "store"
    dreamgym("collect", "--store", str(store), "--tasks", SPEC, "--seeds", "0-1", "--max-steps", "10",
             "--embedder", "hashing-64", env={"DREAMGYM_CACHE": str(cache_home)})  # fmt: skip
    return store


def test_collect_on_generated_games_stores_every_episode(collected: Path) -> None:
    stats = json.loads(dreamgym("replay", "stats", str(collected), "--json").stdout)
    assert stats["episodes"] == 2


def test_collect_with_the_demonstrator_wins_every_game(collected: Path) -> None:
    stats = json.loads(dreamgym("replay", "stats", str(collected), "--json").stdout)
    assert stats["steps"]["real"] == 4


def _records(store: Path, tmp_path: Path, kind: str) -> list[dict[str, object]]:
    out = tmp_path / "records.jsonl"
    dreamgym("replay", "export", str(store), "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("kind") == kind]


def test_collected_steps_carry_the_game_and_seed_as_task_and_seed(collected: Path, tmp_path: Path) -> None:
    steps = _records(collected, tmp_path, "step")
    assert sorted({(row["task_id"], row["seed"]) for row in steps}) == [
        ("textworld/custom+rooms2+objects3+quest2", 0),
        ("textworld/custom+rooms2+objects3+quest2", 1),
    ]


def test_collected_episodes_are_wins(collected: Path, tmp_path: Path) -> None:
    episodes = _records(collected, tmp_path, "episode")
    assert [row["success"] for row in episodes] == [True, True]


def test_collect_on_an_alfworld_folder_wins_its_pddl_game(tmp_path: Path) -> None:
    pytest.importorskip("fast_downward", reason="ALFWorld's PDDL games need textworld[pddl]")
    from pddl_game import write_pddl_game

    folder = tmp_path / "valid_seen"
    write_pddl_game(folder / "put-apple-in-fridge" / "trial_1")
    store = tmp_path / "store"
    out = dreamgym("collect", "--store", str(store), "--tasks", f"textworld:{folder}", "--max-steps", "8",
                   "--embedder", "hashing-64").stdout  # fmt: skip
    assert "real: 1/1 episodes succeeded" in out
