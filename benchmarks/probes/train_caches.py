"""What the in-process caches save in the demo's training: a few GRPO updates from one kept demo, caches off and on.

    python benchmarks/probes/train_caches.py --from .cache/demo [--updates 6] [--rounds 2] [--commit-results]

Two caches keep what a training rollout asks for again: MiniLM embeds each
distinct text once (``MiniLMEmbedder(cache_size=4096)``: a shadowed step's
retrieval query is the text the store's indexer embeds for that step, and a
group's eight episodes share their first pages), and the ``index`` policy
draws from a prompt's logits once per weights (``LocalPolicyConfig.logits_memo``).
Each run here copies the kept demo's policy (its warm start), experience model
and store (``--from``: the ``out`` of a finished ``dreamgym demo``) and runs
the demo's train phase for ``--updates`` updates with the kept run's settings,
with both caches off (``cache_size=0``, ``logits_memo=0``: the baseline) or
on. The memo returns the logits the model would (``tests/agents/test_policy_sampling.py``),
but two runs do not play the same episodes: two browser contexts interleave
their turns in an order set by the pages' timing, and the policy's sampling
follows that order, so the figure is per real step played (each run's steps,
groups and training losses are recorded beside it). The runs alternate, off
then on, ``--rounds`` times (the second round on then off), so drift in the
machine's speed falls on both.

Prints one JSON line per run (train seconds, rollout seconds, real steps,
texts embedded and reused, policy prompts run and reused) and the figure:
rollout seconds per real step with the caches on, as a ratio against off,
over all rounds. ``--commit-results`` writes ``benchmarks/results/train_caches.json``
with the date, the commit and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import _report as report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
KEPT = ("policy", "experience-model", "store")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--updates", type=int, default=6, help="GRPO updates per run")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs (off and on)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "train_caches")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/train_caches.json")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    missing = [name for name in KEPT if not (args.kept / name).exists()]
    if missing or not (args.kept / "report.json").exists():
        parser.error(f"{args.kept} lacks {missing or ['report.json']}: give the out directory of a finished demo")
    results: dict[str, Any] = report.provenance() | {"kept": str(args.kept), "updates": args.updates}
    recorded = json.loads((args.kept / "report.json").read_text())["settings"]
    runs = []
    for round_ in range(args.rounds):
        for cached in (False, True) if round_ % 2 == 0 else (True, False):
            row = run(args.kept, args.out, recorded, updates=args.updates, cached=cached)
            print(json.dumps({"round": round_, **row}), flush=True)
            runs.append({"round": round_, **row})
    per_step = {
        cached: sum(r["rollout_s"] for r in runs if r["cached"] == cached)
        / max(sum(r["real_steps"] for r in runs if r["cached"] == cached), 1)
        for cached in (False, True)
    }
    figure = report.emit("training rollout seconds per real step, caches on", per_step[True], "s",
                         "caches off (cache_size=0, logits_memo=0)", per_step[False], runs=len(runs))  # fmt: skip
    if args.commit_results:
        (RESULTS / "train_caches.json").write_text(json.dumps({**results, "figure": figure, "runs": runs}, indent=1))
        print(f"wrote {RESULTS / 'train_caches.json'}", file=sys.stderr)
    return 0


def run(kept: Path, root: Path, recorded: dict[str, Any], *, updates: int, cached: bool) -> dict[str, Any]:
    """One train phase from a copy of the kept demo, the caches on or off."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dreamgym.cli._config import build_config
    from dreamgym.jobs._demo_policy import PolicyWeights, train_policy
    from dreamgym.jobs.demo import DemoSettings
    from dreamgym.replay import MiniLMEmbedder
    from dreamgym.simulator import weights_digest

    out = root / ("on" if cached else "off")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name in KEPT:
        shutil.copytree(kept / name, out / name)
    embedder = MiniLMEmbedder() if cached else MiniLMEmbedder(cache_size=0)
    settings = build_config(DemoSettings, recorded, {}, {"out": out, "train_updates": updates}, where="run")
    settings = dataclasses.replace(settings, embedder=embedder)
    weights = PolicyWeights(
        directory=out / "policy",
        model=AutoModelForCausalLM.from_pretrained(str(out / "policy")),
        tokenizer=AutoTokenizer.from_pretrained(str(out / "policy")),
        digest=weights_digest(out / "policy"),
        logits_memo=256 if cached else 0,
    )
    began = time.perf_counter()
    trained = train_policy(settings, weights, sim_dir=out / "experience-model")
    seconds = time.perf_counter() - began
    if trained is None:
        raise SystemExit("--updates must be at least 1")
    metrics = trained.metrics
    losses = [
        round(json.loads(line)["train/loss"], 6)
        for line in (out / "train" / "metrics.jsonl").read_text().splitlines()
        if "train/loss" in line
    ]
    return {
        "cached": cached,
        "train_s": round(seconds, 1),
        "rollout_s": round(metrics["train/rollout_seconds"], 1),
        "real_steps": int(metrics["train/real_steps"]),
        "real_groups": int(metrics["train/real_groups"]),
        "texts_embedded": embedder.computed_texts,
        "texts_reused": embedder.cached_texts,
        "policy_prompts_run": metrics.get("train/policy_prompts_run"),  # None without a memo
        "policy_prompts_reused": metrics.get("train/policy_prompts_reused"),
        "losses": losses,
    }


if __name__ == "__main__":
    sys.exit(main())
