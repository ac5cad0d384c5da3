"""Pieces shared by the jobs that run policies on MiniWoB++ (``dreamgym collect``/``rollout`` and ``dreamgym demo``).

- ``open_runtime``: a replay store, a MiniWoB++ site, a browser pool, a
  policy and (optionally) the simulator, wired into one
  :class:`~dreamgym.runtime.Runtime` that shares one torch limiter;
- ``simulator_factory``: a trained experience model behind ``SimulatedEnv``
  environments grounded in a store;
- ``mixed_groups``: groups over tasks and seeds with a share of them real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from dreamgym.bridge import MiniWobSite, Site
    from dreamgym.core.protocols import Embedder, ExperienceModel, Policy, ReplayStore
    from dreamgym.core.types import Source, Task
    from dreamgym.replay import StoreConfig
    from dreamgym.runtime import GroupSpec, Runtime, RuntimeConfig
    from dreamgym.simulator import ServedModel, SimulatedEnv

__all__ = ["PolicyFactory", "grounded_simulator", "mixed_groups", "open_runtime", "simulator_factory"]

PolicyFactory = Callable[[anyio.CapacityLimiter], "Policy"]
"""Makes the runtime's policy, given the limiter that in-process torch work shares."""


@asynccontextmanager
async def open_runtime(
    store_path: Path,
    policy: PolicyFactory,
    config: RuntimeConfig,
    *,
    sim_model: Path | ServedModel | None = None,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    embedder: Embedder | None = None,
    store_config: StoreConfig | None = None,
    sites: Sequence[Site] = (),
) -> AsyncIterator[tuple[Runtime, MiniWobSite]]:
    """Open the store, a site, the browsers, the policy and (with ``sim_model``) the simulator; yield (runtime, site).

    Real episodes run MiniWoB++ tasks on the MiniWoB++ site it yields, and the
    tasks of any of ``sites`` (a :class:`~dreamgym.bridge.WebArenaSite`, say)
    by their ``benchmark``; generic tasks run on the generic site.

    Everything is opened in the calling event loop and closed when the block
    ends, so nothing outlives the loop that made it.
    """
    from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobSite
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.runtime import Runtime

    site = MiniWobSite()
    async with AsyncExitStack() as stack:
        stack.callback(site.close)
        store = await stack.enter_async_context(LmdbReplayStore(store_path, embedder=embedder, config=store_config))
        pool = await stack.enter_async_context(BrowserPool(BrowserConfig(processes=1)))
        limiter = anyio.CapacityLimiter(config.torch_slots)
        synthetic_env = (
            simulator_factory(
                sim_model, store, limiter, max_steps=config.max_steps, exclude_task_seeds=exclude_task_seeds
            )
            if sim_model is not None
            else None
        )
        runtime = await stack.enter_async_context(
            Runtime(
                policy=policy(limiter),
                store=store,
                config=config,
                real_env=lambda: BrowserEnv(pool, sites=[site, *sites]),
                synthetic_env=synthetic_env,
                torch_limiter=limiter,
            )
        )
        yield runtime, site


def simulator_factory(
    model_dir: Path | ServedModel,
    store: ReplayStore,
    limiter: anyio.CapacityLimiter,
    *,
    max_steps: int,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
) -> Callable[[], SimulatedEnv]:
    """Load the experience model at ``model_dir`` (or reach the served one) once; make simulated environments
    that retrieve from ``store``.

    ``exclude_task_seeds`` are kept out of retrieval (the leakage rule): pass
    every held-out (task, seed).
    """
    from dreamgym.simulator import load_experience_model

    model = load_experience_model(model_dir, store=store, limiter=limiter)
    return grounded_simulator(
        model, store, neighbours=model.config.template.neighbours, max_steps=max_steps,
        exclude_task_seeds=exclude_task_seeds,
    )  # fmt: skip


def grounded_simulator(
    model: ExperienceModel,
    store: ReplayStore,
    *,
    neighbours: int,
    max_steps: int,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
) -> Callable[[], SimulatedEnv]:
    """Simulated environments over ``model`` that retrieve ``neighbours`` real transitions from ``store``
    (the number the model's template was trained with), never the held-out ``exclude_task_seeds``."""
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig

    config = SimulatorConfig(max_steps=max_steps, neighbours=neighbours, exclude_task_seeds=tuple(exclude_task_seeds))
    return lambda: SimulatedEnv(model, store=store, config=config)


def mixed_groups(
    tasks: Sequence[Task],
    seeds: Sequence[int | None],
    *,
    size: int,
    real_share: float,
    shadow: bool = False,
    count: int | None = None,
    seed: int = 0,
) -> list[GroupSpec]:
    """Groups over (task, seed) pairs, ``real_share`` of them real (exactly, spread out), shadowed if asked.

    Without ``count``, one group per (task, seed); with it, ``count`` groups
    that cycle through the seeds, every task taking each seed in turn, the
    tasks' order rotated from seed to seed so that the real groups' evenly
    spread positions do not all fall on one task.
    """
    from dreamgym.runtime import GroupSpec, RatioSource

    if count is None:
        chosen = [(task, s) for task in tasks for s in seeds]
    else:
        pairs = [(tasks[(i + j) % len(tasks)], s) for j, s in enumerate(seeds) for i in range(len(tasks))]
        chosen = [pairs[i % len(pairs)] for i in range(count)]
    chooser = RatioSource(real_share, seed=seed)
    groups: list[GroupSpec] = []
    for task, group_seed in chosen:
        source: Source = chooser.choose(task, len(groups))
        groups.append(
            GroupSpec(task=task, size=size, seed=group_seed, source=source, shadow=shadow and source == "real")
        )
    return groups
