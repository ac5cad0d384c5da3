"""Real-only GRPO of a tiny index policy on MiniWoB++, warm-started by behaviour cloning: held-out success by update.

    python benchmarks/learning_curve.py [--updates 100] [--eval-every 20] [--tasks a,b,c,d]

1. Collect one demonstrator episode per (task, seed) of ``--bc-seeds`` (the
   warm start's data) in headless Chromium.
2. Build the tiny index policy (``dreamgym.trainer.tiny_index_policy``: a
   tokenizer trained on those pages, ~1M parameters, label tokens).
3. Size the warm start on ``--val-seeds`` (disjoint from the reported
   held-out seeds): behaviour-clone (the label's cross-entropy plus
   ``--warm-lm-weight`` times the next-token loss on the pages, which is what
   lets it match the goal's words to an element) in stages up to each ``--warm-epochs``
   size and evaluate each greedily; keep the first whose every task lies in
   [0.05, 0.9] and whose overall success lies in [0.1, 0.6] (else, whole in
   range first, the one with the most tasks in range). Only the GRPO loss
   moves the weights after it.
4. Real-only GRPO from there (``Trainer``, mixed mode with every group real;
   groups with no reward spread are played again as other draws, up to
   ``--resample-flat`` rounds per update), evaluated greedily (or at
   ``--eval-temperature``) on ``--held-out-seeds``: each (task, seed) once,
   at update 0, every ``--eval-every`` updates and at the last.
5. Write ``OUT/learning_curve.json`` and ``.svg`` (held-out success against
   updates and against real transitions, with 95% Wilson intervals), and with
   ``--commit-results`` the same under ``benchmarks/results/`` with the date,
   the commit and the command. One JSON line per evaluation on stdout, and
   the end against the start as a ratio.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import json
import logging
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _report import commit as _commit
from _report import emit, settings

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    args = _arguments()
    _commit()  # the code that runs, not whatever HEAD is when it ends
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "filelock", "urllib3", "transformers", "dreamgym.runtime"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(args)
    demos = anyio.run(_collect_demos, args, [t.task_id.removeprefix("miniwob/") for t in tasks])
    model, tokenizer = _build_policy(args, tasks, demos)
    warm, tuning = _tune_warm_start(args, tasks, demos, model, tokenizer)
    curve = _train(args, tasks, warm, tokenizer)
    result = _summary(args, tasks, tuning, curve, time.perf_counter() - started)
    _write(args, result)
    start, end = result["start"], result["end"]
    emit("learning_curve/held_out_success", end["successes"] / end["n"], "held-out success rate",
         "the same policy at update 0", start["successes"] / start["n"], updates=result["updates"],
         end_ci=[end["ci_low"], end["ci_high"]], start_ci=[start["ci_low"], start["ci_high"]],
         separated=end["ci_low"] > start["ci_high"])  # fmt: skip
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bc-seeds", default="0-199", help="seeds of the demonstrator episodes the warm start clones")
    add_policy_arguments(parser, groups_per_update=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/learning-curve"))
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/")
    parser.add_argument("--eval-temperature", type=float, default=0.0,
                        help="the held-out evaluations' temperature (0: greedy; the warm start is sized "
                             "greedily either way)")  # fmt: skip
    return parser.parse_args()


def add_policy_arguments(parser: argparse.ArgumentParser, *, groups_per_update: int) -> None:
    """The tasks, seeds, warm start and GRPO settings this script shares with ``sim2real_miniwob.py``."""
    # tasks where the choices the goal names, listed first (agents.goal_first), leave a decision to learn: which
    # named choice comes when (click-option, choose-list: the option, then Submit; click-checkboxes: each named
    # box once, then Submit) or which typed text goes where (login-user, enter-password); tasks with one named
    # choice (click-button, click-test-2, click-tab) are solved by always answering the first label
    tasks = "click-checkboxes,click-option,choose-list,login-user,enter-password"
    parser.add_argument("--tasks", default=tasks)
    parser.add_argument("--val-seeds", default="2000-2019", help="seeds the warm start is sized on")
    parser.add_argument("--held-out-seeds", default="1000-1019", help="reported seeds: each (task, seed) once")
    parser.add_argument("--train-seeds", default="100-999", help="seeds real groups start from")
    parser.add_argument("--warm-epochs", default="0.1,0.2,0.3,0.5", help="warm-start sizes to try, in order")
    parser.add_argument("--warm-lr", type=float, default=1e-3)
    parser.add_argument("--warm-batch", type=int, default=4, help="examples per behaviour-cloning update")
    parser.add_argument("--warm-lm-weight", type=float, default=1.0, help="WarmStartConfig.lm_weight")
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-update", type=int, default=groups_per_update)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument(
        "--resample-flat",
        type=int,
        default=2,
        help="TrainConfig.resample_flat: rounds per update replacing groups with no reward spread",
    )
    parser.add_argument("--temperature", type=float, default=0.5,
                        help="the training temperature: at 1 the sampled policy learnt while its greedy readout "
                             "did not follow; at 0.5 it does")  # fmt: skip
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--contexts", type=int, default=2, help="real episodes in flight")


def _seeds(text: str) -> list[int]:
    from dreamgym.cli._common import parse_seeds

    return list(parse_seeds(text))


def _tasks(args: argparse.Namespace) -> list[Any]:
    from dreamgym.bridge import miniwob_tasks

    return miniwob_tasks(args.tasks.split(","), args.max_steps)


async def _collect_demos(args: argparse.Namespace, names: list[str]) -> list[list[Any]]:
    """One demonstrator episode per (task, BC seed), real, in Chromium; the episodes' steps."""
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig

    path = args.out / "demos"
    shutil.rmtree(path, ignore_errors=True)
    plan = CollectPlan(tasks=names, seeds=_seeds(args.bc_seeds), explorers=0, max_steps=args.max_steps,
                       contexts=args.contexts)  # fmt: skip
    config = StoreConfig(auto_index=False)
    async with LmdbReplayStore(path, embedder=HashingEmbedder(64), config=config) as store:
        await collect_miniwob(store, plan)
        steps = []
        for name in names:
            steps += await store.get_steps(await store.task_seqs(f"miniwob/{name}", source="real"))
    episodes: dict[str, list[Any]] = {}
    for step in steps:
        episodes.setdefault(step.episode_id, []).append(step)
    logging.info("demonstrations: %d episodes, %d steps", len(episodes), len(steps))
    return list(episodes.values())


def _build_policy(args: argparse.Namespace, tasks: list[Any], demos: list[list[Any]]) -> tuple[Any, Any]:
    from dreamgym.trainer import tiny_index_policy

    by_id = {task.task_id: task for task in tasks}
    pages = [(by_id[step.task_id], step.observation) for episode in demos for step in episode]
    pages += [(by_id[step.task_id], step.next_observation) for episode in demos for step in episode]
    return tiny_index_policy(pages, seed=args.seed)


def _policy(model: Any, tokenizer: Any, args: argparse.Namespace, *, temperature: float, limiter: Any = None) -> Any:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig

    config = LocalPolicyConfig(mode="index", temperature=temperature, seed=args.seed, list_actions=False)
    return LocalPolicy(model, tokenizer, name="tiny-index", config=config, limiter=limiter)


def _tune_warm_start(
    args: argparse.Namespace, tasks: list[Any], demos: list[list[Any]], model: Any, tokenizer: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Behaviour-clone in stages (each size continues the last), evaluating each on the validation seeds.

    Keeps the first size whose every task lies in [0.05, 0.9] and whose whole
    lies in [0.1, 0.6]; else, among those whose whole is in range (if any), the
    one with the most tasks in range, the whole nearest 0.35 breaking ties.
    """
    from dreamgym.trainer import WarmStartConfig, demonstrations, warm_start

    tuning: list[dict[str, Any]] = []
    best: tuple[tuple[bool, int, float], Any] | None = None
    current = copy.deepcopy(model)
    policy = _policy(current, tokenizer, args, temperature=0.0)
    examples, skipped = demonstrations(policy, demos, tasks)
    done = 0.0
    for epochs in (float(e) for e in args.warm_epochs.split(",")):
        config = WarmStartConfig(epochs=epochs - done, learning_rate=args.warm_lr, batch_size=args.warm_batch,
                                 seed=args.seed + len(tuning), lm_weight=args.warm_lm_weight)  # fmt: skip
        fit = warm_start(policy, examples, config)
        done = epochs
        scores = anyio.run(_evaluate, args, tasks, current, tokenizer, _seeds(args.val_seeds), f"val-{epochs}")
        row = {"epochs": epochs, "examples": fit.examples, "skipped_steps": skipped, "updates": fit.updates,
               "loss": [round(fit.first_loss, 4), round(fit.last_loss, 4)], "label_accuracy": round(fit.accuracy, 4),
               **scores}  # fmt: skip
        tuning.append(row)
        print(json.dumps({"warm_start": row}), flush=True)
        per_task = [t["successes"] / t["n"] for t in scores["tasks"]]
        overall = scores["successes"] / scores["n"]
        if all(0.05 <= p <= 0.9 for p in per_task) and 0.1 <= overall <= 0.6:
            return current, tuning
        rank = (not 0.1 <= overall <= 0.6, -sum(0.05 <= p <= 0.9 for p in per_task), abs(overall - 0.35))
        if best is None or rank < best[0]:
            best = (rank, copy.deepcopy(current))
    assert best is not None
    logging.warning("no warm-start size put every task in [0.05, 0.9] and the whole in [0.1, 0.6]; the closest kept")
    return best[1], tuning


async def _evaluate(
    args: argparse.Namespace, tasks: list[Any], model: Any, tokenizer: Any, seeds: list[int], label: str
) -> dict[str, Any]:
    """Greedy success on every (task, seed) once, per task, with the invalid-action rate."""
    from dreamgym.jobs import StackSettings, open_runtime
    from dreamgym.replay import HashingEmbedder, StoreConfig
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import evaluate

    path = args.out / "val" / label
    shutil.rmtree(path, ignore_errors=True)
    stack = StackSettings(store=path, runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=args.contexts),
                          embedder=HashingEmbedder(64), store_config=StoreConfig(auto_index=False))  # fmt: skip
    policy = functools.partial(_policy, model, tokenizer, args, temperature=0.0)
    async with open_runtime(stack, lambda limiter: policy(limiter=limiter)) as (runtime, _):
        result = await evaluate(runtime, tasks, seeds, label=label)
        invalid = await _invalid_rates(runtime.store, tasks, [label])
    return _scores(result, invalid[label])


async def _invalid_rates(store: Any, tasks: list[Any], labels: list[str]) -> dict[str, dict[str, float]]:
    """Per evaluation label, per task: the share of its steps whose action labels no listed choice."""
    rates: dict[str, dict[str, float]] = {label: {} for label in labels}
    for task in tasks:
        steps = await store.get_steps(await store.task_seqs(task.task_id, source="real"))  # read once per task
        for label in labels:
            mine = [s for s in steps if s.group_id.startswith(f"{label}/")]
            rates[label][task.task_id] = sum(s.action.is_invalid for s in mine) / len(mine) if mine else 0.0
    return rates


def _scores(result: Any, invalid: dict[str, float]) -> dict[str, Any]:
    low, high = result.interval
    return {
        "successes": result.successes, "n": result.episodes, "ci_low": round(low, 4), "ci_high": round(high, 4),
        "cut": result.cut, "steps": result.steps,
        "tasks": [{"task": t.task_id, "successes": t.successes, "n": t.episodes,
                   "invalid_action_rate": round(invalid.get(t.task_id, 0.0), 4)} for t in result.tasks],
    }  # fmt: skip


def _train(args: argparse.Namespace, tasks: list[Any], model: Any, tokenizer: Any) -> dict[str, Any]:
    """Real-only GRPO from the warm start, evaluated on the held-out seeds; its evaluations and counters."""
    from dreamgym.jobs import StackSettings, stack_sides
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import TrainConfig, Trainer

    root = args.out / "grpo"
    shutil.rmtree(root, ignore_errors=True)
    config = TrainConfig(
        mode="mixed", real_share=1.0, updates=args.updates, output_dir=root / "run", group_size=args.group_size,
        groups_per_update=args.groups_per_update, learning_rate=args.lr, lora=None, eval_every=args.eval_every,
        resample_flat=args.resample_flat, seed=args.seed, report_to=(),
    )  # fmt: skip
    stack = StackSettings(store=root / "store", eval_store=root / "eval-store",
                          runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=args.contexts))  # fmt: skip
    trainer = Trainer(
        config, policy=_policy(model, tokenizer, args, temperature=args.temperature), tasks=tasks,
        open_sides=stack_sides(stack), train_seeds=_seeds(args.train_seeds),
        eval_seeds=_seeds(args.held_out_seeds), eval_temperature=args.eval_temperature,
    )  # fmt: skip
    result = trainer.train(resume=False)
    invalid = anyio.run(_eval_invalid_rates, root / "eval-store", tasks, [u for u, _ in result.evaluations])
    transitions = _real_transitions(root / "run" / "metrics.jsonl")
    evaluations = []
    for update, evaluation in result.evaluations:
        row = {"update": update, "real_transitions": transitions.get(update, 0),
               **_scores(evaluation, invalid[update])}  # fmt: skip
        evaluations.append(row)
        emit("learning_curve/eval", row["successes"] / max(1, row["n"]), "held-out success rate",
             "update 0", evaluations[0]["successes"] / max(1, evaluations[0]["n"]), update=update,
             ci=[row["ci_low"], row["ci_high"]], n=row["n"], real_transitions=row["real_transitions"])  # fmt: skip
    diagnostics = _diagnostics(root / "run" / "metrics.jsonl")
    return {"evaluations": evaluations, "state": result.state.as_dict(), "seconds": result.seconds,
            "diagnostics": diagnostics}  # fmt: skip


async def _eval_invalid_rates(path: Path, tasks: list[Any], updates: list[int]) -> dict[int, dict[str, float]]:
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        rates = await _invalid_rates(store, tasks, [f"eval/u{update}" for update in updates])
    return {update: rates[f"eval/u{update}"] for update in updates}


def _real_transitions(metrics: Path) -> dict[int, int]:
    """Real transitions training had used at each evaluation (from the trainer's metrics)."""
    found: dict[int, int] = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == "eval":
            found[row["update"]] = row["real_transitions"]
    return found


def _diagnostics(metrics: Path) -> dict[str, list[float]]:
    """Per update: reward mean and spread, the share of trained groups with no spread, gradient norm,
    entropy, and (running totals) groups that came back flat and groups played again in their place."""
    keys = {"train/reward": "reward", "train/reward_std": "reward_std", "train/frac_reward_zero_std":
            "frac_reward_zero_std", "train/grad_norm": "grad_norm", "train/entropy": "entropy",
            "flat_groups": "flat_groups_total", "resampled_groups": "resampled_groups_total"}  # fmt: skip
    found: dict[str, list[float]] = {name: [] for name in keys.values()}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == "train" and "train/loss" in row:
            for key, name in keys.items():
                if key in row:
                    found[name].append(round(float(row[key]), 4))
    return found


def _summary(
    args: argparse.Namespace, tasks: list[Any], tuning: list[dict[str, Any]], curve: dict[str, Any], seconds: float
) -> dict[str, Any]:
    evaluations = curve["evaluations"]
    start, end = evaluations[0], evaluations[-1]
    pick = ("successes", "n", "ci_low", "ci_high")
    return {
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "tasks": [t.task_id for t in tasks],
        "settings": settings(args),
        "updates": end["update"],
        "start": {k: start[k] for k in pick},
        "end": {k: end[k] for k in pick},
        "separated": end["ci_low"] > start["ci_high"],
        "start_tasks": start["tasks"],
        "end_tasks": end["tasks"],
        "evaluations": evaluations,
        "warm_start_tuning": tuning,
        "trainer": curve["state"],
        "diagnostics": curve["diagnostics"],
        "seconds": round(seconds, 1),
    }


def _write(args: argparse.Namespace, result: dict[str, Any]) -> None:
    text = json.dumps(result, indent=1) + "\n"
    svg = _svg(result)
    (args.out / "learning_curve.json").write_text(text)
    (args.out / "learning_curve.svg").write_text(svg)
    if args.commit_results:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "learning_curve.json").write_text(text)
        (RESULTS / "learning_curve.svg").write_text(svg)


def _svg(result: dict[str, Any]) -> str:
    """Two panels: held-out success (with its 95% interval) against updates, and against real transitions."""
    rows = result["evaluations"]
    width, height, pad = 360, 240, 40
    panels = []
    for n, (key, title) in enumerate((("update", "updates"), ("real_transitions", "real transitions"))):
        xs = [r[key] for r in rows]
        span = max(xs) - min(xs) or 1
        left = n * (width + 20)

        def x(v: float, left: int = left, low: float = min(xs), span: float = span) -> float:
            return left + pad + (v - low) / span * (width - 2 * pad)

        def y(v: float) -> float:
            return height - pad - v * (height - 2 * pad)

        parts = [f'<rect x="{left}" y="0" width="{width}" height="{height}" fill="white" stroke="#ccc"/>',
                 f'<text x="{left + width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">{title}</text>',
                 f'<text x="{left + 8}" y="16" font-size="12">held-out success (95% CI)</text>']  # fmt: skip
        for tick in (0.0, 0.5, 1.0):
            label = f'<text x="{left + 6}" y="{y(tick) + 4}" font-size="10">{tick:.1f}</text>'
            parts.append(f'<line x1="{left + pad}" x2="{left + width - pad}" y1="{y(tick)}" y2="{y(tick)}" '
                         f'stroke="#eee"/>{label}')  # fmt: skip
        for r in rows:
            rate = r["successes"] / max(1, r["n"])
            parts.append(f'<line x1="{x(r[key])}" x2="{x(r[key])}" y1="{y(r["ci_low"])}" y2="{y(r["ci_high"])}" '
                         f'stroke="#888"/><circle cx="{x(r[key])}" cy="{y(rate)}" r="3" fill="#1f5fbf"/>'
                         f'<text x="{x(r[key])}" y="{height - pad + 14}" text-anchor="middle" '
                         f'font-size="9">{r[key]}</text>')  # fmt: skip
        points = " ".join(f"{x(r[key])},{y(r['successes'] / max(1, r['n']))}" for r in rows)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#1f5fbf"/>')
        panels.append("".join(parts))
    total = 2 * width + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{height}" '
            f'font-family="sans-serif">{"".join(panels)}</svg>\n')  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
