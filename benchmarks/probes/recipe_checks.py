"""Probe: how many builds of an experience-model recipe pass the check before use, and how long does each take?

    python benchmarks/probes/recipe_checks.py --from DEMO_OUT --out DIR --recipe alias+layers-4 --seeds 0-3

Trains each training seed of ``--recipe`` as ``benchmarks/demo_sim_builds.py``
does (on the kept demo's seed set, builds reused from ``--out``) and checks
it as ``dreamgym demo --sim-builds`` does (``benchmarks/demo_sim_check.py``'s
check: the demonstrations asked, the seed set retrieved). Prints one JSON line
per build: its worst task's share of clean first answers, every task's, and
the seconds its fit and its check took. With ``--more-epochs E``, each build
is then trained E epochs more on the same examples, from its own weights, as
``dreamgym demo --sim-more-epochs E`` trains a build that fails its check
(``demo_sim_builds.py``'s continuation), and that checked too (a second line). A quick screen of a recipe before the
open-loop scoring of ``demo_sim_builds.py``; a one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import demo_sim_builds as builds  # noqa: E402
import demo_sim_check as checks  # noqa: E402

from dreamgym.cli._common import parse_seeds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo")
    parser.add_argument("--out", type=Path, required=True, help="where the builds are written (and reused)")
    parser.add_argument("--recipe", type=builds._recipe_name, required=True, help="a recipe of demo_sim_builds.py")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("0-3"), help="training seeds (0-3,7)")
    parser.add_argument("--more-epochs", type=float, default=0.0, help="then train each build this many more")
    args = parser.parse_args()
    for seed in args.seeds:
        started = time.perf_counter()
        target = anyio.run(builds._build, args.kept, args.out, args.recipe, seed)
        _report(args, {"recipe": args.recipe, "seed": seed}, target, started)
        if args.more_epochs > 0:
            started = time.perf_counter()
            more = anyio.run(builds._build, args.kept, args.out, args.recipe, seed, args.more_epochs)
            _report(args, {"recipe": args.recipe, "seed": seed, "more_epochs": args.more_epochs}, more, started)
    return 0


def _report(args: argparse.Namespace, row: dict[str, object], model: Path, started: float) -> None:
    fitted = time.perf_counter()
    result = anyio.run(checks.check, args.kept, args.out, model)
    checked = time.perf_counter()
    row |= {"worst": result.worst, "passed": result.passed,
            "tasks": {task: round(counts["clean"] / max(1, counts["asked"]), 3)
                      for task, counts in result.as_dict()["tasks"].items()},
            "fit_s": round(fitted - started, 1), "check_s": round(checked - fitted, 1)}  # fmt: skip
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
