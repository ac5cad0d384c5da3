"""Where the experience model's reward is wrong, per task: the pages behind the synthetic arm's shortfall.

    python benchmarks/probes/sim_reward_probe.py [--tasks a,b,c] [--seed-set 0-79] [--held-out-seeds 1000-1033]

``sim2real_miniwob.py`` trains its synthetic arm on the experience model's
rewards. If the model rewards an episode the real page fails (a false
positive), GRPO reinforces what fails on real pages; if it withholds the
reward of a real success (a false negative), the right behaviour is pushed
down beside the wrong one. This probe measures both, per task, on held-out
real episodes the model never saw or retrieved:

1. The experience model of ``sim2real_miniwob.py`` with the same recipe
   (``--seed-set``, ``--sim-epochs``, ``--max-steps`` in ``--out``; built once
   and kept, so pointing ``--out`` at a sim2real run reuses its model).
2. Real episodes on ``--held-out-seeds``: the demonstrator (succeeds) and
   ``--explorers`` random explorers (mostly fail, and try what a sampling
   policy tries: a button before its fields, text in the wrong field) per
   (task, seed), in Chromium, into ``OUT/probe-store``.
3. Each episode's real actions replayed through the simulator alone
   (open loop: its own predicted pages are its history, as in a synthetic
   rollout), and the episode's simulated outcome (any predicted reward)
   compared with the real one: false positives among real failures, false
   negatives among real successes.
4. Each step teacher-forced (the real history and page), the model's reward
   against the real one, beside always-0 on the same steps.

Writes ``OUT/sim_reward_probe.json`` (and with ``--commit-results``
``benchmarks/results/sim_reward_probe.json`` with the date, the commit and
the command); one JSON line per task on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import shlex
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import anyio
import learning_curve as lc
import sim2real_miniwob as s2r
from _report import emit

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main() -> int:
    args = _arguments()
    lc._commit()  # the code that runs, not whatever HEAD is when it ends
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "filelock", "urllib3", "transformers", "dreamgym.runtime"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.tasks.split(",")
    sim = anyio.run(s2r._experience_model, args, names)
    rows = anyio.run(_probe, args, names)
    result = {
        "date": datetime.date.today().isoformat(),
        "commit": lc._commit(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "experience_model": sim,
        "tasks": rows,
        "seconds": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(result, indent=1) + "\n"
    (args.out / "sim_reward_probe.json").write_text(text)
    if args.commit_results:
        (RESULTS / "sim_reward_probe.json").write_text(text)
    for row in rows:
        episodes = row["open_loop"]
        emit(f"sim_reward_probe/{row['task']}/false_positive_rate", episodes["false_positive_rate"],
             "share of real failures the simulator rewards (open loop)", "real success rate of the episodes",
             episodes["real_success_rate"], false_negative_rate=episodes["false_negative_rate"],
             episodes=episodes["n"])  # fmt: skip
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="click-checkboxes,click-option,login-user")
    parser.add_argument("--seed-set", default="0-79", help="page seeds of the experience model's real data")
    parser.add_argument("--sim-epochs", type=float, default=2.0)
    parser.add_argument("--held-out-seeds", default="1000-1033")
    parser.add_argument("--explorers", type=int, default=3, help="random-explorer episodes per held-out (task, seed)")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/s2r"))
    parser.add_argument("--commit-results", action="store_true")
    return parser.parse_args()


async def _probe(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries
    from dreamgym.validate._open_loop import replay_episode

    seeds = lc._seeds(args.held_out_seeds)
    held = tuple((f"miniwob/{name}", seed) for name in names for seed in seeds)
    played = args.out / "probe-store"
    shutil.rmtree(played, ignore_errors=True)
    async with LmdbReplayStore(played) as store:
        plan = CollectPlan(tasks=names, seeds=seeds, explorers=args.explorers, max_steps=args.max_steps,
                           contexts=args.contexts)  # fmt: skip
        await collect_miniwob(store, plan)
        steps = [s for name in names for s in await store.get_steps(await store.task_seqs(f"miniwob/{name}"))]
    episodes: dict[str, list[Any]] = defaultdict(list)
    for step in steps:
        episodes[step.episode_id].append(step)
    async with LmdbReplayStore(s2r._seed_store(args)) as seed_store:
        model = load_experience_model(args.out / "sim-model", store=seed_store)
        neighbours = model.config.template.neighbours
        queries = await teacher_forced_queries(steps, store=seed_store, neighbours=neighbours, exclude_task_seeds=held)
        made = await predict_steps(model, queries)
        replays: dict[str, list[Any]] = {}
        limiter = anyio.CapacityLimiter(8)

        async def replay(episode_id: str) -> None:
            async with limiter:
                replays[episode_id] = await replay_episode(
                    model, episodes[episode_id], horizon=args.max_steps, store=seed_store, neighbours=neighbours,
                    exclude_task_seeds=held,
                )  # fmt: skip

        async with anyio.create_task_group() as group:
            for episode_id in episodes:
                group.start_soon(replay, episode_id)
    forced = [(step, prediction) for (step, _), prediction in zip(queries, made.predictions, strict=True)]
    return [_task_row(f"miniwob/{name}", episodes, replays, forced) for name in names]


def _task_row(
    task: str, episodes: dict[str, list[Any]], replays: dict[str, list[Any]], forced: list[tuple[Any, Any]]
) -> dict[str, Any]:
    """Open-loop episode outcomes and teacher-forced step rewards of one task, split by real outcome and policy."""
    outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for episode_id, episode in episodes.items():
        if episode[0].task_id != task:
            continue
        real_success = any(step.reward > 0.5 for step in episode)
        scores = replays[episode_id]
        # a real failure the simulator rewards: some step's reward judged wrong (the real one is 0 at every step);
        # a real success it withholds: the rewarded step's prediction missing or its reward wrong
        ordered = sorted(episode, key=lambda s: s.step_index)
        if real_success:
            last = next(n for n, step in enumerate(ordered) if step.reward > 0.5)
            simulated = last < len(scores) and scores[last] is not None and scores[last].reward_correct
        else:
            simulated = any(score is not None and not score.reward_correct for score in scores)
        policy = "demonstrator" if "demonstrator" in ordered[0].policy_id else "explorer"
        for key in ("all", policy):
            outcomes[key][f"real_{'success' if real_success else 'failure'}"] += 1
            if real_success and not simulated:
                outcomes[key]["false_negatives"] += 1
            if not real_success and simulated:
                outcomes[key]["false_positives"] += 1
    mine = [(step, prediction) for step, prediction in forced if step.task_id == task]
    rewarded = [(s, p) for s, p in mine if s.reward > 0.5]
    unrewarded = [(s, p) for s, p in mine if s.reward <= 0.5]
    every = outcomes["all"]
    failures, successes = every["real_failure"], every["real_success"]
    return {
        "task": task,
        "open_loop": {
            "n": failures + successes,
            "real_success_rate": round(successes / max(1, failures + successes), 4),
            "false_positives": every["false_positives"],
            "real_failures": failures,
            "false_positive_rate": round(every["false_positives"] / failures, 4) if failures else None,
            "false_negatives": every["false_negatives"],
            "real_successes": successes,
            "false_negative_rate": round(every["false_negatives"] / successes, 4) if successes else None,
            "by_policy": {key: dict(value) for key, value in outcomes.items() if key != "all"},
        },
        "teacher_forced": {
            "steps": len(mine),
            "unusable": sum(p is None for _, p in mine),
            "rewarded_steps": len(rewarded),
            "rewarded_predicted": sum(p is not None and p.reward > 0.5 for _, p in rewarded),
            "unrewarded_steps": len(unrewarded),
            "unrewarded_predicted_rewarded": sum(p is not None and p.reward > 0.5 for _, p in unrewarded),
            "reward_correct": sum(p is not None and (p.reward > 0.5) == (s.reward > 0.5) for s, p in mine),
            "always_0_correct": len(unrewarded),
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
