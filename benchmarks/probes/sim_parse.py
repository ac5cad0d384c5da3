"""One experience model's one-step fidelity, its answers read by the parser as it was and as it is, in one run.

    python benchmarks/probes/sim_parse.py --from DIR [--model model-after] [--commit-results]

``DIR`` is a kept ``benchmarks/sim_build.py --out`` directory: its ``held_out``
store (the real steps of the held-out seeds), its ``train`` store (what the
model retrieves from, and where its calls are cached) and the model directory
``--model``. Every held-out real step is predicted one step teacher-forced
(``dreamgym.validate``), twice:

- **before**: the parser as it was (frozen here): a diff's removal or context
  lines that the page lacks are dropped, the additions after them placed
  where the diff's remaining lines put them, and a diff that then breaks the
  page is malformed (retried, then salvaged or failed);
- **after**: the parser as it is: where the diff breaks the page so, the
  additions that replace or follow the dropped lines are dropped with them
  (``dreamgym.simulator._parse``), and the simulator's rules run on the page.

The second pass reads most answers from the call cache the first one filled
(the same calls), so it costs little. Printed: reward and termination
accuracy on all steps, line similarity and element F1 where the real page
changed, the predictions that failed, each against the parser as it was;
the results also hold the two baselines' figures, per-task tables and the
model's call counts. ``--commit-results`` writes
``benchmarks/results/sim_parse.json`` with the date, the commit, the command
and the model's digest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "sim_parse.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a sim_build.py --out directory")
    parser.add_argument("--model", default="model-after", help="the model directory inside it")
    parser.add_argument("--commit-results", action="store_true", help="also write results/sim_parse.json")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from dreamgym.simulator import read_metadata, weights_digest

    model_dir = args.source / args.model
    results: dict[str, Any] = report.provenance()
    results["model"] = {
        "path": str(model_dir),
        "digest": weights_digest(model_dir),
        "config": read_metadata(model_dir).get("config"),
        "template": read_metadata(model_dir).get("template"),
    }
    results["fidelity"] = anyio.run(_fidelity, args.source, model_dir)
    rows = []
    for split in ("all", "page changed"):
        table = results["fidelity"][split]
        metrics = ("reward_accuracy", "done_accuracy", "failures") if split == "all" else ("similarity", "f1")
        for metric in metrics:
            rows.append(report.emit(f"{metric} ({split})", table["after"][metric], "fraction" if metric != "failures"
                                    else "steps", "the parser as it was", table["before"][metric],
                                    n=table["after"]["n"]))  # fmt: skip
    if args.commit_results:
        results["rows"] = rows
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


async def _fidelity(source: Path, model_dir: Path) -> dict[str, Any]:
    from dreamgym.core.types import Step, decode_record
    from dreamgym.jobs.sim_default import held_out_pairs
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model
    from dreamgym.validate import ValidationConfig, validate

    held_out = tuple(held_out_pairs())
    async with LmdbReplayStore(source / "held_out", readonly=True) as real:
        steps = [s for _, data in real.iter_records("steps") if (s := decode_record(data, Step)).source == "real"]
    tables: dict[str, dict[str, Any]] = {"all": {}, "page changed": {}, "by task": {}, "stats": {}}
    async with LmdbReplayStore(source / "train") as store:
        for name in ("before", "after"):
            with _parser(as_it_was=name == "before"):
                model = load_experience_model(model_dir, store=store)
                config = ValidationConfig(neighbours=model.config.template.neighbours, exclude_task_seeds=held_out)
                found = await validate(model, steps, store=store, config=config)
            tables["all"][name] = found.one_step["model"].as_dict()
            tables["page changed"][name] = found.by_change["model"]["page changed"].as_dict()
            tables["by task"][name] = {task: s.as_dict() for task, s in found.by_task["model"].items()}
            tables["stats"][name] = model.stats.as_metrics()
            for baseline in ("copy_top_retrieved", "unchanged"):
                tables["all"][baseline] = found.one_step[baseline].as_dict()
                tables["page changed"][baseline] = found.by_change[baseline]["page changed"].as_dict()
            print(json.dumps({"parser": name, **tables["all"][name], "stats": tables["stats"][name]}), flush=True)
    return tables


class _parser:
    """The parser as it was, within the block: additions after a dropped line are never dropped with it."""

    def __init__(self, *, as_it_was: bool) -> None:
        self.as_it_was = as_it_was

    def __enter__(self) -> None:
        from dreamgym.simulator import _parse

        self.repair = _parse._repair
        if self.as_it_was:
            _parse._repair = lambda page, lines, drop_orphans=False: self.repair(page, lines)  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        from dreamgym.simulator import _parse

        _parse._repair = self.repair


if __name__ == "__main__":
    sys.exit(main())
