"""Probe: are the pages the answer guard lets through right? Teacher-forced, on a finished demo's held-out steps.

    python benchmarks/probes/guard_pages.py DEMO_OUT [STEPS]

Predicts the first STEPS (default 160) steps of the demo's held-out
evaluation store (the warm start's episodes, in store order) with its
experience model and judge three ways: unguarded (``copy_page_lines=False``),
guarded (the default), and guarded with the rules' pages off for steered and
garbled first answers (what the guard's own answers are worth). Prints, per
way, how many predicted pages equal the real next page, and the model's
answer counters. A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
from pathlib import Path

import anyio


async def main(kept: Path, limit: int) -> None:
    from dreamgym.core.state import parse_state
    from dreamgym.core.types import Task
    from dreamgym.jobs._demo_settings import DemoSettings, held_out_pairs
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model, real_episodes

    settings = DemoSettings(out=kept)
    async with LmdbReplayStore(kept / "eval-store", embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False),
                               readonly=True) as evaluated:  # fmt: skip
        episodes = await real_episodes(evaluated)
    held = tuple(held_out_pairs(settings))
    exact: collections.Counter[str] = collections.Counter()
    ways = {"unguarded": {"copy_page_lines": False}, "guarded": {},
            "guarded, no rule pages": {"rule_pages": False}}  # fmt: skip
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        envs = {}
        for way, changes in ways.items():
            model = load_experience_model(kept / "experience-model")
            model.config = dataclasses.replace(model.config, **changes)
            config = SimulatorConfig(neighbours=model.config.template.neighbours, exclude_task_seeds=held)
            envs[way] = SimulatedEnv(model, store=store, config=config)
        steps = [(episode, n) for episode in episodes for n in range(len(episode))][:limit]
        for episode, n in steps:
            step = episode[n]
            task = Task(task_id=step.task_id, instruction=step.observation.goal or step.task_id, site=step.site)
            history = [(earlier.observation, earlier.action) for earlier in episode[:n]]
            for way, env in envs.items():
                result = await env.predict_step(task, history, step.observation, step.action, seed=step.seed,
                                                exclude_task_seeds=[(step.task_id, step.seed)])  # fmt: skip
                exact[way] += parse_state(result.observation.state) == parse_state(step.next_observation.state)
    for way, env in envs.items():
        print(f"{way}: {exact[way]} of {len(steps)} pages exact; {env.model.stats}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="a finished demo's out")
    parser.add_argument("steps", type=int, nargs="?", default=160, help="held-out steps to predict")
    args = parser.parse_args()
    anyio.run(main, args.kept, args.steps)
