"""The first run as a new user has it: a fresh clone, an empty model cache, ``make demo``; phase by phase.

    python benchmarks/first_run.py [--keep DIR] [--commit-results]

Clones this repository's HEAD into a temporary directory (with ``../shared``
linked beside it, as the project expects), points ``DREAMGYM_CACHE`` at an
empty directory (the same as removing ``~/.cache/dreamgym``), and runs the
two halves of ``make demo`` one after the other, timing each:
``make setup`` (the virtualenv, torch, the packages, Chromium, the model
caches) and ``dreamgym demo`` with its defaults. Prints one JSON line with
``setup_s``, ``demo_s`` and ``total_s`` (the total against the 15-minute
target as the ratio), the demo's own phase times, its held-out success before
and after and its simulator's held-out reward and end-of-episode accuracy.
With ``--commit-results`` the same goes to ``benchmarks/results/first_run.json``
with the date, the commit and the command. ``make demo`` no longer builds the
offline default experience model, so the row has no ``sim_default_build_s``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _report as report
from learning_curve import _commit

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 15 * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=None, help="clone into DIR and keep it (default: a temporary one)")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/first_run.json")
    args = parser.parse_args()
    commit = _commit()
    base = args.keep or Path(tempfile.mkdtemp(prefix="dreamgym-first-run-"))
    base.mkdir(parents=True, exist_ok=True)
    shared = ROOT.parent / "shared"
    if shared.exists() and not (base / "shared").exists():
        (base / "shared").symlink_to(shared)
    clone = base / "main"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "DREAMGYM_CACHE": str(base / "cache")}
    env.pop("VIRTUAL_ENV", None)
    setup_s = _timed(["make", "setup"], clone, env)
    demo_s = _timed([str(clone / ".venv" / "bin" / "dreamgym"), "demo"], clone, env)
    demo = json.loads((clone / ".cache" / "demo" / "report.json").read_text())
    total_s = setup_s + demo_s
    row: dict[str, Any] = {
        "setup_s": round(setup_s, 1),
        "demo_s": round(demo_s, 1),
        "total_s": round(total_s, 1),
        "demo_phases_s": {name: round(seconds, 1) for name, seconds in demo["phases_s"].items()},
        "before": _success(demo["before"]),
        "after": _success(demo["after"]),
        "verdict": demo["verdict"],
        "experience_model": demo["models"]["experience_model"],
        "experience_model_kind": demo["models"]["experience_model_kind"],
        "reward_accuracy": round(demo["simulator_held_out"]["reward_accuracy"], 4),
        "termination_accuracy": round(demo["simulator_held_out"]["done_accuracy"], 4),
        "always_0_reward_accuracy": round(demo["simulator_held_out"]["zero_reward_accuracy"], 4),
        "held_out_steps": demo["simulator_held_out"]["n"],
        "cores": os.cpu_count(),
    }
    report.emit("first_run_total", total_s, "s", "the 15-minute target", TARGET_S, digits=1, **row)
    if args.commit_results:
        result = {
            "date": datetime.date.today().isoformat(),
            "commit": commit,
            "command": "python " + shlex.join(["benchmarks/first_run.py", *sys.argv[1:]]),
            "target_s": TARGET_S,
            **row,
        }
        (ROOT / "benchmarks" / "results" / "first_run.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True)
    return time.perf_counter() - started


def _success(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {
        "successes": evaluation["successes"],
        "n": evaluation["episodes"],
        "ci95": [round(value, 4) for value in evaluation["success_ci95"]],
    }


if __name__ == "__main__":
    sys.exit(main())
