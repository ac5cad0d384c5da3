"""The first run as a new user has it: a fresh clone, an empty model cache, ``make demo``; phase by phase.

    python benchmarks/first_run.py [--keep DIR] [--skip-default] [--commit-results]
    python benchmarks/first_run.py --refresh-default

Clones this repository's HEAD into a temporary directory (with ``../shared``
linked beside it, as the project expects), points ``DREAMGYM_CACHE`` at an
empty directory (the same as removing ``~/.cache/dreamgym``), and runs the
two halves of ``make demo`` one after the other, timing each:
``make setup-demo`` (the virtualenv, torch, the packages the demo needs,
Chromium) and ``dreamgym demo`` with its defaults. Then, in the same clone and
cache, it builds the offline default experience model as a user would
(``make sim-default``, timed: ``sim_default_build_s``; not part of ``make
demo``, which trains its own demo-size model) and scores it on its held-out
seeds (``dreamgym sim eval --json``: every real step of seeds 1000–1009, one
step teacher-forced); with ``--skip-default`` its figures come from
``benchmarks/results/sim_build.json`` instead (its build of the recipe
``DEFAULT_TRAINING`` names), named as such. Prints one JSON line with
``setup_s``, ``demo_s`` and ``total_s`` (the fresh-clone ``make demo``,
against the 15-minute target as the ratio), the demo's own phase times, its
held-out success before and after, its simulator's held-out figures, and the
default model's build time, digest, ``reward_accuracy`` and
``termination_accuracy``. With ``--commit-results`` the same goes to
``benchmarks/results/first_run.json`` with the date, the commit and the
command.

``--refresh-default`` runs nothing: when the offline default's recipe
changes (and ``sim_build.py`` has built it), it rewrites only the
``sim_default_*`` figures of the committed ``first_run.json`` from
``sim_build.json``, as ``--skip-default`` takes them, and records when, at
which commit and by which command under ``sim_default_refreshed``; the
demo's figures keep their own run's date and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _report as report

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 15 * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=None, help="clone into DIR and keep it (default: a temporary one)")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/first_run.json")
    parser.add_argument(
        "--skip-default", action="store_true", help="take the offline default's figures from sim_build.json"
    )
    parser.add_argument(
        "--refresh-default", action="store_true", help="only rewrite first_run.json's default from sim_build.json"
    )
    args = parser.parse_args()
    run = report.provenance()  # first: the commit the run started from
    if args.refresh_default:
        return _refresh_default(run)
    base = args.keep or Path(tempfile.mkdtemp(prefix="dreamgym-first-run-"))
    base.mkdir(parents=True, exist_ok=True)
    shared = ROOT.parent / "shared"
    if shared.exists() and not (base / "shared").exists():
        (base / "shared").symlink_to(shared)
    clone = base / "main"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "DREAMGYM_CACHE": str(base / "cache")}
    env.pop("VIRTUAL_ENV", None)
    setup_s = _timed(["make", "setup-demo"], clone, env)
    demo_s = _timed([str(clone / ".venv" / "bin" / "dreamgym"), "demo"], clone, env)
    demo = json.loads((clone / ".cache" / "demo" / "report.json").read_text())
    total_s = setup_s + demo_s
    default = _measured_default() if args.skip_default else _offline_default(clone, env)
    row: dict[str, Any] = {
        "setup_s": round(setup_s, 1),
        "demo_s": round(demo_s, 1),
        "total_s": round(total_s, 1),
        "demo_phases_s": {name: round(seconds, 1) for name, seconds in demo["phases_s"].items()},
        "before": _success(demo["before"]),
        "after": _success(demo["after"]),
        "verdict": demo["verdict"],
        "paired": demo.get("paired"),  # the same held-out seeds, pair by pair (reports since 2026-12-04)
        "experience_model": demo["models"]["experience_model"],
        "experience_model_kind": demo["models"]["experience_model_kind"],
        "reward_accuracy": round(demo["simulator_held_out"]["reward_accuracy"], 4),
        "termination_accuracy": round(demo["simulator_held_out"]["done_accuracy"], 4),
        "always_0_reward_accuracy": round(demo["simulator_held_out"]["zero_reward_accuracy"], 4),
        "held_out_steps": demo["simulator_held_out"]["n"],
        "demo_report": _demo_details(demo),
        **default,
        "cores": os.cpu_count(),
    }
    report.emit("first_run_total", total_s, "s", "the 15-minute target", TARGET_S, digits=1, **row)
    if args.commit_results:
        result = {
            **run,
            "target_s": TARGET_S,
            **row,
        }
        (ROOT / "benchmarks" / "results" / "first_run.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _demo_details(demo: dict[str, Any]) -> dict[str, Any]:
    """What the README says of the run beyond the headline: per task before and after, the warm start, the
    training (groups by side, those the trust gate played real), the learning curve, the shadowed rollout
    steps and the held-out fidelity table, as the demo's ``report.json`` has them."""
    return {
        "tasks": {
            side: {task["task_id"]: [task["successes"], task["episodes"]] for task in demo[side]["tasks"]}
            for side in ("before", "after")
        },
        "warm_start": demo["warm_start"],
        "training": demo["training"],
        "learning_curve": demo["learning_curve"],
        "rollouts": demo["rollouts"],
        "shadow": demo["shadow"],
        "simulator_held_out_fidelity": demo["simulator_held_out_fidelity"],
    }


def _offline_default(clone: Path, env: dict[str, str]) -> dict[str, Any]:
    """``make sim-default`` timed in the clone, then the model's one-step figures on its held-out seeds."""
    build_s = _timed(["make", "sim-default"], clone, env)
    eval_s = time.perf_counter()
    printed = subprocess.run(
        [str(clone / ".venv" / "bin" / "dreamgym"), "sim", "eval", "--model", "default", "--json"],
        cwd=clone, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    eval_s = time.perf_counter() - eval_s
    rows = {row["name"]: row for row in map(json.loads, printed.splitlines()) if row.get("name")}
    model = rows["model"]
    meta = json.loads((Path(env["DREAMGYM_CACHE"]) / "sim-miniwob" / "dreamgym_model.json").read_text())
    return {
        "sim_default_build_s": round(build_s, 1),
        "sim_default_template": meta.get("template_id"),
        "sim_default_digest": _digest(Path(env["DREAMGYM_CACHE"]) / "sim-miniwob"),
        "sim_default_eval_s": round(eval_s, 1),
        "sim_default_held_out_steps": model["n"],
        "sim_default_reward_accuracy": model["reward_accuracy"],
        "sim_default_termination_accuracy": model["done_accuracy"],
        "sim_default_baselines": {
            name: {"reward_accuracy": row["reward_accuracy"], "termination_accuracy": row["done_accuracy"]}
            for name, row in rows.items()
            if name != "model"
        },
    }


def _measured_default() -> dict[str, Any]:
    """Without building it here: the offline default's build time and held-out figures as
    ``benchmarks/sim_build.py`` measured them (the build it names the default's recipe), named as such."""
    from sim_build import default_build

    measured = json.loads((ROOT / "benchmarks" / "results" / "sim_build.json").read_text())
    default = default_build(measured["builds"])  # the build of DEFAULT_TRAINING as this commit has it
    if default is None:
        raise SystemExit("sim_build.json holds no build of the offline default's recipe: run benchmarks/sim_build.py")
    build, fidelity = measured["builds"][default], measured["fidelity"]["all"]
    return {
        "sim_default_from": f"benchmarks/results/sim_build.json ({measured['date']}, commit {measured['commit'][:7]}, "
        f"its {default!r} build)",
        "sim_default_build_s": build["build_s"],
        "sim_default_digest": build["digest"],
        "sim_default_held_out_steps": fidelity[default]["n"],
        "sim_default_reward_accuracy": fidelity[default]["reward_accuracy"],
        "sim_default_termination_accuracy": fidelity[default]["done_accuracy"],
        "sim_default_baselines": {
            name: {"reward_accuracy": row["reward_accuracy"], "termination_accuracy": row["done_accuracy"]}
            for name, row in fidelity.items()
            if name in ("copy_top_retrieved", "unchanged")
        },
    }


def _refresh_default(run: dict[str, str]) -> int:
    """Rewrite the committed first run's offline-default figures from ``sim_build.json`` (nothing is run)."""
    results = ROOT / "benchmarks" / "results" / "first_run.json"
    recorded = json.loads(results.read_text())
    kept = {key: value for key, value in recorded.items() if not key.startswith("sim_default")}
    refreshed = run
    default = _measured_default()
    results.write_text(json.dumps({**kept, **default, "sim_default_refreshed": refreshed}, indent=1) + "\n")
    print(json.dumps(default))
    return 0


def _digest(model_dir: Path) -> str:
    from dreamgym.simulator import weights_digest

    return weights_digest(model_dir)


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
