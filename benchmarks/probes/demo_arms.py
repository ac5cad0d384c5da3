"""The demo's training phase again from one kept warm start, once per arm (other settings), each evaluated after.

    python benchmarks/probes/demo_arms.py --from .cache/demo --arm seed=0 --arm seed=0,step_cost=0.05 [--commit-results]

A demo draw varies in its seed set, so in its tiny policy's tokenizer, its
warm start and its "before" figure: two settings compared over separate
``dreamgym demo`` runs differ mostly by draw. Each arm here starts from the
same kept demo instead (``--from``: the ``out`` of a finished ``dreamgym demo``,
which keeps its ``policy`` (the warm start, before any RL), its
``experience-model`` and its ``store``): it copies them under ``--out``, runs
the demo's train phase (phase 6) with the kept run's settings changed as the
arm says (any ``DemoSettings`` field: ``seed=1``, ``step_cost=0.05``,
``learning_rate=2e-4``, ``train_seeds=100-139``), then its evaluation after
(phase 7) on the same held-out seeds. An arm that changes the warm start
(``warm_epochs``, ``demonstration_seeds``, ``policy_model``) builds its own instead: the demo's
policy phase (phase 3: the tiny policy from scratch, its tokenizer learnt
from the demonstrator's pages, cloned for the arm's ``warm_epochs``) and its
own evaluation before (phase 4), so its "before" is its own. Each arm
prints one JSON line: held-out successes after with n and a 95% interval,
per task, beside the "before" it started from (the kept demo's
``report.json``, or its own), and the share of the arm's real training
episodes won in each update (sampled at the training temperature: what GRPO
optimises, where the evaluation is greedy). An arm takes about as long as
the demo's train and evaluate-after phases (6-9 min on 2 cores).

The copied store holds the kept run's rollouts and training episodes too
(the demo writes them there): an arm's simulator may retrieve them, so an arm
that plays synthetic groups sees a larger store than the demo did.
``--commit-results`` writes ``benchmarks/results/NAME.json`` (``--name``,
``demo_arms`` by default) with the date, the commit and the command.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
KEPT = ("policy", "experience-model", "store")
"""What an arm copies from the kept demo: its warm-started policy, its experience model and its store."""
KEPT_IF_THERE = ("demonstrations",)
"""Copied too where the kept demo has them: its extra demonstrations (``anchor_weight`` reads them)."""
WARM_START = frozenset({"warm_epochs", "demonstration_seeds", "policy_model"})
"""Settings the policy phase reads: an arm that changes one builds its own warm start and measures its own before."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--arm", action="append", required=True, help="FIELD=VALUE[,FIELD=VALUE...] of DemoSettings")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "demo_arms")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="demo_arms", help="the results file's name, without .json")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    results: dict[str, Any] = report.provenance()
    written = RESULTS / f"{args.name}.json"
    kept = json.loads((args.kept / "report.json").read_text())
    missing = [name for name in KEPT if not (args.kept / name).exists()]
    if missing:
        parser.error(f"{args.kept} lacks {missing}: give the out directory of a finished `dreamgym demo`")
    before = kept["before"]
    results |= {"kept": str(args.kept), "kept_policy": kept["models"]["policy"], "before": _figures(before)}
    arms = []
    for text in args.arm:
        row = run_arm(args.kept, args.out, kept["settings"], changes(text))
        start = row.get("before", results["before"])
        report.emit(f"held-out success after ({text})", row["success_rate"], "fraction", "the arm's before",
                    start["success_rate"], arm=text, after=row)  # fmt: skip
        arms.append({"arm": text, **row})
        if args.commit_results:
            written.write_text(json.dumps({**results, "arms": arms}, indent=1) + "\n")
    if args.commit_results:
        print(f"wrote {written}", file=sys.stderr)
    return 0


def changes(text: str) -> dict[str, str]:
    """``"seed=1,step_cost=0.05"`` -> ``{"seed": "1", "step_cost": "0.05"}``. A comma ends a value: give seeds as
    one range (``train_seeds=100-139``)."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"an arm is FIELD=VALUE[,FIELD=VALUE...], not {text!r}")
    return {name.strip(): value.strip() for name, value in pairs}


def settings_for(recorded: dict[str, Any], out: Path, changed: dict[str, str]) -> Any:
    """The kept run's :class:`DemoSettings` (from its ``report.json``) with the arm's changes and ``out``, each value
    read as ``--config`` files and flags are (``dreamgym.cli._config.build_config``: lists to tuples, text to the
    field's type, an unknown field refused)."""
    from dreamgym.cli._config import build_config
    from dreamgym.jobs.demo import DemoSettings

    return build_config(DemoSettings, recorded, changed, {"out": out}, where="arm")


def run_arm(kept: Path, root: Path, recorded: dict[str, Any], changed: dict[str, str]) -> dict[str, Any]:
    """Copy the kept demo's policy, experience model and store, train with the arm's settings, evaluate after."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dreamgym.jobs import demo
    from dreamgym.jobs._demo_policy import PolicyWeights, prepare_policy, train_policy
    from dreamgym.jobs.demo import policy_model_dir
    from dreamgym.simulator import weights_digest

    out = root / "-".join(f"{name}={value}" for name, value in changed.items()).replace("/", "_")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name in (*KEPT, *KEPT_IF_THERE):
        if (kept / name).exists():
            shutil.copytree(kept / name, out / name)
    settings = settings_for(recorded, out, changed)
    own: dict[str, Any] = {}
    if WARM_START & changed.keys():
        began = time.perf_counter()
        weights, warm = prepare_policy(settings, policy_model_dir(settings))
        own["warm_start"] = warm | {"seconds": round(time.perf_counter() - began, 1)}
        own["before"] = _figures(anyio.run(demo._evaluate, settings, weights, "before").as_dict())
    else:
        policy_dir = out / "policy"
        weights = PolicyWeights(
            directory=policy_dir,
            model=AutoModelForCausalLM.from_pretrained(str(policy_dir)),
            tokenizer=AutoTokenizer.from_pretrained(str(policy_dir)),
            digest=weights_digest(policy_dir),
        )
    copied_until = anyio.run(_last_start, settings.store_dir)
    began = time.perf_counter()
    trained = train_policy(settings, weights, sim_dir=out / "experience-model")
    train_s = time.perf_counter() - began
    if trained is None:
        raise SystemExit("the arm trains nothing (train_updates=0)")
    after = anyio.run(demo._evaluate, settings, trained.policy, "after")
    per_update = anyio.run(_won_per_update, settings.store_dir, copied_until)
    return {
        **_figures(after.as_dict()),
        **own,
        "train_s": round(train_s, 1),
        "training": {key: value for key, value in trained.metrics.items() if not key.endswith("seconds")},
        "sampled_win_share_per_update": per_update,
    }


def _figures(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "successes": result["successes"],
        "episodes": result["episodes"],
        "success_rate": result["success_rate"],
        "success_ci95": [round(x, 4) for x in result["success_ci95"]],
        "tasks": {task["task_id"].split("/")[-1]: task["successes"] for task in result["tasks"]},
    }


async def _last_start(path: Path) -> float:
    """When the copied store's latest episode started: the arm's own episodes start after it."""
    from dreamgym.core import Episode, decode_record
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        return max((decode_record(data, Episode).started_at for _, data in store.iter_records("episodes")), default=0)


async def _won_per_update(path: Path, after: float) -> list[float | None]:
    """Per update, the share of the arm's real training episodes that won (``None`` where it played none)."""
    from dreamgym.core import Episode, decode_record
    from dreamgym.jobs._demo_figures import _TRAIN_GROUP as TRAIN_GROUP
    from dreamgym.replay import LmdbReplayStore

    won: dict[int, list[bool]] = {}
    async with LmdbReplayStore(path, readonly=True) as store:
        for _, data in store.iter_records("episodes"):
            episode = decode_record(data, Episode)
            found = TRAIN_GROUP.match(episode.group_id)
            if found and episode.source == "real" and episode.started_at > after:
                won.setdefault(int(found.group(1)) + 1, []).append(episode.success)
    last = max(won, default=0)
    return [round(sum(won[u]) / len(won[u]), 3) if won.get(u) else None for u in range(1, last + 1)]


if __name__ == "__main__":
    sys.exit(main())
