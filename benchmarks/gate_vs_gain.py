"""Does the trust gate admit the simulator where synthetic training helps, and keep it out where it hurts? Per task.

    python benchmarks/gate_vs_gain.py --from DEMO --synthetic ARM [--synthetic ARM ...] [--real ARM ...]
        [--seeds 2000-2029] [--episodes DIR] [--commit-results [--name NAME]]

``--from`` is a finished ``dreamgym demo`` (any ``--tasks``), ``--synthetic``
the same demo rerun with every group synthetic from its warm start and
experience model (``benchmarks/demo_sides.py --from DEMO --arm synthetic``
leaves it at ``OUT/synthetic``); ``--real``, where given, the same with every
group real (the gain the synthetic one is set beside). Both repeat, one per
draw (``demo_sides.py --draws N`` leaves draw ``d`` at ``OUT/synthetic-d``):
a task's gain is then the mean over the draws, each draw's beside it.

Per task, two figures, each measured apart from the other:

- **The gate's reading on validation seeds**: the warm-started policy plays
  one episode per (task, seed) of ``--seeds`` (validation seeds, within
  2000-2199, never in a store the simulator trains or retrieves from;
  collected once under ``--episodes``) at the demo's training temperature,
  and the experience model the gate would read (the demo's, its outcome
  judge included) predicts each real step beside it, with the real history,
  as shadow mode does. The reading is the share of the deciding steps
  (:func:`dreamgym.core.outcomes.deciding`: the real episode ended, or either
  side paid) whose outcome it got right, the figure ``TrainConfig.sim_trust``
  compares with its threshold (``--trust``, default the demo's); the gate
  admits the task where the reading reaches it.
- **What synthetic-only training did to the task**: the held-out successes of
  the synthetic run before and after training (the demo's held-out pairs,
  the same warm start), and the same for the real run where given; over
  several draws, the mean gain decides the verdict (helped, hurt, no change).

Prints one JSON line per task (the gain of the synthetic run, beside the real
run's where given) and a summary: how many admitted tasks gained and how many
kept-out tasks lost or stood still. ``--commit-results`` writes
``benchmarks/results/NAME.json`` (default ``gate_vs_gain``) with the date, the
commit and the command.
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
VALIDATION = range(2000, 2200)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo's out")
    parser.add_argument("--synthetic", type=Path, action="append", required=True,
                        help="its rerun with every group synthetic; repeatable, one per draw")  # fmt: skip
    parser.add_argument("--real", type=Path, action="append", default=[],
                        help="its rerun with every group real; repeatable, one per draw")  # fmt: skip
    parser.add_argument("--seeds", default="2000-2029", help="validation seeds (within 2000-2199)")
    parser.add_argument("--trust", type=float, help="the gate's threshold (default: the demo's sim_trust)")
    parser.add_argument("--episodes", type=Path, default=ROOT / ".cache" / "bench" / "gate_vs_gain")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="gate_vs_gain", help="the results file's name, without .json")
    args = parser.parse_args()
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    if not set(seeds) <= set(VALIDATION):
        parser.error("--seeds must lie within the validation seeds 2000-2199")
    run = report.provenance() | {"settings": report.settings(args)}
    kept = json.loads((args.kept / "report.json").read_text())
    trust = args.trust if args.trust is not None else float(kept["settings"].get("sim_trust") or 0.9)
    readings = anyio.run(_readings, args.kept, kept["settings"], seeds, args.episodes)
    synthetic = [_tasks(out) for out in args.synthetic]
    real = [_tasks(out) for out in args.real]
    rows, tally = [], Counter()
    for task, (deciding, right) in readings.items():
        reading = right / deciding if deciding else 0.0
        admitted = deciding > 0 and reading >= trust
        draws = [draw.get(task, (0, 0, 0)) for draw in synthetic]
        gains = [after - before for before, after, _ in draws]
        gain = sum(gains) / len(gains)
        real_gains = [draw[task][1] - draw[task][0] for draw in real if task in draw]
        real_gain = sum(real_gains) / len(real_gains) if real_gains else None
        trained = all(episodes for _, _, episodes in draws)
        verdict = ("helped" if gain > 0 else "hurt" if gain < 0 else "no change") if trained else "not trained"
        tally[f"{'admitted' if admitted else 'kept out'}, {verdict}"] += 1
        rows.append(report.emit(
            f"synthetic-only held-out gain ({task}{f'; mean of {len(gains)} draws' if len(gains) > 1 else ''})",
            gain, "successes", "every group real", real_gain if real_gain is not None else 0.0,
            task=task, reading=round(reading, 4), deciding_steps=deciding, deciding_right=right, trust=trust,
            admitted=admitted, synthetic_before_after_of=_one_or_all([list(draw) for draw in draws]),
            synthetic_gains=gains, real_gains=real_gains, verdict=verdict,
            real_before_after_of=_one_or_all([list(draw[task]) for draw in real if task in draw]),
            in_run_reading=kept.get("training", {}).get("metrics", {}).get(f"train/sim_trust/{task}"),
            in_run_steps=kept.get("training", {}).get("metrics", {}).get(f"train/sim_trust_steps/{task}"),
        ))  # fmt: skip
    summary = {"tasks": len(rows), **dict(sorted(tally.items()))}
    print(json.dumps(summary), flush=True)
    if args.commit_results:
        result = {**run, "from": str(args.kept), "rows": rows, "summary": summary}
        (ROOT / "benchmarks" / "results" / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _one_or_all(draws: list[list[int]]) -> list[int] | list[list[int]] | None:
    """A draw's (before, after, episodes), or every draw's where there are several (a single run's file reads as
    it did before draws)."""
    return None if not draws else draws[0] if len(draws) == 1 else draws


def _tasks(out: Path) -> dict[str, tuple[int, int, int]]:
    """Per task, a demo's held-out successes before and after training, and its episodes."""
    demo = json.loads((out / "report.json").read_text())
    return {
        task["task_id"]: (task["successes"], later["successes"], task["episodes"])
        for task, later in zip(demo["before"]["tasks"], demo["after"]["tasks"], strict=True)
    }


async def _readings(kept: Path, recorded: dict[str, Any], seeds: list[int], out: Path) -> dict[str, tuple[int, int]]:
    """Per task, the warm start's validation episodes' deciding steps and those the simulator got right."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dreamgym.core.outcomes import count_deciding
    from dreamgym.core.types import Task
    from dreamgym.jobs import demo as demo_job
    from dreamgym.jobs._demo_policy import PolicyWeights
    from dreamgym.jobs._demo_settings import DemoSettings, held_out_pairs
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model, real_episodes, weights_digest

    settings = DemoSettings(out=kept, tasks=tuple(recorded["tasks"]), max_steps=int(recorded["max_steps"]))
    plays = DemoSettings(out=out, tasks=settings.tasks, held_out_seeds=tuple(seeds), max_steps=settings.max_steps,
                         eval_temperature=float(recorded.get("temperature") or 0.5))  # fmt: skip
    stamp = out / "collected.json"
    wanted = {"from": str(kept), "tasks": list(settings.tasks), "seeds": seeds}
    if not stamp.exists() or json.loads(stamp.read_text()) != wanted:
        policy = kept / "policy"
        model = AutoModelForCausalLM.from_pretrained(str(policy))
        tokenizer = AutoTokenizer.from_pretrained(str(policy))
        weights = PolicyWeights(directory=policy, model=model, tokenizer=tokenizer, digest=weights_digest(policy))
        await demo_job._evaluate(plays, weights, "warm start")
        stamp.write_text(json.dumps(wanted))
    async with LmdbReplayStore(out / "eval-store", embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False),
                               readonly=True) as played:  # fmt: skip
        episodes = await real_episodes(played)
    held = tuple(held_out_pairs(settings))
    answers = []
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        experience = load_experience_model(kept / "experience-model")
        config = SimulatorConfig(neighbours=experience.config.template.neighbours, exclude_task_seeds=held)
        env = SimulatedEnv(experience, store=store, config=config)
        for episode in episodes:
            first = episode[0]
            task = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
            for n, step in enumerate(episode):
                history = [(earlier.observation, earlier.action) for earlier in episode[:n]]
                result = await env.predict_step(task, history, step.observation, step.action, seed=step.seed,
                                                exclude_task_seeds=[(step.task_id, step.seed)])  # fmt: skip
                usable = not result.truncated
                answers.append((step, (result.reward, result.terminated) if usable else None))
        await env.aclose()
    return count_deciding(answers)


if __name__ == "__main__":
    sys.exit(main())
