"""Kept demos' held-out evaluations before and after training, compared seed by seed as well as by interval.

    python benchmarks/paired_eval.py --from DEMO_DIR [--from DEMO_DIR ...] [--commit-results]

A demo (``dreamgym demo``, or ``first_run.py --keep``) records every
held-out episode of its two evaluations in ``DEMO_DIR/eval-store`` (groups
``before/...`` and ``after/...``, one episode per (task, seed)). For each
kept demo this reads them back and prints, as JSON lines, the success after
training against before (the intervals' verdict), and the pairs solved only
after against those solved only before, with the exact McNemar p of
:func:`dreamgym.trainer.paired_comparison` (what ``report.json`` carries
as ``paired`` in demos run since it existed). ``--commit-results`` writes
``benchmarks/results/paired_eval.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "paired_eval.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="demos", type=Path, action="append", required=True, help="a kept demo dir")
    parser.add_argument("--commit-results", action="store_true", help=f"also write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    results: dict[str, Any] = report.provenance()
    rows = [anyio.run(_compare, demo) for demo in args.demos]
    if args.commit_results:
        RESULTS.write_text(json.dumps({**results, "demos": rows}, indent=1) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


async def _compare(demo: Path) -> dict[str, Any]:
    from dreamgym.core import Episode, decode_record
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.trainer import EvalResult, SeedOutcome, paired_comparison, wilson_interval

    outcomes: dict[str, list[SeedOutcome]] = {"before": [], "after": []}
    async with LmdbReplayStore(demo / "eval-store", readonly=True) as store:
        for _, data in store.iter_records("episodes"):
            episode = decode_record(data, Episode)
            side = episode.group_id.split("/")[0]
            if side in outcomes:
                solved = None if episode.cut_reason else bool(episode.success)
                outcomes[side].append(SeedOutcome(task_id=episode.task_id, seed=episode.seed, solved=solved))
    evaluations = {}
    for side, played in outcomes.items():
        scored = [o.solved for o in played if o.solved is not None]
        evaluations[side] = EvalResult(episodes=len(scored), successes=sum(scored), steps=0, outcomes=tuple(played))
    before, after = evaluations["before"], evaluations["after"]
    paired = paired_comparison(before, after)
    row = report.emit(f"held-out success after training ({demo})", after.success_rate, "fraction",
                      "before training", before.success_rate, n=after.episodes,
                      before_ci95=[round(x, 4) for x in wilson_interval(before.successes, before.episodes)],
                      after_ci95=[round(x, 4) for x in wilson_interval(after.successes, after.episodes)])  # fmt: skip
    pairs = report.emit(f"pairs solved only after training ({demo})", paired.only_after, "pairs",
                        "pairs solved only before", paired.only_before, **paired.as_dict())  # fmt: skip
    return {"demo": str(demo), "success": row, "paired": pairs}


if __name__ == "__main__":
    raise SystemExit(main())
