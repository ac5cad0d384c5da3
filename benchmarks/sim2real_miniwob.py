"""The paper's table at small scale: real-only, synthetic-only, sim-to-real and mixed GRPO on MiniWoB++.

    python benchmarks/sim2real_miniwob.py [--budget-s 3600] [--seeds 0,1,2] [--updates 10]

Every arm trains the same policy (SmolLM2-135M-Instruct through LoRA, as an
``index`` policy: it draws the label token of a listed candidate; a chooser is
not trainable) for the same number of updates, from the same start,
for each seed, and is evaluated greedily on held-out real seeds:

- ``real``: every group on real pages in Chromium;
- ``synthetic``: every group on the offline default experience model;
- ``sim2real``: synthetic updates, then real ones, the real part sized to at
  most 10% of the real arm's real transitions where whole updates allow it;
- ``mixed``: ``--mixed-share`` of the groups real.

Each run (in its own process) copies the offline default's store (real transitions the
experience model was trained on and retrieves from; collected before, the
same for every arm, and not counted as any arm's real transitions).

First it times one real and one synthetic update and the evaluation,
prints the projected total, and cuts updates, then tasks (never arms or
seeds), to fit ``--budget-s``. It writes ``table.md`` and ``table.json`` in
``--out`` and prints one JSON line per run and per arm. Wall-clock on
MiniWoB is no argument for simulation (a real step here is cheaper than a
synthetic one); the table adds what each arm would take if every real step
cost ``--real-step-s`` seconds (WebArena's cost 3-10 s), with two real
episodes at a time.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _report import emit

ARMS = ("real", "synthetic", "sim2real", "mixed")


@dataclass(frozen=True, slots=True)
class Plan:
    tasks: tuple[str, ...]
    updates: int
    switch_at: int


def main() -> int:
    args = _arguments()
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        print(json.dumps(_run(args, **json.loads(args.child))), flush=True)
        return 0
    from dreamgym.sim_default import default_model_dir

    if not (default_model_dir() / "config.json").exists():
        print("the offline default experience model is missing: run `make sim-default` first", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    plan = Plan(tuple(args.tasks.split(",")), args.updates, _switch_at(args.updates))

    started = time.perf_counter()
    probe = _probe(args, plan)
    before = probe["before"]
    plan = _fit(args, plan, probe, len(seeds))
    print(json.dumps({"plan": {"tasks": plan.tasks, "updates": plan.updates, "switch_at": plan.switch_at},
                      "probe": {k: v for k, v in probe.items() if k != "before"},
                      "projected_s": round(_projected(plan, probe, len(seeds), args), 1)}), flush=True)  # fmt: skip
    if plan.tasks != tuple(args.tasks.split(",")):
        before = _evaluate_only(args, plan)  # the before-figure on the tasks kept

    runs: list[dict[str, Any]] = []
    for seed in seeds:
        for arm in ARMS:
            run = _spawn(args, plan, arm, seed, plan.updates, f"{arm}-{seed}")
            runs.append(run)
            print(json.dumps({"run": run}), flush=True)
    table = _table(runs, before, plan, args)
    (args.out / "table.json").write_text(json.dumps({"plan": asdict(plan), "before": before, "arms": table,
                                                     "runs": runs, "seconds": time.perf_counter() - started},
                                                    indent=1))  # fmt: skip
    (args.out / "table.md").write_text(_markdown(table, before, plan, args, len(seeds)))
    print((args.out / "table.md").read_text())
    real = next(row for row in table if row["arm"] == "real")
    for row in table:
        emit(f"sim2real/{row['arm']}/success", row["success_mean"], "held-out success rate", "real-only arm",
             real["success_mean"], real_transitions=row["real_transitions_mean"], seeds=len(seeds))  # fmt: skip
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="click-tab,click-checkboxes,enter-text")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds (at least 3)")
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-update", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--mixed-share", type=float, default=0.25)
    parser.add_argument("--train-seeds", default="0-23", help="page seeds groups start from (the store has them)")
    parser.add_argument("--eval-seeds", default="1000-1003")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=3600.0)
    parser.add_argument("--real-step-s", type=float, nargs="+", default=[3.0, 10.0])
    parser.add_argument("--policy-model", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/sim2real"))
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)  # one run, in its own process
    return parser.parse_args()


def _switch_at(updates: int) -> int:
    """Synthetic updates of sim2real: the real tail is 10% of the updates, at least one."""
    return updates - max(1, math.floor(0.1 * updates))


def _trainer(
    args: argparse.Namespace, plan: Plan, arm: str, seed: int, updates: int, root: Path, *, eval_at_start: bool = False
) -> Any:
    from dreamgym._cli_run import parse_seeds
    from dreamgym._cli_train import miniwob_tasks
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.offline import smollm2_checkpoint
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.sim_default import default_model_dir, default_store_dir
    from dreamgym.trainer import TrainConfig, Trainer
    from dreamgym.trainer._miniwob import MiniWobSides, held_out, miniwob_sides

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(default_store_dir(), root / "store")
    mode = {"real": "mixed", "synthetic": "synthetic", "sim2real": "sim2real", "mixed": "mixed"}[arm]
    share = {"real": 1.0, "mixed": args.mixed_share}.get(arm, 0.25)
    config = TrainConfig(
        mode=mode,  # type: ignore[arg-type]
        updates=updates,
        output_dir=root / "run",
        group_size=args.group_size,
        groups_per_update=args.groups_per_update,
        learning_rate=args.lr,
        real_share=share,
        switch_at=min(plan.switch_at, updates - 1) if arm == "sim2real" else 0,
        eval_at_start=eval_at_start,
        seed=seed,
        report_to=(),
    )
    tasks = miniwob_tasks(list(plan.tasks), args.max_steps)
    eval_seeds = parse_seeds(args.eval_seeds)
    policy = LocalPolicy.load(
        args.policy_model or smollm2_checkpoint(),
        config=LocalPolicyConfig(mode="index", temperature=1.0, seed=seed, list_actions=False),
    )
    sides = MiniWobSides(
        store=root / "store",
        eval_store=root / "eval-store",
        sim_model=default_model_dir(),
        exclude_task_seeds=held_out([task.task_id for task in tasks], eval_seeds),
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=2),
    )
    return Trainer(config, policy=policy, tasks=tasks, open_sides=miniwob_sides(sides),
                   train_seeds=parse_seeds(args.train_seeds), eval_seeds=eval_seeds)  # fmt: skip


def _probe(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """Time one real update between two evaluations (the first is the before-figure), and one synthetic update."""
    real = _spawn(args, plan, "real", 0, 1, "probe-real", eval_at_start=True)
    real_update = real["rollout_seconds"] + real["optimizer_seconds"]
    synthetic = _spawn(args, plan, "synthetic", 0, 1, "probe-synthetic")
    return {
        "real_update_s": round(real_update, 1),
        "synthetic_update_s": round(synthetic["rollout_seconds"] + synthetic["optimizer_seconds"], 1),
        "synthetic_step_s": round(synthetic["rollout_seconds"] / max(1, synthetic["synthetic_transitions"]), 3),
        "eval_s": round(max(0.0, (real["seconds"] - real_update) / 2), 1),
        "before": real["evaluations"][0],
    }


def _spawn(
    args: argparse.Namespace, plan: Plan, arm: str, seed: int, updates: int, name: str, *, eval_at_start: bool = False
) -> dict[str, Any]:
    """One training run in a fresh process (each holds a model and an optimizer; memory returns with the process)."""
    child = {"arm": arm, "seed": seed, "updates": updates, "tasks": list(plan.tasks), "switch_at": plan.switch_at,
             "name": name, "eval_at_start": eval_at_start}  # fmt: skip
    command = [sys.executable, __file__, *sys.argv[1:], "--child", json.dumps(child)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"run {name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _run(
    args: argparse.Namespace, *, arm: str, seed: int, updates: int, tasks: list[str], switch_at: int, name: str,
    eval_at_start: bool,
) -> dict[str, Any]:  # fmt: skip
    plan = Plan(tuple(tasks), updates, switch_at)
    trainer = _trainer(args, plan, arm, seed, updates, args.out / name, eval_at_start=eval_at_start)
    result = trainer.train(resume=False)
    evaluation = result.evaluations[-1][1]
    return {
        "arm": arm,
        "seed": seed,
        "updates": result.state.update,
        "success": evaluation.success_rate,
        "successes": evaluation.successes,
        "episodes": evaluation.episodes,
        "real_transitions": result.state.real_steps,
        "synthetic_transitions": result.state.synthetic_steps,
        "model_calls": result.state.model_calls,
        "dropped_groups": result.state.dropped_groups,
        "seconds": round(result.seconds, 1),
        "rollout_seconds": round(result.state.rollout_seconds, 1),
        "optimizer_seconds": round(_optimizer_seconds(result), 1),
        "evaluations": [evaluation.as_dict() for _, evaluation in result.evaluations],
    }


def _optimizer_seconds(result: Any) -> float:
    """An update's time outside its rollouts, from TRL's step time in the metrics file."""
    path = result.final_dir.parent / "metrics.jsonl"
    step_times = [json.loads(line).get("train/step_time") for line in path.read_text().splitlines()]
    total = sum(float(t) for t in step_times if t is not None)
    return max(0.0, total - result.state.rollout_seconds)


def _projected(plan: Plan, probe: dict[str, Any], seeds: int, args: argparse.Namespace) -> float:
    per_task = 1.0 / len(args.tasks.split(","))  # evaluation scales with the tasks kept
    eval_s = probe["eval_s"] * len(plan.tasks) * per_task
    real, synthetic = probe["real_update_s"], probe["synthetic_update_s"]
    shares = {"real": 1.0, "synthetic": 0.0, "mixed": args.mixed_share,
              "sim2real": (plan.updates - plan.switch_at) / plan.updates}  # fmt: skip
    per_seed = sum(plan.updates * (s * real + (1 - s) * synthetic) + eval_s + 20.0 for s in shares.values())
    return seeds * per_seed


def _fit(args: argparse.Namespace, plan: Plan, probe: dict[str, Any], seeds: int) -> Plan:
    """Cut updates (to no fewer than 4), then tasks (to one), until the projection fits the budget."""
    while _projected(plan, probe, seeds, args) > args.budget_s:
        if plan.updates > 4:
            updates = plan.updates - 1
            plan = Plan(plan.tasks, updates, _switch_at(updates))
        elif len(plan.tasks) > 1:
            plan = Plan(plan.tasks[:-1], plan.updates, plan.switch_at)
        else:
            print(f"even 1 task and {plan.updates} updates exceed the budget; running that", file=sys.stderr)
            break
    return plan


def _evaluate_only(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    before: dict[str, Any] = _spawn(args, plan, "real", 0, 1, "before", eval_at_start=True)["evaluations"][0]
    return before


def _table(runs: list[dict[str, Any]], before: dict[str, Any], plan: Plan, args: argparse.Namespace) -> list[Any]:
    rows = []
    for arm in ARMS:
        mine = [run for run in runs if run["arm"] == arm]
        success = [run["success"] for run in mine]
        real = [run["real_transitions"] for run in mine]
        seconds = [run["seconds"] for run in mine]
        row: dict[str, Any] = {
            "arm": arm,
            "success_mean": statistics.fmean(success),
            "success_std": statistics.stdev(success) if len(success) > 1 else 0.0,
            "success_per_seed": success,
            "real_transitions_mean": statistics.fmean(real),
            "model_calls_mean": statistics.fmean(run["model_calls"] for run in mine),
            "seconds_mean": statistics.fmean(seconds),
        }
        for latency in args.real_step_s:
            row[f"seconds_at_{latency:g}s_per_real_step"] = (
                row["seconds_mean"] + row["real_transitions_mean"] * latency / 2
            )
        rows.append(row)
    real_arm = rows[0]["real_transitions_mean"]
    for row in rows:
        row["real_transitions_vs_real_arm"] = row["real_transitions_mean"] / real_arm if real_arm else None
    return rows


def _markdown(rows: list[Any], before: dict[str, Any], plan: Plan, args: argparse.Namespace, seeds: int) -> str:
    latencies = [f"{latency:g}" for latency in args.real_step_s]
    lines = [
        f"Tasks: {', '.join(plan.tasks)}; {plan.updates} updates of {args.groups_per_update} group(s) x "
        f"{args.group_size} episodes; sim2real switches after {plan.switch_at}; {seeds} seeds; held-out seeds "
        f"{args.eval_seeds}, {before['episodes']} episodes per evaluation (greedy).",
        f"Before training: {before['successes']}/{before['episodes']} = {before['success_rate']:.3f}.",
        "",
        "| arm | held-out success (mean ± sd over seeds) | per seed | real transitions | vs real arm | "
        "model calls | wall-clock s | " + " | ".join(f"s at {x} s/real step" for x in latencies) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(latencies),
    ]
    for row in rows:
        ratio = row["real_transitions_vs_real_arm"]
        cells = [
            row["arm"],
            f"{row['success_mean']:.3f} ± {row['success_std']:.3f}",
            ", ".join(f"{s:.2f}" for s in row["success_per_seed"]),
            f"{row['real_transitions_mean']:.0f}",
            f"{ratio:.2f}" if ratio is not None else "n/a",
            f"{row['model_calls_mean']:.0f}",
            f"{row['seconds_mean']:.0f}",
            *(f"{row[f'seconds_at_{x:g}s_per_real_step']:.0f}" for x in args.real_step_s),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
