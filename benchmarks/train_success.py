"""Per task, the training episodes' success (sampled at the training temperature) in windows of updates.

    python benchmarks/train_success.py OUT [--every 10] [--commit-results NAME]

Reads the training store of a ``learning_curve.py`` run (``OUT/grpo/store``)
and its ``OUT/learning_curve.json``; prints one JSON line per task and window
(the figure: success in that window, against the task's first window) and
writes ``OUT/train_success.json`` (with ``--commit-results NAME`` also
``benchmarks/results/NAME.json``), with the date, the commit, the command and
the run it describes. Set beside the held-out curve it says whether the
sampled policy improves where the greedy one does not. Episodes the
infrastructure cut are left out; replayed groups (dynamic sampling) are in.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import learning_curve as lc
from _report import emit

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a learning_curve.py run's --out")
    parser.add_argument("--every", type=int, default=10, help="updates per window")
    parser.add_argument(
        "--commit-results", default=None, metavar="NAME", help="also write benchmarks/results/NAME.json"
    )
    args = parser.parse_args()
    lc._commit()
    run = json.loads((args.out / "learning_curve.json").read_text())
    windows = anyio.run(_windows, args.out / "grpo" / "store", args.every)
    for task, rows in windows.items():
        for row in rows:
            last = row["from_update"] + args.every - 1
            emit("train_success", row["success"], "training episodes' success (sampled)",
                 f"{task} at updates 0-{args.every - 1}", rows[0]["success"], task=task,
                 updates=[row["from_update"], last], episodes=row["episodes"])  # fmt: skip
    result = {
        "date": datetime.date.today().isoformat(),
        "commit": lc._commit(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "run": {key: run[key] for key in ("date", "commit", "command", "tasks", "updates", "start", "end")},
        "every": args.every,
        "tasks": windows,
    }
    text = json.dumps(result, indent=1) + "\n"
    (args.out / "train_success.json").write_text(text)
    if args.commit_results:
        (RESULTS / f"{args.commit_results}.json").write_text(text)
    return 0


async def _windows(path: Path, every: int) -> dict[str, list[dict[str, Any]]]:
    from dreamgym.core.types import Episode, decode_record
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        episodes = [decode_record(raw, Episode) for _, raw in store.iter_records("episodes")]
    counts: dict[str, dict[int, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for episode in episodes:
        found = re.match(r"train/u(\d+)/", episode.group_id or "")
        if found is None or episode.cut_reason:
            continue
        tally = counts[episode.task_id][int(found.group(1)) // every * every]
        tally[0] += int(bool(episode.success))
        tally[1] += 1
    return {
        task: [
            {"from_update": start, "episodes": n, "success": round(won / n, 4)}
            for start, (won, n) in sorted(windows.items())
        ]
        for task, windows in sorted(counts.items())
    }


if __name__ == "__main__":
    raise SystemExit(main())
