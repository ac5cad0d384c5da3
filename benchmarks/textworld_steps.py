"""Text-world steps/s through dreamgym's environment, store writes included, beside TextWorld's own loop.

    python benchmarks/textworld_steps.py                   # 2,000 steps each way
    python benchmarks/textworld_steps.py --steps 300       # quicker
    python benchmarks/textworld_steps.py --commit-results  # also write benchmarks/results/textworld_steps.json

One generated cooking game (recipe 2, take 1, one room; seed 0, cached under ``$DREAMGYM_CACHE``) is played
both ways with the same commands: a fixed rule picks the ``(7 * step) mod n``-th admissible command, and an
episode restarts when the game ends or after 50 steps. The two loops alternate in rounds (``--rounds``), so
a load that comes and goes on a shared machine weighs on both alike; each figure is its steps over its time.

- baseline: TextWorld's own ``env.step`` loop on the game, asking for what dreamgym's observations show
  (feedback, description, inventory, admissible commands, score, won, lost);
- ``textworld_steps_per_s``: :class:`dreamgym.textworlds.TextWorldEnv` (``reset``/``step``: a worker thread
  per call, the state rendered), every episode's steps and summary appended to a real LMDB store (fsync on)
  that embeds and indexes them behind ingest (the hashing embedder), as the runtime's writer does;
- ``textworld_steps_per_s_records_only``: the same with the store's indexing deferred
  (``StoreConfig(auto_index=False)``; ``dreamgym replay reindex`` builds the index later), which is what
  competes with the engine for the CPU.

The ratio is figure over baseline (target >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))
import _report as report

from dreamgym.core import Action, Episode, Observation, Step
from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
from dreamgym.textworlds import GameCache, Recipe, TextWorldEnv, generated_task, open_game

RECIPE = Recipe(challenge="cooking", settings={"recipe": 2, "take": 1})
SEED = 0
EPISODE_STEPS = 50


def pick(commands: list[str] | tuple[str, ...], step: int) -> str:
    return commands[(7 * step) % len(commands)]  # the same rule as the figure's loop below


def textworld_loop(path: Path, steps: int) -> float:
    """Seconds for ``steps`` steps of TextWorld's own loop."""
    from dreamgym.textworlds import GameInfo

    env = open_game(GameInfo(path=path, content_hash=""))
    state = env.reset()
    in_episode = 0
    start = time.perf_counter()
    for step in range(steps):
        state, _, done = env.step(pick(state["admissible_commands"], step))
        in_episode += 1
        if done or in_episode >= EPISODE_STEPS:
            state, in_episode = env.reset(), 0
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed


async def dreamgym_loop(steps: int, cache: GameCache, store_path: Path, index: bool = True) -> float:
    """Seconds for ``steps`` steps through :class:`TextWorldEnv` with every episode appended to a store."""
    task = generated_task(RECIPE, cache_root=cache.root, max_steps=EPISODE_STEPS)
    env = TextWorldEnv()
    config = StoreConfig(auto_index=index)
    async with LmdbReplayStore(store_path, embedder=HashingEmbedder(64), config=config) as store:
        await store.put_task(task)
        start = time.perf_counter()
        done, episode_steps, observation, episode_id = True, [], Observation(state=""), ""
        for step in range(steps):
            if done:
                observation, episode_id, episode_steps = await env.reset(task, seed=SEED), uuid.uuid4().hex, []
            buttons = _buttons(observation.state)  # the policy's part: read the listed commands, pick one
            element, command = buttons[(7 * step) % len(buttons)]
            action = Action(name="click", args=(element,), label=command)
            result = await env.step(action)
            episode_steps.append(_step(task.task_id, episode_id, len(episode_steps), observation, action, result))
            observation, done = result.observation, result.terminated or result.truncated
            if done or step == steps - 1:
                await store.append(episode_steps, episodes=[_episode(task.task_id, episode_id, episode_steps)])
        await store.flush()
        elapsed = time.perf_counter() - start
    await env.aclose()
    return elapsed


def _buttons(state: str) -> list[tuple[str, str]]:
    found = []
    for line in state.splitlines():
        head, sep, name = line.strip().partition('] button "')
        if sep:
            found.append((head.removeprefix("["), json.loads('"' + name)))
    return found


def _step(task_id: str, episode_id: str, index: int, observation: Observation, action: Action, result: Any) -> Step:
    return Step(
        source="real", task_id=task_id, episode_id=episode_id, step_index=index, observation=observation,
        action=action, next_observation=result.observation, reward=result.reward, terminated=result.terminated,
        truncated=result.truncated, truncation_reason=result.truncation_reason, seed=SEED, site="textworld",
    )  # fmt: skip


def _episode(task_id: str, episode_id: str, steps: list[Step]) -> Episode:
    last = steps[-1]
    return Episode(
        episode_id=episode_id, task_id=task_id, source="real", seed=SEED, site="textworld", num_steps=len(steps),
        total_reward=last.reward if last.terminated else 0.0, success=last.terminated and last.reward >= 1.0,
        terminated=last.terminated, truncated=last.truncated, truncation_reason=last.truncation_reason,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps each way, over all rounds")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--commit-results", action="store_true")
    args = parser.parse_args()
    report.commit()
    cache = GameCache()
    game = cache.game(RECIPE, SEED)
    textworld_loop(game.path, 50)  # warm both paths: the engine's first load, the thread pool
    per_round = args.steps // args.rounds
    baseline_s = figure_s = records_s = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(dreamgym_loop, 50, cache, Path(tmp) / "warm")
        for round_ in range(args.rounds):
            baseline_s += textworld_loop(game.path, per_round)
            figure_s += anyio.run(dreamgym_loop, per_round, cache, Path(tmp) / f"store{round_}")
            records_s += anyio.run(dreamgym_loop, per_round, cache, Path(tmp) / f"records{round_}", False)
    steps = per_round * args.rounds
    baseline = steps / baseline_s
    common = {"game": RECIPE.key, "seed": SEED, "content_hash": game.content_hash, "steps": steps,
              "rounds": args.rounds}  # fmt: skip
    rows = [
        report.emit("textworld_steps_per_s", steps / figure_s, "steps/s", "textworld_env_step_loop", baseline,
                    digits=1, **common),
        report.emit("textworld_steps_per_s_records_only", steps / records_s, "steps/s", "textworld_env_step_loop",
                    baseline, digits=1, **common),
    ]  # fmt: skip
    if args.commit_results:
        out = Path(__file__).parent / "results" / "textworld_steps.json"
        out.write_text(json.dumps({**report.provenance(), "textworld": "1.7.0", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
