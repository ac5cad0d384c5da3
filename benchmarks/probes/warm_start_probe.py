"""Can the tiny index policy learn a task from demonstrations at all? Held-out label accuracy after behaviour cloning.

    python benchmarks/probes/warm_start_probe.py [--tasks click-button] [--epochs 2,4,8,16] [--lm-weights 0,1]

Collects one demonstrator episode per (task, seed) of ``--train-seeds`` and
``--val-seeds`` (disjoint), builds the tiny index policy on the training
pages, and for each ``--epochs`` size behaviour-clones a fresh copy and
scores its greedy label on every held-out demonstrated decision, per task;
each size with each ``--lm-weights`` value (0: the label's cross-entropy
alone; 1: with the next-token loss on the pages beside it).
The baseline, measured on the same decisions, is the best fixed label (the
one the training decisions use most): a policy at that figure has learned
the label prior, not the page. One JSON line per size; with
``--commit-results`` ``benchmarks/results/warm_start_probe.json`` with the
date, the commit and the command.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import logging
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import anyio
import learning_curve as lc
from _report import emit

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main() -> int:
    args = _arguments()
    lc._commit()  # the code that runs, not whatever HEAD is when it ends
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import torch

    from dreamgym.trainer import WarmStartConfig, demonstrations, warm_start

    torch.set_num_threads(2)
    names = args.tasks.split(",")
    tasks = lc._tasks(args)
    train_seeds, val_seeds = set(lc._seeds(args.train_seeds)), set(lc._seeds(args.val_seeds))
    if train_seeds & val_seeds:
        raise SystemExit("--train-seeds and --val-seeds overlap")
    collect = argparse.Namespace(**vars(args), bc_seeds=f"{args.train_seeds},{args.val_seeds}")
    episodes = anyio.run(lc._collect_demos, collect, names)
    train = [e for e in episodes if e[0].seed in train_seeds]
    val = [e for e in episodes if e[0].seed in val_seeds]
    model, tokenizer = lc._build_policy(args, tasks, train)
    rows = []
    sizes = [(float(w), float(e)) for w in args.lm_weights.split(",") for e in args.epochs.split(",")]
    for lm_weight, epochs in sizes:
        policy = lc._policy(copy.deepcopy(model), tokenizer, args, temperature=0.0)
        fit_on, _ = demonstrations(policy, train, tasks)
        held, _ = demonstrations(policy, val, tasks)
        config = WarmStartConfig(epochs=epochs, learning_rate=args.lr, batch_size=args.batch, seed=args.seed,
                                 lm_weight=lm_weight)  # fmt: skip
        fit = warm_start(policy, fit_on, config)
        row = {"lm_weight": lm_weight, "epochs": epochs, "updates": fit.updates, "train_examples": len(fit_on),
               "val_examples": len(held), "train_accuracy": round(fit.accuracy, 4),
               "tasks": _accuracy(policy, fit_on, held)}  # fmt: skip
        rows.append(row)
        for task in row["tasks"]:
            emit(f"warm_start_probe/{task['task']}/val_label_accuracy", task["val_accuracy"], "share of held-out "
                 "decisions", "best fixed label", task["fixed_label_accuracy"], epochs=epochs,
                 lm_weight=lm_weight)  # fmt: skip
    result = {"date": datetime.date.today().isoformat(), "commit": lc._commit(),
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "sizes": rows}  # fmt: skip
    text = json.dumps(result, indent=1) + "\n"
    (args.out / "warm_start_probe.json").write_text(text)
    if args.commit_results:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "warm_start_probe.json").write_text(text)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="click-button")
    parser.add_argument("--train-seeds", default="0-239")
    parser.add_argument("--val-seeds", default="240-299")
    parser.add_argument("--epochs", default="2,4,8,16", help="sizes, each from the same fresh model")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lm-weights", default="0,1", help="WarmStartConfig.lm_weight values, each with every size")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/warm-start-probe"))
    parser.add_argument("--commit-results", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def _accuracy(policy: Any, train: list[Any], held: list[Any]) -> list[dict[str, Any]]:
    """Per task: the greedy label's accuracy on the held-out decisions, beside the best fixed label's."""
    import torch

    from dreamgym.trainer._warm import _last_logits

    rows = []
    for task in sorted({example.task_id for example in held}):
        mine = [example for example in held if example.task_id == task]
        prior = Counter(example.label for example in train if example.task_id == task).most_common(1)
        fixed = prior[0][0] if prior else -1
        right = 0
        with torch.inference_mode():
            for start in range(0, len(mine), 16):
                batch = mine[start : start + 16]
                logits = _last_logits(policy.model, batch, policy.turns.eos_id)
                right += sum(int(int(logits[n].argmax()) == row.label) for n, row in enumerate(batch))
        rows.append({"task": task, "n": len(mine), "val_accuracy": round(right / len(mine), 4),
                     "fixed_label_accuracy": round(sum(e.label == fixed for e in mine) / len(mine), 4)})  # fmt: skip
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
