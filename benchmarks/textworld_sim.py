"""The experience model on the named text-world family: does it pay real wins, and list the game's commands?

    python benchmarks/textworld_sim.py                   # 40 seed games, 20 held-out games
    python benchmarks/textworld_sim.py --quick           # a test-sized run of the same steps (minutes)
    python benchmarks/textworld_sim.py --commit-results  # also write benchmarks/results/textworld_sim.json

On ``COOKING_FAMILY`` (``dreamgym.textworlds``), through the command line a user runs:

1. The seed set: ``dreamgym collect`` plays the walkthrough demonstrator (wins) and the random policy (mostly
   losses) on the seed games (``--seed-games``) into one store; seed games whose content hash is a held-out
   game's are left out first.
2. ``dreamgym sim train`` trains a scratch experience model on that store (``--epochs``, ``--split``).
3. The held-out games (``--held-out-seeds``): the same two policies play them, real, into a store of their own.
4. Each held-out episode is replayed through the model (``SimulatedEnv.predict_step``, retrieving from the seed
   store): open loop (the real actions on the model's own pages, stopped where the model ends the episode) and
   teacher-forced (each real page and action, one step).

Prints JSON lines: the share of real wins the model pays open loop (beside always-0, which pays none of the
wins and none of the losses), with the share of real losses it pays; and the F1 of the commands its
predicted states list against those the game admits (``dreamgym.textworlds.command_f1``), teacher-forced and
open loop, beside copying the current page's commands as the prediction. The model predicts the admissible
commands of the next state as part of the state it writes (the ``list "commands"``); no rule derives them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))
import _report as report

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = {"seed_games": "0-3", "held_out_seeds": "1000-1001", "epochs": 1.0, "max_steps": 6}
"""``--quick``: every step of the full run on a handful of games (a probe of the pipeline, not a figure)."""


def main() -> int:
    args = _arguments()
    report.commit()
    from dreamgym.textworlds import COOKING_FAMILY, parse_text_world_tasks, seeds_apart

    tasks, _ = parse_text_world_tasks(COOKING_FAMILY, max_steps=args.max_steps)
    held_out = _seeds(args.held_out_seeds)
    seed_games = seeds_apart(tasks[0], _seeds(args.seed_games), held_out)
    args.out.mkdir(parents=True, exist_ok=True)
    for policy in ("demonstrator", "random"):
        _collect(args, args.out / "store", seed_games, policy)
        _collect(args, args.out / "held-out", held_out, policy)
    _dreamgym("sim", "train", str(args.out / "store"), "-o", str(args.out / "sim"), "--tasks", COOKING_FAMILY,
              "--epochs", str(args.epochs), "--split", args.split)  # fmt: skip
    counts, f1 = anyio.run(_replay, args)
    rows = _rows(counts, f1, seed_games, held_out)
    if args.commit_results:
        out = RESULTS / "textworld_sim.json"
        out.write_text(json.dumps({**report.provenance(), "family": COOKING_FAMILY, "quick": args.quick,
                                   "settings": report.settings(args), "rows": rows}, indent=1) + "\n")  # fmt: skip
        print(f"wrote {out}", file=sys.stderr)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed-games", default="0-39", help="the seed set's games")
    parser.add_argument("--held-out-seeds", default="1000-1019", help="the games the model is scored on")
    parser.add_argument("--epochs", type=float, default=3.0, help="dreamgym sim train --epochs")
    parser.add_argument("--split", default="whitespace", help="dreamgym sim train --split")
    parser.add_argument("--max-steps", type=int, default=8, help="step limit of the collected episodes")
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/textworld-sim"))
    parser.add_argument("--quick", action="store_true", help="a test-sized run: " + json.dumps(QUICK))
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/")
    args = parser.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    return args


def _seeds(text: str) -> list[int]:
    from dreamgym.cli._common import parse_seeds

    return list(parse_seeds(text))


def _dreamgym(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dreamgym.cli", *args], check=True, stdout=sys.stderr)


def _collect(args: argparse.Namespace, store: Path, seeds: Sequence[int], policy: str) -> None:
    from dreamgym.textworlds import COOKING_FAMILY

    seeds_text = ",".join(map(str, seeds))
    _dreamgym("collect", "--store", str(store), "--tasks", COOKING_FAMILY, "--seeds", seeds_text, "--policy", policy,
              "--max-steps", str(args.max_steps), "--embedder", "hashing-64", "--again")  # fmt: skip


async def _replay(args: argparse.Namespace) -> tuple[Counter[str], dict[str, list[float]]]:
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatorConfig, load_experience_model

    episodes = await _episodes(args.out / "held-out")
    counts: Counter[str] = Counter()
    f1: dict[str, list[float]] = {"teacher_forced": [], "open_loop": [], "copy_current": []}
    config = StoreConfig(auto_index=False)
    async with LmdbReplayStore(args.out / "store", embedder=HashingEmbedder(64), config=config, readonly=True) as store:
        model = load_experience_model(args.out / "sim")
        sim = SimulatorConfig(neighbours=model.config.template.neighbours)
        for episode in episodes:
            await _one_episode(model, store, sim, episode, counts, f1)
        counts.update({f"answers {key}": value for key, value in _answer_counts(model).items()})
    return counts, f1


async def _episodes(path: Path) -> list[list[Any]]:
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        seqs = [seq for task in await store.task_ids() for seq in await store.task_seqs(task, source="real")]
        steps = await store.get_steps(seqs)
    by_episode: dict[str, list[Any]] = {}
    for step in sorted(steps, key=lambda s: (s.episode_id, s.step_index)):
        by_episode.setdefault(step.episode_id, []).append(step)
    return list(by_episode.values())


async def _one_episode(
    model: Any, store: Any, config: Any, episode: list[Any], counts: Counter[str], f1: dict[str, list[float]]
) -> None:
    """Replay one real episode open loop and teacher-forced: whether each pays, and its commands' F1."""
    from dreamgym.core.types import Task
    from dreamgym.simulator import SimulatedEnv
    from dreamgym.textworlds import command_f1

    first = episode[0]
    task = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
    env = SimulatedEnv(model, store=store, config=config)
    outcome = "won" if sum(step.reward for step in episode) >= 0.5 else "lost"
    counts[outcome] += 1
    page, paid = first.observation, 0.0
    history: list[tuple[Any, Any]] = []
    for real in episode:
        result = await env.predict_step(task, history, page, real.action, seed=real.seed)
        f1["open_loop"].append(command_f1(result.observation.state, real.next_observation.state))
        paid += result.reward
        if result.truncated or result.terminated:
            break
        history.append((page, real.action))
        page = result.observation
    forced_paid = 0.0
    for n, real in enumerate(episode):
        before = [(step.observation, step.action) for step in episode[:n]]
        result = await env.predict_step(task, before, real.observation, real.action, seed=real.seed)
        f1["teacher_forced"].append(command_f1(result.observation.state, real.next_observation.state))
        f1["copy_current"].append(command_f1(real.observation.state, real.next_observation.state))
        forced_paid = result.reward if n == len(episode) - 1 else forced_paid
    await env.aclose()
    counts[f"{outcome} open-loop paid"] += paid >= 0.5
    counts[f"{outcome} teacher-forced paid"] += forced_paid >= 0.5


def _answer_counts(model: Any) -> dict[str, int]:
    keys = ("predictions", "clean_first_answers", "malformed_answers", "rule_pages", "failed_predictions")
    return {key: int(getattr(model.stats, key)) for key in keys}


def _rows(
    counts: Counter[str], f1: dict[str, list[float]], seed_games: Sequence[int], held_out: Sequence[int]
) -> list[dict[str, Any]]:
    wins, losses = counts["won"], counts["lost"]

    def share(key: str, n: int) -> float:
        return counts[key] / n if n else 0.0

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    answers = {key.removeprefix("answers "): n for key, n in counts.items() if key.startswith("answers ")}
    return [
        report.emit(
            "textworld_sim/real_wins_paid_open_loop", share("won open-loop paid", wins), "share of real wins",
            "always-0 (pays no win and no loss)", 0.0, wins=wins, losses=losses,
            losses_paid_open_loop=round(share("lost open-loop paid", losses), 4),
            wins_paid_teacher_forced=round(share("won teacher-forced paid", wins), 4),
            losses_paid_teacher_forced=round(share("lost teacher-forced paid", losses), 4),
            seed_games=len(seed_games), held_out_games=len(held_out), answers=answers,
        ),
        report.emit(
            "textworld_sim/command_f1_teacher_forced", mean(f1["teacher_forced"]), "mean F1 per step",
            "the current page's commands as the prediction", mean(f1["copy_current"]),
            steps=len(f1["teacher_forced"]), open_loop=round(mean(f1["open_loop"]), 4),
            open_loop_steps=len(f1["open_loop"]),
            commands_from="the model's predicted state (its list \"commands\"); no rule derives them",
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
