"""Choosing the named text-world family: what each candidate cooking recipe asks, on validation seeds.

    python benchmarks/textworld_family.py                   # 30 validation games per candidate
    python benchmarks/textworld_family.py --games 10        # quicker
    python benchmarks/textworld_family.py --commit-results  # also write benchmarks/results/textworld_family.json

For each candidate recipe, on the validation seeds 2000.. (DESIGN.md: every choice of recipe is made on
them), one JSON line: the figure is the share of episodes a uniform random policy over the admissible
commands wins within the step limit (3 episodes per game, seeded), beside the walkthrough's (a scripted
winner); with them the admissible commands per state (mean, max: an index policy offers at most 64
choices), the walkthrough's length and how many games are distinct by content hash. A family to learn on
is one a random policy rarely solves and whose states fit the index policy's 64 choices.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _report as report

from dreamgym.textworlds import GameCache, GameInfo, Recipe, open_game

CANDIDATES = (
    {"recipe": 1, "take": 1},
    {"recipe": 2, "take": 1},
    {"recipe": 1, "take": 1, "open": 1},
)
FIRST_SEED = 2000
MAX_STEPS = 30


def play(game: GameInfo, commands_of: Any, seed: int) -> tuple[bool, list[int]]:
    """One episode: ``commands_of(state, step)`` picks each command; returns (won, admissible counts)."""
    env = open_game(game)
    state = env.reset()
    counts, won = [], False
    rng = random.Random(seed)
    for step in range(MAX_STEPS):
        admissible = list(state["admissible_commands"])
        counts.append(len(admissible))
        command = commands_of(admissible, step, rng)
        if command is None:
            break
        state, _, done = env.step(command)
        if done:
            won = bool(state["won"])
            break
    env.close()
    return won, counts


def measure(cache: GameCache, settings: dict[str, int], games: int, episodes: int) -> dict[str, Any]:
    recipe = Recipe(challenge="cooking", settings=settings)
    infos = [cache.game(recipe, seed) for seed in range(FIRST_SEED, FIRST_SEED + games)]
    random_wins, counts = 0, []
    for n, info in enumerate(infos):
        for episode in range(episodes):
            won, seen = play(info, lambda admissible, _step, rng: rng.choice(admissible), 1000 * n + episode)
            random_wins += won
            counts += seen
    walkthrough_wins = 0
    for info in infos:
        moves = list(info.walkthrough)
        won, _ = play(info, lambda _a, step, _r, moves=moves: moves[step] if step < len(moves) else None, 0)
        walkthrough_wins += won
    random_success = random_wins / (games * episodes)
    walkthrough_success = walkthrough_wins / games
    return {
        "figure": f"random_policy_success[{recipe.key}]",
        "value": round(random_success, 4),
        "unit": "share",
        "baseline": "walkthrough_success",
        "baseline_value": round(walkthrough_success, 4),
        "ratio": round(random_success / walkthrough_success, 4) if walkthrough_success else None,
        "recipe": recipe.key,
        "games": games,
        "distinct_games": len({info.content_hash for info in infos}),
        "commands_mean": round(statistics.mean(counts), 1),
        "commands_max": max(counts),
        "walkthrough_mean": round(statistics.mean(len(info.walkthrough) for info in infos), 1),
        "max_steps": MAX_STEPS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=3, help="random episodes per game")
    parser.add_argument("--commit-results", action="store_true")
    args = parser.parse_args()
    report.commit()
    cache = GameCache()
    rows = []
    for settings in CANDIDATES:
        row = measure(cache, settings, args.games, args.episodes)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.commit_results:
        out = Path(__file__).parent / "results" / "textworld_family.json"
        out.write_text(json.dumps({**report.provenance(), "textworld": "1.7.0", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
