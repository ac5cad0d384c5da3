"""Is the trust gate's in-run reading right? The shadowed deciding steps of a finished demo, predicted again offline.

    python benchmarks/probes/shadow_reconcile.py --from .cache/demo [--held-out] [--commit-results]

The gate reads, per task, whether the model in use got the outcome of each
shadowed deciding real step right (``dreamgym.core.outcomes``). This probe reads
those answers back from the demo's store, per model (the phase-2 model, each
refit), and predicts the same real steps again offline with the same model,
the same history and the same retrieval exclusions (the step's own (task,
seed) and the held-out pairs): where the two disagree, the in-run reading is
wrong. With ``--held-out`` it also scores each model teacher-forced on the
demo's held-out evaluation steps, as ``benchmarks/demo_sim_arms.py`` scores an
offline refit: the figure the two readings were compared with.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--held-out", action="store_true", help="also score each model on the held-out steps")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="shadow_reconcile", help="the results file's name, without .json")
    args = parser.parse_args()
    results: dict[str, Any] = report.provenance() | {"kept": str(args.kept)}
    rows = []
    for model_id, model_dir, counts in anyio.run(_reconcile, args.kept, args.held_out):
        for task in sorted({task for task, _ in counts}):
            got = {key: n for (name, key), n in counts.items() if name == task}
            rows.append(report.emit(
                f"shadowed deciding steps right in the run ({model_dir.name}, {task})",
                _share(got, "in-run"), "fraction", "the same steps predicted again offline", _share(got, "offline"),
                model=model_id, task=task, **{key.replace(" ", "_"): n for key, n in sorted(got.items())},
            ))  # fmt: skip
    if args.commit_results:
        (RESULTS / f"{args.name}.json").write_text(json.dumps({**results, "rows": rows}, indent=1) + "\n")
    return 0


def _share(got: dict[str, int], prefix: str) -> float:
    return got.get(f"{prefix} right", 0) / max(got.get(f"{prefix} deciding", 0), 1)


async def _reconcile(kept: Path, held_out: bool) -> list[tuple[str, Path, Counter[tuple[str, str]]]]:
    from dreamgym.core.types import Step, decode_record
    from dreamgym.jobs._demo_settings import DemoSettings, held_out_pairs
    from dreamgym.replay import LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model

    settings = DemoSettings(out=kept)
    held = tuple(held_out_pairs(settings))
    refits = sorted((kept / "train" / "sim-refits").glob("refit-*"), key=lambda p: int(p.name.split("-")[1]))
    out = []
    async with LmdbReplayStore(settings.store_dir, config=StoreConfig(auto_index=False), readonly=True) as store:
        steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
        real = {(s.episode_id, s.step_index): s for s in steps if s.source == "real"}
        shadows = [s for s in steps if s.episode_id.endswith("/shadow")]
        for model_dir in [kept / "experience-model", *refits]:
            model = load_experience_model(model_dir, judge=(model_dir / "outcome_judge.json").exists())
            mine = [s for s in shadows if s.experience_model_id == model.model_id]
            counts: Counter[tuple[str, str]] = Counter()
            env = SimulatedEnv(model, store=store, config=SimulatorConfig(
                neighbours=model.config.template.neighbours, exclude_task_seeds=held))  # fmt: skip
            limiter = anyio.CapacityLimiter(8)
            async with anyio.create_task_group() as group:
                for shadow in mine:
                    group.start_soon(_again, env, real, shadow, counts, limiter)
            if held_out:
                await _held_out(settings, store, model, counts)
            out.append((model.model_id, model_dir, counts))
    return out


async def _again(env: Any, real: dict[tuple[str, int], Any], shadow: Any, counts: Counter[tuple[str, str]],
                 limiter: anyio.CapacityLimiter) -> None:  # fmt: skip
    """Count one shadow answer as the run read it, and the same real step predicted again now."""
    from dreamgym.core.outcomes import deciding, shadow_right
    from dreamgym.core.types import Task

    step = real.get((shadow.episode_id.removesuffix("/shadow"), shadow.step_index))
    if step is None:
        return
    name = step.task_id.split("/")[-1]
    if deciding(step, shadow.reward, shadow.terminated):
        counts[(name, "in-run deciding")] += 1
        counts[(name, "in-run right")] += shadow_right(step, shadow.reward, shadow.terminated)
    history = [(real[(step.episode_id, i)].observation, real[(step.episode_id, i)].action)
               for i in range(step.step_index)]  # fmt: skip
    task = Task(task_id=step.task_id, instruction=step.observation.goal, site=step.site)
    async with limiter:
        result = await env.predict_step(task, history, step.observation, step.action, seed=step.seed,
                                        exclude_task_seeds=((step.task_id, step.seed),))  # fmt: skip
    if deciding(step, result.reward, result.terminated):
        counts[(name, "offline deciding")] += 1
        counts[(name, "offline right")] += shadow_right(step, result.reward, result.terminated)


async def _held_out(settings: Any, store: Any, model: Any, counts: Counter[tuple[str, str]]) -> None:
    from dreamgym.core.outcomes import count_deciding
    from dreamgym.jobs._demo_settings import held_out_pairs, held_out_steps
    from dreamgym.simulator import predict_steps, teacher_forced_queries

    steps = await held_out_steps(settings)
    queries = await teacher_forced_queries(steps, store=store, neighbours=model.config.template.neighbours,
                                           exclude_task_seeds=held_out_pairs(settings))  # fmt: skip
    made = await predict_steps(model, queries)
    answers = [(p.reward, p.terminated) if p is not None else None for p in made.predictions]
    for task_id, (n, right) in count_deciding(zip([s for s, _ in queries], answers, strict=True)).items():
        name = task_id.split("/")[-1]
        counts[(name, "held-out deciding")] += n
        counts[(name, "held-out right")] += right


if __name__ == "__main__":
    raise SystemExit(main())
