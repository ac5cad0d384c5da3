"""Does the simulator pay a real win when it plays the episode on its own pages? Per task, on held-out real episodes.

    python benchmarks/open_loop_outcomes.py --from .cache/demo [--model DIR] [--commit-results]

The trust gate (``TrainConfig.sim_trust``) scores the simulator one step at a
time on real pages (teacher-forced): given the real page and action, is the
outcome right? A synthetic episode is another thing: from the real first
page on, every page the simulator is asked about is one it wrote. This
benchmark replays each held-out real episode of a kept demo (``--from``: the
``out`` of a finished ``dreamgym demo``; its evaluation store holds both
evaluations' episodes) through the simulator twice: teacher-forced (the real
history and the real page before the last action) and open loop (the real
actions, the simulator's own pages; the run stops where the simulator ends
the episode), both with retrieval kept off every held-out (task, seed), the
simulator's rules applied. It prints one JSON line per task and one for all:
the real wins, how many the simulator paid teacher-forced and open loop, and
the open-loop share as a ratio against the teacher-forced one (measured in the
same run); and the real losses it paid open loop (a false win). ``--model``
defaults to the demo's last refit (``train/sim-refits/refit-N``), else its
``experience-model``. ``--commit-results`` writes
``benchmarks/results/open_loop_outcomes.json`` with the date, the commit and
the command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--model", type=Path, default=None, help="an experience model (default: the demo's last)")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="open_loop_outcomes", help="the results file's name, without .json")
    args = parser.parse_args()
    refits = sorted((args.kept / "train" / "sim-refits").glob("refit-*"), key=lambda p: int(p.name.split("-")[1]))
    model = args.model or (refits[-1] if refits else args.kept / "experience-model")
    if not (model / "config.json").exists():
        parser.error(f"no experience model at {model}")
    results: dict[str, Any] = report.provenance() | {"kept": str(args.kept), "model": str(model)}
    counts = anyio.run(_replay, args.kept, model)
    rows = []
    for task in [*sorted({task for task, _ in counts}), "all"]:
        got: Counter[str] = Counter()
        for (name, key), n in counts.items():
            if task in (name, "all"):
                got[key] += n
        wins = got["won"]
        teacher, open_loop = got["won teacher-forced paid"], got["won open-loop paid"]
        row = report.emit(
            f"real wins the simulator paid open loop ({task})", open_loop / wins if wins else 0.0, "fraction",
            "the share it paid teacher-forced", teacher / wins if wins else 0.0, task=task, wins=wins,
            paid_teacher_forced=teacher, paid_open_loop=open_loop, losses=got["lost"],
            losses_paid_open_loop=got["lost open-loop paid"],
        )  # fmt: skip
        rows.append(row)
    if args.commit_results:
        (RESULTS / f"{args.name}.json").write_text(json.dumps({**results, "tasks": rows}, indent=1) + "\n")
        print(f"wrote {RESULTS / f'{args.name}.json'}", file=sys.stderr)
    return 0


async def _replay(kept: Path, model_dir: Path) -> Counter[tuple[str, str]]:
    from dreamgym.core.types import Task
    from dreamgym.jobs._demo_settings import DemoSettings, held_out_pairs, held_out_steps
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model

    settings = DemoSettings(out=kept)
    steps = await held_out_steps(settings)
    episodes: dict[str, list[Any]] = {}
    for step in steps:
        episodes.setdefault(step.episode_id, []).append(step)
    counts: Counter[tuple[str, str]] = Counter()
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        model = load_experience_model(model_dir, store=store)
        config = SimulatorConfig(
            neighbours=model.config.template.neighbours, exclude_task_seeds=tuple(held_out_pairs(settings))
        )
        for episode in episodes.values():
            episode.sort(key=lambda step: step.step_index)
            first, last = episode[0], episode[-1]
            task = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
            env = SimulatedEnv(model, store=store, config=config)
            page, paid = first.observation, 0.0
            history: list[tuple[Any, Any]] = []
            for real in episode:
                result = await env.predict_step(task, history, page, real.action, seed=real.seed)
                paid += result.reward
                if result.truncated or result.terminated:
                    break
                history.append((page, real.action))
                page = result.observation
            forced_history = [(step.observation, step.action) for step in episode[:-1]]
            forced = await env.predict_step(task, forced_history, last.observation, last.action, seed=last.seed)
            await env.aclose()
            name = first.task_id.split("/")[-1]
            outcome = "won" if sum(step.reward for step in episode) > 0 else "lost"
            counts[(name, outcome)] += 1
            counts[(name, f"{outcome} open-loop paid")] += paid > 0
            counts[(name, f"{outcome} teacher-forced paid")] += forced.reward > 0
    return counts


if __name__ == "__main__":
    raise SystemExit(main())
