"""Kept demos' held-out evaluations before and after training, compared seed by seed as well as by interval.

    python benchmarks/paired_eval.py --from DEMO_DIR [--from DEMO_DIR ...] [--seeds 1020-1059] [--commit-results]

A demo (``dreamgym demo``, or ``first_run.py --keep``) records every
held-out episode of its two evaluations in ``DEMO_DIR/eval-store`` (groups
``before/...`` and ``after/...``, one episode per (task, seed)). For each
kept demo this reads them back and prints, as JSON lines, the success after
training against before (the intervals' verdict), and the pairs solved only
after against those solved only before, with the exact McNemar p of
:func:`dreamgym.trainer.paired_comparison` (what ``report.json`` carries
as ``paired`` in demos run since it existed).

``--seeds`` plays the kept demo's two policies again instead, on those seeds
of the demo's tasks (seeds the demo never collected, rolled out or evaluated:
a second held-out draw), greedily on real pages as the demo's evaluation
does: the warm start (``DEMO_DIR/policy``, before any RL) and the trained
policy (``DEMO_DIR/train/final``), into a scratch store under ``--out``.
Each row also gives the seconds each evaluation took. ``--commit-results``
writes ``benchmarks/results/NAME.json`` (``--name``, ``paired_eval`` by default).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="demos", type=Path, action="append", required=True, help="a kept demo dir")
    parser.add_argument("--seeds", help="play the kept policies again on these seeds (e.g. 1020-1059)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "paired_eval", help="--seeds' stores")
    parser.add_argument("--name", default="paired_eval", help="the results file's name under benchmarks/results")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args()
    results: dict[str, Any] = report.provenance()
    if args.seeds:
        from dreamgym.cli._common import parse_seeds

        seeds = tuple(parse_seeds(args.seeds))
        rows = [_replay(demo, seeds, args.out / str(n)) for n, demo in enumerate(args.demos)]
    else:
        rows = [anyio.run(_compare, demo) for demo in args.demos]
    if args.commit_results:
        path = RESULTS / f"{args.name}.json"
        path.write_text(json.dumps({**results, "demos": rows}, indent=1) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    return 0


async def _compare(demo: Path) -> dict[str, Any]:
    from dreamgym.core import Episode, decode_record
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.trainer import EvalResult, SeedOutcome

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
    return _rows(demo, evaluations["before"], evaluations["after"])


def _replay(demo: Path, seeds: tuple[int, ...], out: Path) -> dict[str, Any]:
    """The kept warm start and trained policy, each evaluated on ``seeds`` as the demo's phases 4 and 7 do."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dreamgym.cli._config import build_config
    from dreamgym.jobs import demo as demo_job
    from dreamgym.jobs._demo_policy import PolicyWeights
    from dreamgym.jobs.demo import DemoSettings
    from dreamgym.simulator import weights_digest

    recorded = json.loads((demo / "report.json").read_text())["settings"]
    played = set(recorded["train_seeds"]) | set(recorded["demonstration_seeds"]) | set(recorded["held_out_seeds"])
    if played & set(seeds):
        raise SystemExit(f"{demo} played seeds {sorted(played & set(seeds))} already: not a held-out draw")
    shutil.rmtree(out, ignore_errors=True)
    settings = build_config(DemoSettings, recorded, {}, {"out": out, "held_out_seeds": seeds}, where="replay")
    evaluations, seconds = {}, {}
    for side, directory in (("before", demo / "policy"), ("after", demo / "train" / "final")):
        weights = PolicyWeights(
            directory=directory,
            model=AutoModelForCausalLM.from_pretrained(str(directory)),
            tokenizer=AutoTokenizer.from_pretrained(str(directory)),
            digest=weights_digest(directory),
        )
        began = time.perf_counter()
        evaluations[side] = anyio.run(demo_job._evaluate, settings, weights, side)
        seconds[side] = round(time.perf_counter() - began, 1)
    return {**_rows(demo, evaluations["before"], evaluations["after"]), "seeds": [min(seeds), max(seeds)],
            "evaluate_s": seconds}  # fmt: skip


def _rows(demo: Path, before: Any, after: Any) -> dict[str, Any]:
    from collections import Counter

    from dreamgym.trainer import paired_comparison, wilson_interval

    paired = paired_comparison(before, after)
    figures: dict[str, Any] = paired.as_dict()
    per_task = {
        side: dict(sorted(Counter(o.task_id for o in result.outcomes if o.solved).items()))
        for side, result in (("before", before), ("after", after))
    }
    row = report.emit(f"held-out success after training ({demo})", after.success_rate, "fraction",
                      "before training", before.success_rate, n=after.episodes,
                      before_ci95=[round(x, 4) for x in wilson_interval(before.successes, before.episodes)],
                      after_ci95=[round(x, 4) for x in wilson_interval(after.successes, after.episodes)],
                      solved_per_task=per_task)  # fmt: skip
    pairs = report.emit(f"pairs solved only after training ({demo})", paired.only_after, "pairs",
                        "pairs solved only before", paired.only_before, **figures)  # fmt: skip
    return {"demo": str(demo), "success": row, "paired": pairs}


if __name__ == "__main__":
    raise SystemExit(main())
