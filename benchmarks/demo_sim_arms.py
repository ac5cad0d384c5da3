"""The demo's experience model trained again from one kept seed set, once per arm, each scored where the gate looks.

    python benchmarks/demo_sim_arms.py --from .cache/demo --arm outcome_weight=1 --arm outcome_weight=30 \\
        [--arm outcome_weight=30,seed=1] [--commit-results]

``dreamgym demo`` plays a task's training groups on its simulator only once
the simulator's shadow answers on that task's *deciding* real steps (the
real episode ended, or either side paid a reward, or the simulator said it
ended: ``dreamgym.runtime.deciding``) are right 0.9 of the time (the trust
gate, ``TrainConfig.sim_trust``). Reward accuracy over all steps hides them:
most steps pay 0 on both sides, so always-0 scores about as well as the
model. This benchmark measures the figure the gate compares, on steps the
model never trained on: each arm trains the demo-size experience model
(``dreamgym.jobs._demo_settings.demo_sim_training`` with the arm's changes:
any ``SimTrainConfig`` field, ``scratch.FIELD`` for the model's shape) on the
kept demo's store (``--from``: the ``out`` of a finished ``dreamgym demo``),
the held-out (task, seed) pairs left out as the demo leaves them, then
predicts every held-out real step of the kept demo's evaluation store (both
evaluations, before and after: the states the policy visits), teacher-forced,
with retrieval kept off every held-out (task, seed), the simulator's rules
applied.

Each arm prints one JSON line: its training seconds, its reward accuracy over
all the steps beside always-0's, and its deciding steps, right and accuracy,
overall and per task, as a ratio against the first arm's (measured in the same
run). The kept store holds the demo's own rollouts and training episodes
beside the seed set: an arm trains on all of its real steps (a demo run with
``--train-updates 0`` keeps the difference to its few rollout episodes).
``--commit-results`` writes ``benchmarks/results/NAME.json`` (``--name``,
``demo_sim_arms`` by default) with the date, the commit and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--arm", action="append", required=True, help="FIELD=VALUE[,FIELD=VALUE...] of SimTrainConfig")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "demo_sim_arms")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="demo_sim_arms", help="the results file's name, without .json")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from dreamgym.jobs._demo_settings import DemoSettings

    results: dict[str, Any] = report.provenance()
    settings = DemoSettings(out=args.kept)
    missing = [p for p in (settings.store_dir, settings.eval_store_dir) if not p.is_dir()]
    if missing:
        parser.error(f"{args.kept} lacks {[p.name for p in missing]}: give the out directory of a finished demo")
    results |= {"kept": str(args.kept)}
    arms: list[dict[str, Any]] = []
    for text in args.arm:
        row = run_arm(settings, args.out, text)
        first = arms[0] if arms else row
        report.emit(f"deciding-step accuracy on held-out real steps ({text})", row["deciding"]["accuracy"],
                    "fraction", f"the first arm ({args.arm[0]})", first["deciding"]["accuracy"],
                    arm=text, result=row)  # fmt: skip
        arms.append({"arm": text, **row})
        if args.commit_results:
            (RESULTS / f"{args.name}.json").write_text(json.dumps({**results, "arms": arms}, indent=1) + "\n")
    if args.commit_results:
        print(f"wrote {RESULTS / f'{args.name}.json'}", file=sys.stderr)
    return 0


def sim_config(settings: Any, text: str) -> Any:
    """The demo's ``SimTrainConfig`` with the arm's changes (``outcome_weight=30,scratch.layers=3``); each value is
    read as Python (numbers, ``True``)."""
    from dreamgym.jobs._demo_settings import demo_sim_training

    config = demo_sim_training(settings)
    changes: dict[str, Any] = {}
    shape: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if not value:
            raise SystemExit(f"an arm is FIELD=VALUE[,FIELD=VALUE...], not {text!r}")
        parsed = json.loads(value.strip().lower() if value.strip() in ("True", "False") else value.strip())
        if name.startswith("scratch."):
            shape[name.removeprefix("scratch.")] = parsed
        else:
            changes[name.strip()] = parsed
    if shape:
        changes["scratch"] = dataclasses.replace(config.scratch, **shape)
    return dataclasses.replace(config, **changes)


def run_arm(settings: Any, root: Path, text: str) -> dict[str, Any]:
    config = sim_config(settings, text)
    target = root / text.replace("/", "_").replace(",", "-")
    shutil.rmtree(target, ignore_errors=True)
    began = time.perf_counter()
    anyio.run(_train, settings, config, target, text)
    train_s = time.perf_counter() - began
    scored = anyio.run(_score, settings, target)
    return {"config": dataclasses.asdict(config), "train_s": round(train_s, 1), **scored}


async def _train(settings: Any, config: Any, target: Path, text: str) -> None:
    from dreamgym.jobs._demo_settings import held_out_pairs
    from dreamgym.jobs.sim_default import train_on_store
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        await train_on_store(
            store, target, config, held_out=held_out_pairs(settings), recipe={"benchmark": "demo_sim_arms", "arm": text}
        )


async def _score(settings: Any, model_dir: Path) -> dict[str, Any]:
    """The model's teacher-forced answers on the kept evaluation store's real steps, scored overall and on the
    deciding steps, per task."""
    from dreamgym.jobs._demo_settings import held_out_pairs, held_out_steps
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries

    steps = await held_out_steps(settings)
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        model = load_experience_model(model_dir, store=store)
        queries = await teacher_forced_queries(
            steps, store=store, neighbours=model.config.template.neighbours, exclude_task_seeds=held_out_pairs(settings)
        )
        made = await predict_steps(model, queries)
    answers = [(p.reward, p.terminated) if p is not None else None for p in made.predictions]
    return score_answers([step for step, _ in queries], answers)


def score_answers(steps: Sequence[Any], answers: Sequence[tuple[float, bool] | None]) -> dict[str, Any]:
    """Reward accuracy over all ``steps`` (beside always-0) and the gate's figure: the share of deciding steps whose
    outcome was right (``dreamgym.core.outcomes``), overall and per task. No answer counts as wrong, and as reward 0
    without an end when deciding which steps decide."""
    from dreamgym.core.outcomes import count_deciding

    pairs = list(zip(steps, answers, strict=True))
    decided = count_deciding(pairs)
    tasks: dict[str, dict[str, Any]] = {}
    for task_id, count in Counter(step.task_id for step in steps).items():
        n, right = decided.get(task_id, (0, 0))
        accuracy = round(right / n, 4) if n else None
        tasks[task_id.split("/")[-1]] = {"steps": count, "deciding": n, "right": right, "accuracy": accuracy}
    n = len(steps)
    reward_right = sum(answer is not None and abs(answer[0] - step.reward) <= 0.5 for step, answer in pairs)
    zero_right = sum(abs(step.reward) <= 0.5 for step in steps)
    total, right = sum(d for d, _ in decided.values()), sum(r for _, r in decided.values())
    return {
        "steps": n,
        "unusable": sum(answer is None for answer in answers),
        "reward_accuracy": round(reward_right / n, 4) if n else None,
        "always_0_reward_accuracy": round(zero_right / n, 4) if n else None,
        "deciding": {"steps": total, "right": right, "accuracy": round(right / total, 4) if total else 0.0},
        "tasks": tasks,
    }


if __name__ == "__main__":
    sys.exit(main())
