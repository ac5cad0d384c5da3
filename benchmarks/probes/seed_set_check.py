"""Probe: does a check on the seed set's own steps tell a good build of the experience model from a poor one?

    python benchmarks/probes/seed_set_check.py --from DEMO_OUT --task click-checkboxes MODEL [MODEL ...]

Builds of one recipe that differ only in their training seed differ in how
often their greedy first answer applies unsteered, as much as any recipe
change measured (``benchmarks/demo_sim_builds.py``). A demo could train two
and keep one, if something it already has ranks them: the seed set it trained
on. This asks each MODEL, teacher-forced (the real page before each step, the
real history), the steps of every third seed-set episode of ``--task`` (the
scripted demonstrators' and random explorers' real episodes in the demo's
store), at most ``--steps``, with its judge and the copy guard. Retrieval
leaves out the held-out pairs and the step's own (task, seed), so no answer is
shown its own transition. It prints each model's answer counters (clean first
answers, steered, malformed, pages a rule wrote). Compare them with the same
models' counters on validation episodes (``benchmarks/probes/acted_element.py``).
A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


async def probe(kept: Path, task: str, models: list[Path], limit: int) -> None:
    import open_loop_outcomes as olo
    from demo_sim_builds import SCRIPTED  # the policies of a demo's seed set

    from dreamgym.core.types import Task
    from dreamgym.jobs._demo_settings import held_out_pairs
    from dreamgym.replay import LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model, real_episodes

    settings = olo._settings(kept)
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        episodes = [
            episode
            for episode in await real_episodes(store)
            if episode[0].policy_id in SCRIPTED and episode[0].task_id.split("/")[-1] == task
        ]
        for model_dir in models:
            model = load_experience_model(model_dir, judge=True)
            config = SimulatorConfig(
                neighbours=model.config.template.neighbours, exclude_task_seeds=held_out_pairs(settings)
            )
            env = SimulatedEnv(model, store=store, config=config)
            asked = 0
            for episode in episodes[::3]:
                first = episode[0]
                job = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
                for n, real in enumerate(episode[: limit - asked]):
                    history = [(step.observation, step.action) for step in episode[:n]]
                    own = ((first.task_id, first.seed),)
                    await env.predict_step(job, history, real.observation, real.action, seed=real.seed,
                                           exclude_task_seeds=own)  # fmt: skip
                    asked += 1
            print(f"{model_dir}: {task}, {asked} seed-set steps of {len(episodes)} episodes, teacher-forced:",
                  model.stats, flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, required=True, help="a finished demo (its store)")
    parser.add_argument("--task", default="click-checkboxes", help="a demo task")
    parser.add_argument("--steps", type=int, default=80, help="most steps asked per model")
    parser.add_argument("models", nargs="+", type=Path, help="experience models")
    args = parser.parse_args()
    anyio.run(probe, args.kept, args.task, args.models, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
