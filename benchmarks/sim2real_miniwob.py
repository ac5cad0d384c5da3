"""The paper's table at CPU scale: real-only, synthetic-only, sim-to-real and mixed GRPO of the tiny index policy.

    python benchmarks/sim2real_miniwob.py [--seeds 0,1,2] [--updates 60] [--tasks a,b,c,d,e]

1. **Seed set** (the paper's offline real data): one demonstrator and one
   random-explorer episode per (task, seed) of ``--seed-set``, real, in
   Chromium. The experience model is trained on it alone, from scratch, with
   the offline default's recipe and template but ``--sim-epochs``
   (``DEFAULT_TRAINING``, ``DEFAULT_TEMPLATE``; TRL's loop and the template
   without earlier actions before 2026-12-05), and retrieves only from it;
   its digest and recipe go in the results.
   The held-out seeds are never collected before evaluation, never retrieved
   and never trained on by anything.
2. **Warm start**: the tiny index policy of ``benchmarks/learning_curve.py``,
   behaviour-cloned on the seed set's demonstrator episodes and sized on
   ``--val-seeds`` the same way; every arm and seed starts from it.
3. **Arms**, each for ``--updates`` updates and each training seed, in its own
   process, evaluated greedily on every held-out (task, seed) once every
   ``--eval-every`` updates and at the last. Every run starts from the same
   weights and a greedy evaluation is deterministic, so update 0 is evaluated
   once, before the runs, and is every run's start:
   - ``real``: every group on real pages;
   - ``synthetic``: every group on the experience model (start pages from the seed set);
   - ``sim2real``: synthetic updates, then real ones, the real part
     ``--sim2real-real`` of the updates (its real transitions are reported
     against the real arm's, which the paper puts at <= 10%);
   - ``mixed``: ``--mixed-share`` of each update's groups real.
4. **epsilon_R where it matters**: the experience model predicts, one step at
   a time, every step of the held-out episodes each arm's final policy played
   (retrieval kept off every held-out pair) for the training seeds in
   ``--shadow-seeds`` (the first by default: the prediction costs about as much
   as a run); its reward is scored against the real reward beside always-0 and
   the majority class on the same steps.
5. Writes ``OUT/sim2real_miniwob.json`` and ``.svg`` (every arm's mean
   held-out success against updates, one figure) after every run
   (``"complete": false`` until the last), and with ``--commit-results`` the
   same under ``benchmarks/results/`` with the date, the commit and the
   command. One JSON line per run on stdout.

Real transitions count what each arm's training rolled out on real pages;
the seed set is the same for every arm and counted apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import learning_curve as lc
from _report import emit, settings

ARMS = ("real", "synthetic", "sim2real", "mixed")
RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    args = _arguments()
    lc._commit()  # the code that runs, not whatever HEAD is when it ends
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "filelock", "urllib3", "transformers", "dreamgym.runtime"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.child:
        print(json.dumps(_run(args, **json.loads(args.child))), flush=True)
        return 0
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.tasks.split(",")
    sim = anyio.run(_experience_model, args, names)
    tuning = _warm_start(args, names)
    start = _start(args)
    (args.out / "start.json").write_text(json.dumps(start))
    runs: list[dict[str, Any]] = []
    plan = [(arm, int(seed)) for seed in args.seeds.split(",") for arm in args.arms.split(",")]  # whole seeds first
    for arm, seed in plan:
        run = _spawn(args, arm, seed)
        runs.append(run)
        print(json.dumps({"run": {k: v for k, v in run.items() if k != "evaluations"}}), flush=True)
        result = _summary(args, names, sim, tuning, start, runs, time.perf_counter() - started)
        _write(args, {**result, "complete": len(runs) == len(plan)})
    real = next((row for row in result["arms"] if row["arm"] == "real"), None)
    for row in result["arms"]:
        emit(f"sim2real/{row['arm']}/held_out_success", row["end_mean"], "held-out success rate (mean over seeds)",
             "real-only arm", real["end_mean"] if real else float("nan"), start=row["start_mean"],
             real_transitions=row["real_transitions_mean"], seeds=row["seeds"])  # fmt: skip
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", default="0,1,2", help="training seeds (at least 3 for the table)")
    parser.add_argument("--seed-set", default="0-39", help="page seeds of the offline real data")
    parser.add_argument("--sim-epochs", type=float, default=2.0, help="the experience model's training epochs")
    lc.add_policy_arguments(parser, groups_per_update=2)
    parser.add_argument("--mixed-share", type=float, default=0.5)
    parser.add_argument("--sim2real-real", type=float, default=0.1, help="share of sim2real's updates on real pages")
    parser.add_argument("--shadow-seeds", default="", help="training seeds whose final evaluation the experience "
                        "model shadows for epsilon_R (default: the first of --seeds)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the warm start's seed")
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/sim2real"))
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)  # one run, in its own process
    return parser.parse_args()


async def _experience_model(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Collect the seed set and train the experience model on it alone (kept across invocations with one recipe)."""
    from dreamgym.jobs.sim_default import DEFAULT_TEMPLATE, DEFAULT_TRAINING, CollectPlan, build_default
    from dreamgym.simulator import as_recorded, weights_digest

    target = args.out / "sim-model"
    train = dataclasses.replace(DEFAULT_TRAINING, epochs=args.sim_epochs)
    recipe = {"tasks": names, "seed_set": args.seed_set, "sim_epochs": args.sim_epochs, "max_steps": args.max_steps,
              "training": as_recorded(train),
              "template": DEFAULT_TEMPLATE.template_id}  # fmt: skip
    stamp = args.out / "sim-model.recipe.json"
    fresh = not stamp.exists() or json.loads(stamp.read_text()) != recipe
    if fresh:
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(_seed_store(args).parent, ignore_errors=True)
    started = time.perf_counter()
    plan = CollectPlan(tasks=names, seeds=lc._seeds(args.seed_set), explorers=1, max_steps=args.max_steps,
                       contexts=args.contexts)  # fmt: skip
    await build_default(plan=plan, train=train, out=target, force=fresh)
    stamp.write_text(json.dumps(recipe))
    seconds = time.perf_counter() - started
    steps = await _store_steps(_seed_store(args))
    logging.info("experience model: %d seed-set steps, %.0f s", steps, seconds)
    return {"dir": str(target), "digest": weights_digest(target), "seed_set_steps": steps,
            "build_seconds": round(seconds, 1) if fresh else None, **recipe}  # fmt: skip


def _seed_store(args: argparse.Namespace) -> Path:
    return args.out / "sim-model-data" / "store"  # where build_default keeps the data of out=OUT/sim-model


async def _store_steps(path: Path) -> int:
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        return int((await store.stats()).steps.get("real", 0))


def _warm_start(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    """The learning curve's warm start, cloned from the seed set's demonstrator episodes; saved in OUT/warm."""
    bc = argparse.Namespace(**vars(args), bc_seeds=args.seed_set)
    tasks = lc._tasks(bc)
    demos = anyio.run(lc._collect_demos, bc, names)  # the seed set's demonstrator episodes (deterministic)
    model, tokenizer = lc._build_policy(bc, tasks, demos)
    warm, tuning = lc._tune_warm_start(bc, tasks, demos, model, tokenizer)
    target = args.out / "warm"
    shutil.rmtree(target, ignore_errors=True)
    warm.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return tuning


def _start(args: argparse.Namespace) -> dict[str, Any]:
    """The warm start's greedy held-out success, evaluated once: update 0 of every run."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tasks = lc._tasks(args)
    model = AutoModelForCausalLM.from_pretrained(args.out / "warm")
    tokenizer = AutoTokenizer.from_pretrained(args.out / "warm")
    scores = anyio.run(lc._evaluate, args, tasks, model, tokenizer, lc._seeds(args.held_out_seeds), "held-out-start")
    logging.info("update 0 (every run's start): %d/%d held-out", scores["successes"], scores["n"])
    return {"update": 0, "real_transitions": 0, **scores}


def _spawn(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    """One training run in a fresh process (each holds a model and an optimizer; memory returns with the process)."""
    child = json.dumps({"arm": arm, "seed": seed})
    command = [sys.executable, __file__, *sys.argv[1:], "--child", child]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"run {arm}-{seed} failed ({done.returncode}); its log is above")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _updates_on_real(args: argparse.Namespace) -> int:
    return max(1, round(args.sim2real_real * args.updates))


def _run(args: argparse.Namespace, *, arm: str, seed: int) -> dict[str, Any]:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.jobs import StackSettings, held_out, stack_sides
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import TrainConfig, Trainer

    root = args.out / "runs" / f"{arm}-{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(_seed_store(args), root / "store")
    tasks = lc._tasks(args)
    held = held_out([task.task_id for task in tasks], lc._seeds(args.held_out_seeds))
    mode = {"real": "mixed", "synthetic": "synthetic", "sim2real": "sim2real", "mixed": "mixed"}[arm]
    config = TrainConfig(
        mode=mode,  # type: ignore[arg-type]
        updates=args.updates,
        output_dir=root / "run",
        group_size=args.group_size,
        groups_per_update=args.groups_per_update,
        learning_rate=args.lr,
        lora=None,
        real_share={"real": 1.0, "mixed": args.mixed_share}.get(arm, 0.25),
        switch_at=args.updates - _updates_on_real(args) if arm == "sim2real" else 0,
        eval_every=args.eval_every,
        eval_at_start=False,  # every run's update 0 is the start the parent evaluated once
        resample_flat=args.resample_flat,
        seed=seed,
        report_to=(),
    )
    policy = LocalPolicy.load(
        args.out / "warm",
        name="tiny-index",
        config=LocalPolicyConfig(mode="index", temperature=args.temperature, seed=seed, list_actions=False),
    )
    stack = StackSettings(
        store=root / "store",
        eval_store=root / "eval-store",
        sim_model=args.out / "sim-model",
        exclude_task_seeds=held,
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=args.contexts),
    )
    trainer = Trainer(config, policy=policy, tasks=tasks, open_sides=stack_sides(stack),
                      train_seeds=lc._seeds(args.train_seeds), eval_seeds=lc._seeds(args.held_out_seeds),
                      eval_temperature=0.0)  # fmt: skip
    result = trainer.train(resume=False)
    updates = [update for update, _ in result.evaluations]
    invalid = anyio.run(lc._eval_invalid_rates, root / "eval-store", tasks, updates)
    transitions = lc._real_transitions(root / "run" / "metrics.jsonl")
    evaluations = [json.loads((args.out / "start.json").read_text())] + [
        {"update": update, "real_transitions": transitions.get(update, 0), **lc._scores(evaluation, invalid[update])}
        for update, evaluation in result.evaluations
    ]
    shadowed = args.shadow_seeds.split(",") if args.shadow_seeds else args.seeds.split(",")[:1]
    shadow = anyio.run(_epsilon_r, args, root, tasks, updates[-1], held) if str(seed) in shadowed else None
    pick = ("successes", "n", "ci_low", "ci_high")
    return {
        "arm": arm,
        "seed": seed,
        "updates": result.state.update,
        "start": {k: evaluations[0][k] for k in pick},
        "end": {k: evaluations[-1][k] for k in pick},
        "real_transitions": result.state.real_steps,
        "synthetic_transitions": result.state.synthetic_steps,
        "switched_at": result.state.switched_at,
        "model_calls": result.state.model_calls,
        "dropped_groups": result.state.dropped_groups,
        "dropped": result.state.dropped,
        "cut_episodes": result.state.cut_episodes,
        "seconds": round(result.seconds, 1),
        "rollout_seconds": round(result.state.rollout_seconds, 1),
        "epsilon_r": shadow,
        "evaluations": evaluations,
        "diagnostics": lc._diagnostics(root / "run" / "metrics.jsonl"),
    }


async def _epsilon_r(
    args: argparse.Namespace, root: Path, tasks: list[Any], update: int, held: tuple[tuple[str, int | None], ...]
) -> dict[str, Any]:
    """The experience model's reward on the held-out real steps the final policy played, beside the baselines."""
    from dreamgym.core.types import Step
    from dreamgym.jobs._demo_report import score_predictions
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries

    label = f"eval/u{update}/"
    async with LmdbReplayStore(root / "eval-store", readonly=True) as played:
        steps: list[Step] = []
        for task in tasks:
            found = await played.get_steps(await played.task_seqs(task.task_id, source="real"))
            steps += [step for step in found if step.group_id.startswith(label)]
    async with LmdbReplayStore(root / "store") as store:
        model = load_experience_model(args.out / "sim-model", store=store)
        queries = await teacher_forced_queries(
            steps, store=store, neighbours=model.config.template.neighbours, exclude_task_seeds=held
        )
        made = await predict_steps(model, queries)
    score = score_predictions([step for step, _ in queries], made.predictions)
    rewarded = [step for step, _ in queries if abs(step.reward) > 0.5]
    return {"n": score.n, "reward_correct": score.reward_correct, "always_0_correct": score.zero_reward_correct,
            "majority_class_correct": score.majority_reward_correct, "done_correct": score.done_correct,
            "unusable": score.unusable, "rewarded_steps": len(rewarded),
            "epsilon_r": round(1 - score.reward_correct / score.n, 4) if score.n else None}  # fmt: skip


def _summary(
    args: argparse.Namespace,
    names: list[str],
    sim: dict[str, Any],
    tuning: list[dict[str, Any]],
    start: dict[str, Any],
    runs: list[dict[str, Any]],
    seconds: float,
) -> dict[str, Any]:
    arms = []
    real_arm = [run["real_transitions"] for run in runs if run["arm"] == "real"]
    for arm in args.arms.split(","):
        mine = [run for run in runs if run["arm"] == arm]
        if not mine:
            continue
        end = [run["end"]["successes"] / run["end"]["n"] for run in mine]
        begun = [run["start"]["successes"] / run["start"]["n"] for run in mine]
        real = statistics.fmean(run["real_transitions"] for run in mine)
        shadow = [run["epsilon_r"] for run in mine if run["epsilon_r"] and run["epsilon_r"]["n"]]
        arms.append({
            "arm": arm, "seeds": len(mine), "start_mean": round(statistics.fmean(begun), 4),
            "end_mean": round(statistics.fmean(end), 4),
            "end_sd": round(statistics.stdev(end), 4) if len(end) > 1 else 0.0,
            "end_per_seed": [round(e, 4) for e in end], "real_transitions_mean": round(real, 1),
            "real_transitions_vs_real_arm": round(real / statistics.fmean(real_arm), 4) if real_arm else None,
            "epsilon_r": {key: sum(s[key] for s in shadow) for key in
                          ("n", "reward_correct", "always_0_correct", "majority_class_correct", "unusable")},
            "epsilon_r_seeds": [run["seed"] for run in mine if run["epsilon_r"]],
            "seconds_mean": round(statistics.fmean(run["seconds"] for run in mine), 1),
        })  # fmt: skip
    return {
        "date": datetime.date.today().isoformat(),
        "commit": lc._commit(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "tasks": [f"miniwob/{name}" for name in names],
        "settings": settings(args, leave_out=("child",)),
        "experience_model": sim,
        "warm_start_tuning": tuning,
        "start": start,
        "arms": arms,
        "runs": runs,
        "seconds": round(seconds, 1),
    }


def _write(args: argparse.Namespace, result: dict[str, Any]) -> None:
    text = json.dumps(result, indent=1) + "\n"
    svg = _svg(result)
    (args.out / "sim2real_miniwob.json").write_text(text)
    (args.out / "sim2real_miniwob.svg").write_text(svg)
    if args.commit_results:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "sim2real_miniwob.json").write_text(text)
        (RESULTS / "sim2real_miniwob.svg").write_text(svg)


COLOURS = {"real": "#1f5fbf", "synthetic": "#d0701a", "sim2real": "#2a9d3a", "mixed": "#8a3ab9"}


def _svg(result: dict[str, Any]) -> str:
    """Held-out success against updates: each arm's mean over seeds (line) and each seed's (dots)."""
    width, height, pad = 560, 300, 44
    updates = max(run["updates"] for run in result["runs"]) or 1

    def x(v: float) -> float:
        return pad + v / updates * (width - 2 * pad)

    def y(v: float) -> float:
        return height - pad - v * (height - 2 * pad)

    parts = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="white" stroke="#ccc"/>',
             f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">updates</text>',
             '<text x="8" y="16" font-size="12">held-out success (mean over seeds; dots: seeds)</text>']  # fmt: skip
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y(tick)}" y2="{y(tick)}" stroke="#eee"/>'
                     f'<text x="6" y="{y(tick) + 4}" font-size="10">{tick:.2f}</text>')  # fmt: skip
    for n, row in enumerate(result["arms"]):
        colour = COLOURS.get(row["arm"], "#444")
        mine = [run for run in result["runs"] if run["arm"] == row["arm"]]
        points: dict[int, list[float]] = {}
        for run in mine:
            for evaluation in run["evaluations"]:
                rate = evaluation["successes"] / max(1, evaluation["n"])
                points.setdefault(evaluation["update"], []).append(rate)
                parts.append(f'<circle cx="{x(evaluation["update"])}" cy="{y(rate)}" r="2" fill="{colour}" '
                             'fill-opacity="0.4"/>')  # fmt: skip
        line = " ".join(f"{x(u)},{y(statistics.fmean(v))}" for u, v in sorted(points.items()))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{width - pad - 70}" y="{pad + 14 * n}" font-size="11" fill="{colour}">'
                     f'{row["arm"]}</text>')  # fmt: skip
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">' + (
        "".join(parts) + "</svg>\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
