"""Probe: does the experience model's first answer write the element the action names? Teacher-forced, per task.

    python benchmarks/probes/acted_element.py --from DEMO_OUT --episodes DIR --task click-checkboxes MODEL [MODEL ...]

Replays the validation episodes that ``benchmarks/open_loop_outcomes.py``
collected under ``--episodes`` (its seeds, its policies) for one task,
teacher-forced (each step asked on the real page before it, with the real
history), every second episode of each source, at most ``--steps`` steps,
through each MODEL with its judge and the copy guard, and counts the greedy
first answers by the element id of their diff's first ``-``/``+`` line: the
action's own (or ``[e0]``, the alias of a model trained with
``TemplateConfig.target_alias``), another element, or none (an empty diff);
each also split by whether the guard steered the answer. Then the model's
answer counters. The answers are read as the model wrote them, before the
rules (which write a checked box's page whatever the answer says). A one-off
probe: no results file.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
_FIRST_ID = re.compile(r"^[-+] \[([^\]\s]+)\]", re.MULTILINE)


async def probe(kept: Path, episodes_dir: Path, seeds: list[int], task: str, model_dir: Path, limit: int) -> None:
    import open_loop_outcomes as olo

    from dreamgym.core.types import Task
    from dreamgym.jobs._demo_settings import held_out_pairs
    from dreamgym.replay import LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model

    by_source = await olo._collect(kept, episodes_dir, seeds, olo._demo_policies(kept), 0.5)
    settings = olo._settings(kept)
    counts: collections.Counter[str] = collections.Counter()
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        model = load_experience_model(model_dir, judge=True)
        answers: list[str] = []
        ask = model._call

        async def call(messages: Any, sampling: Any) -> Any:
            completion = await ask(messages, sampling)
            answers.append(completion.text)
            return completion

        model._call = call  # type: ignore[method-assign]
        config = SimulatorConfig(
            neighbours=model.config.template.neighbours, exclude_task_seeds=held_out_pairs(settings)
        )
        env = SimulatedEnv(model, store=store, config=config)
        asked = 0
        for episodes in by_source.values():
            for episode in episodes[::2]:
                first = episode[0]
                if first.task_id.split("/")[-1] != task:
                    continue
                goal = first.observation.goal or first.task_id
                job = Task(task_id=first.task_id, instruction=goal, site=first.site)
                for n, real in enumerate(episode):
                    if asked >= limit:
                        break
                    asked += 1
                    steered = model.stats.steered_answers
                    history = [(step.observation, step.action) for step in episode[:n]]
                    await env.predict_step(job, history, real.observation, real.action, seed=real.seed)
                    found = _FIRST_ID.search(answers[-1].split("</diff>")[0])
                    named = real.action.args[:1]
                    kind = "none" if found is None else "own" if found.group(1) in (*named, "e0") else "other"
                    counts[kind + (" steered" if model.stats.steered_answers > steered else "")] += 1
    print(f"{model_dir}: {task}, {asked} steps teacher-forced; first diff line on the action's element:",
          dict(sorted(counts.items())), model.stats, flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo (its store)")
    parser.add_argument("--episodes", type=Path, required=True, help="open_loop_outcomes.py's --episodes")
    parser.add_argument("--seeds", default="2000-2029", help="its validation seeds")
    parser.add_argument("--task", default="click-checkboxes", help="a demo task")
    parser.add_argument("--steps", type=int, default=150, help="most steps asked per model")
    parser.add_argument("models", nargs="+", type=Path, help="experience models")
    args = parser.parse_args()
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    for model_dir in args.models:
        anyio.run(probe, args.kept, args.episodes, seeds, args.task, model_dir, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
