"""The demo again from a finished demo's warm start and experience model, once per side: what synthetic groups bought.

    python benchmarks/demo_sides.py --from DIR [--arm real] [--arm synthetic] [--commit-results]

``--from`` is the ``out`` of a finished ``dreamgym demo`` (the default one:
``benchmarks/first_run.py --keep DIR`` leaves it at ``DIR/main/.cache/demo``).
Each arm runs ``dreamgym demo`` with that demo's settings and three changes:
the policy starts from the demo's own warm start (``--policy-model FROM/policy
--warm-epochs 0``: the weights phase 3 saved, so "before" is the same
evaluation), the experience model is the one phase 2 trained there
(``--sim-model FROM/experience-model``, its outcome judge included), and the
arm's side:

- ``real``: every training group on real pages (``--real-share 1``), the
  simulator shadowing them as in the demo;
- ``synthetic``: every training group on the experience model
  (``--real-share 0 --sim-trust 0``): no real training step.

- ``demo``: the default demo again (no change but the seed), for ``--draws`` above 1; its first draw is the
  kept demo itself.

GRPO runs from one warm start differ between seeds (real-only gained 19, 34 and 35 of 160 held-out successes
in ``demo_sides.json``'s three draws), so one draw per arm cannot tell a 0.9 ratio from 1.1. ``--draws N``
runs every arm N times, draw ``d`` with the kept demo's
``--seed`` plus ``d`` (the warm start and the held-out evaluation, greedy, are the same in every draw: only
training's sampling, and the seed set's explorers, move). ``--reuse`` reads a draw whose ``out`` already holds
a finished report of the same seed and warm start instead of running it again.

Prints one JSON line per arm and draw, and one for the kept demo (``demo``, draw 0): held-out success before
and after (160 pairs at the defaults), the paired counts and McNemar's p, per task, the groups each side
played and those that carried a gradient (rewards not all equal), the trust gate's last readings, and the
gain as a ratio against the same draw's ``real`` arm (the baseline measured in the same run; the targets: the
default demo and the synthetic arm each at least 0.9 of it). With several draws it then prints one line per
arm: the mean gain over the draws against the real arm's mean, and each draw's gain. ``--commit-results``
writes ``benchmarks/results/demo_sides.json`` (``--name NAME``: ``NAME.json``, for a kept demo of other settings
than the default's) with the date, the commit and the command; each arm's first
draw stays at ``OUT/ARM`` (later ones at ``OUT/ARM-D``) for ``benchmarks/exploitation.py --from OUT/synthetic``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _report as report

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "real": {"real_share": 1.0},
    "synthetic": {"real_share": 0.0, "sim_trust": 0.0},
    "demo": {},
}
"""Each arm's changes to the kept demo's settings."""
KEPT_OUT = ("out", "policy_model", "warm_epochs", "sim_model", "report_to")
"""Settings an arm sets itself, whatever the kept demo had."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo's out")
    parser.add_argument("--arm", action="append", choices=sorted(ARMS),
                        help="default: real, then synthetic (and demo, with --draws above 1)")  # fmt: skip
    parser.add_argument("--draws", type=int, default=1, help="runs of each arm, seeds apart (default 1)")
    parser.add_argument("--reuse", action="store_true", help="read a draw already finished under --out")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "demo_sides")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="demo_sides", help="the results file's name, without .json")
    args = parser.parse_args()
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    run = report.provenance()
    kept = json.loads((args.kept / "report.json").read_text())
    for needed in ("policy", "experience-model"):
        if not (args.kept / needed / "config.json").exists():
            parser.error(f"{args.kept / needed} holds no model: --from must be a finished demo's out")
    arms = args.arm or ["real", "synthetic", *(["demo"] if args.draws > 1 else [])]
    if "real" not in arms and args.commit_results:
        parser.error("the real arm is every ratio's baseline: run it (--arm real) to commit the results")
    seed = int(kept["settings"].get("seed") or 0)
    rows: dict[tuple[str, int], dict[str, Any]] = {("demo", 0): _row(kept, seconds=kept["total_s"])}
    for draw in range(args.draws):
        for arm in arms:
            if (arm, draw) in rows:
                continue
            out = args.out / (arm if draw == 0 else f"{arm}-{draw}")
            rows[arm, draw] = _run_arm(args, kept, arm, out, seed=seed + draw)
    emitted = []
    for (name, draw), row in rows.items():
        figure = f"held-out gain of the {name} run"
        baseline = rows[("real", draw)]["gain"] if ("real", draw) in rows else 0.0  # no real arm: no ratio
        emitted.append(report.emit(figure, row["gain"], "successes", "every group real", baseline,
                                   arm=name, draw=draw, seed=seed + draw, **row))  # fmt: skip
    if args.draws > 1 and ("real", 0) in rows:
        real = [rows["real", draw]["gain"] for draw in range(args.draws)]
        for name in dict.fromkeys(name for name, _ in rows):
            gains = [rows[name, draw]["gain"] for draw in range(args.draws) if (name, draw) in rows]
            figure = f"mean held-out gain of the {name} runs over {len(gains)} draws"
            baseline = f"every group real, mean over {args.draws} draws"
            spread = max(gains) - min(gains)
            emitted.append(report.emit(figure, statistics.mean(gains), "successes", baseline, statistics.mean(real),
                                       arm=name, gains=gains, real_gains=real, spread=spread,
                                       tasks=_task_means(rows, name, args.draws)))  # fmt: skip
    if args.commit_results:
        result = {**run, "from": str(args.kept), "draws": args.draws, "rows": emitted}
        (ROOT / "benchmarks" / "results" / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _task_means(rows: dict[tuple[str, int], dict[str, Any]], arm: str, draws: int) -> dict[str, dict[str, Any]]:
    """Per task, the arm's mean held-out gain over the draws beside the real arm's, and their ratio."""
    means: dict[str, dict[str, Any]] = {}
    for task in rows["real", 0]["tasks_before_after_of"]:
        gains = {side: [rows[side, d]["tasks_before_after_of"][task] for d in range(draws) if (side, d) in rows]
                 for side in (arm, "real")}  # fmt: skip
        mean = {side: statistics.mean(after - before for before, after, _ in got) for side, got in gains.items()}
        means[task] = {
            "gain": round(mean[arm], 2),
            "real_gain": round(mean["real"], 2),
            "ratio": round(mean[arm] / mean["real"], 4) if mean["real"] else None,
        }
    return means


def _run_arm(args: argparse.Namespace, kept: dict[str, Any], arm: str, out: Path, *, seed: int) -> dict[str, Any]:
    """One draw of one arm: ``dreamgym demo`` from the kept demo's warm start and experience model, ``--seed``
    ``seed``; with ``--reuse``, the report a finished run of the same seed and warm start left in ``out``."""
    policy = args.kept / "policy"
    done = out / "report.json"
    if args.reuse and done.exists():
        report_ = json.loads(done.read_text())
        ran = report_["settings"]
        if ran.get("seed") == seed and ran.get("policy_model") == str(policy) and ran.get("warm_epochs") == 0:
            print(f"demo_sides: {arm} seed {seed}: reusing {out}", file=sys.stderr, flush=True)
            return _row(report_, seconds=report_["total_s"]) | {"reused": str(out)}
    settings = {key: value for key, value in kept["settings"].items() if key not in KEPT_OUT and value is not None}
    settings |= ARMS[arm] | {"seed": seed}
    args.out.mkdir(parents=True, exist_ok=True)
    config = args.out / f"{out.name}.json"
    config.write_text(json.dumps(settings, indent=1))
    command = [str(Path(sys.executable).with_name("dreamgym")), "demo", "--config", str(config), "--out", str(out),
               "--policy-model", str(policy), "--warm-epochs", "0",
               "--sim-model", str(args.kept / "experience-model")]  # fmt: skip
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    return _row(json.loads(done.read_text()), seconds=time.perf_counter() - began)


def _row(demo: dict[str, Any], *, seconds: float) -> dict[str, Any]:
    """One demo's figures: success before and after, paired, per task; groups played and teaching, by side."""
    before, after = demo["before"], demo["after"]
    metrics = demo["training"].get("metrics", {})
    tasks = {
        task["task_id"]: [task["successes"], later["successes"], task["episodes"]]
        for task, later in zip(before["tasks"], after["tasks"], strict=True)
    }
    return {
        "settings": {key: demo["settings"][key] for key in ("real_share", "sim_trust", "policy_model", "sim_model")},
        "before": before["successes"],
        "after": after["successes"],
        "episodes": before["episodes"],
        "gain": after["successes"] - before["successes"],
        "paired": demo.get("paired"),
        "verdict": demo["verdict"],
        "tasks_before_after_of": tasks,
        "groups": {side: metrics.get(f"train/{side}_groups", 0.0) for side in ("real", "synthetic", "gated")},
        "teaching_groups": {side: metrics.get(f"train/teaching_groups/{side}") for side in ("real", "synthetic")},
        "training_steps": {side: metrics.get(f"train/{side}_steps", 0.0) for side in ("real", "synthetic")},
        "sim_trust": {k.split("/", 2)[-1]: v for k, v in metrics.items() if k.startswith("train/sim_trust/")},
        "seconds": round(seconds, 1),
        "phases_s": {name: round(s, 1) for name, s in demo["phases_s"].items()},
    }


if __name__ == "__main__":
    sys.exit(main())
