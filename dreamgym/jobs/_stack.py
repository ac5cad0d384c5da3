"""One stack for every job: the store, the sites, the browsers and the simulator a run needs, for any task set.

A job (``collect``, ``rollout``, ``train``, ``demo``, a benchmark) describes
what it runs on in one :class:`StackSettings` and opens it with
:func:`open_stack`, which yields the run's :class:`~dreamgym.runtime.Sides`;
:func:`open_runtime` puts a :class:`~dreamgym.runtime.Runtime` over them and
:func:`stack_sides` hands them to the trainer. Real episodes run MiniWoB++
tasks on the MiniWoB++ site, the tasks of ``sites`` (a
:class:`~dreamgym.bridge.WebArenaSite` for WebArena-format configs, a user's
own site) by their ``benchmark``, and generic tasks on the generic site: a new
site needs no new wiring.

Everything is opened in the calling event loop and closed when the block
ends, so nothing outlives the loop that made it (Playwright objects belong to
their loop).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from dreamgym.core.protocols import Embedder, Environment, ExperienceModel, Policy, ReplayStore, TextBackend
from dreamgym.core.types import Task
from dreamgym.runtime import ModelSlot, OpenSides, Refit, ResetHook, Runtime, RuntimeConfig, Sides, WorkerConfig

if TYPE_CHECKING:
    from dreamgym.bridge import Site
    from dreamgym.replay import StoreConfig
    from dreamgym.simulator import ServedModel, SimulatedEnv

__all__ = [
    "PolicyFactory",
    "RealEnvs",
    "StackSettings",
    "grounded_simulator",
    "open_browser_envs",
    "open_runtime",
    "open_stack",
    "real_envs_for",
    "stack_sides",
]

PolicyFactory = Callable[[anyio.CapacityLimiter], Policy]
"""Makes the runtime's policy, given the limiter that in-process torch work shares."""

RealEnvs = Callable[[], AbstractAsyncContextManager[Callable[[], Environment]]]
"""Opens what real environments need and yields a factory of them (:func:`open_browser_envs` by default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSettings:
    """What a run opens: where its records go, which sites and experience model it uses.

    ``store`` should already hold real transitions when the simulator runs:
    it starts groups from their real first pages and retrieves its neighbours
    from them.
    """

    store: Path
    eval_store: Path | None = None
    """Where evaluation episodes go (training runs): apart from ``store``, so held-out pages never reach
    retrieval or refit data."""
    sim_model: Path | ServedModel | None = None
    """The experience model's directory, or a served one; ``None`` runs real groups only."""
    sim_attempts: int | None = None
    """Attempts per prediction when the experience model's answer is malformed; ``None``: 3, or a served
    model's own :attr:`~dreamgym.simulator.ServedModel.attempts`."""
    exclude_task_seeds: tuple[tuple[str, int | None], ...] = ()
    """Held-out (task, seed) pairs (seed ``None``: the whole task): never retrieved by the simulator."""
    refit: Callable[[anyio.CapacityLimiter], Refit] | None = None
    """Makes the refit of the experience model (``trainer.sft_refit``), given the run's torch limiter;
    needs a local ``sim_model``."""
    sites: tuple[Site, ...] = ()
    """Sites beside MiniWoB++'s, for tasks of other benchmarks."""
    browsers: int = 1
    """Chromium processes (each worker's, with ``workers``)."""
    workers: WorkerConfig | None = None
    """Run the real episodes in Ray actors, each with its own browsers (:class:`~dreamgym.runtime.RayWorkers`);
    ``None`` runs them in this process. The store and the policy stay here either way."""
    runtime: RuntimeConfig | None = None
    embedder: Embedder | None = None
    """The store's embedder (``None``: the default)."""
    store_config: StoreConfig | None = None
    eval_embedder: Embedder | None = None
    """The evaluation store's embedder (``None``: ``embedder``)."""
    curriculum_backend: TextBackend | None = None
    """The chat model that varies tasks (``TrainConfig.curriculum``); closed with the stack."""
    reset_hook: ResetHook | None = None
    real_envs: RealEnvs | None = None
    """Opens the real environments in place of Chromium and the sites (``None``: :func:`open_browser_envs`):
    :func:`real_envs_for` gives text-world tasks theirs (``dreamgym.textworlds.open_text_world_envs``).
    It must pickle, with ``workers``."""


def real_envs_for(tasks: Sequence[Task]) -> RealEnvs | None:
    """What opens the real environments of ``tasks``: text worlds' own when every task is one, ``None``
    (Chromium) when none is.

    Raises:
        ConfigError: Text-world tasks mixed with web tasks (run them apart).
    """
    from dreamgym.core.errors import ConfigError
    from dreamgym.textworlds import is_text_world, open_text_world_envs

    text = [is_text_world(task) for task in tasks]
    if text and all(text):
        return open_text_world_envs
    if any(text):
        raise ConfigError("text-world tasks and web tasks run apart: give one kind of --tasks per run")
    return None


@asynccontextmanager
async def open_stack(settings: StackSettings, limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
    """Open the stores, the sites, the browsers and (with ``sim_model``) the simulator; yield them as Sides.

    ``limiter`` is the one every in-process torch job of the run shares: the
    experience model's local backend takes its slots too.

    Raises:
        ConfigError: A refit was asked of a served experience model.
    """
    from dreamgym.core.errors import ConfigError
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model

    if settings.refit is not None and not isinstance(settings.sim_model, Path):
        raise ConfigError(
            "refits change the experience model's weights: they need a local model directory, not a served model"
        )
    async with AsyncExitStack() as stack:
        if settings.curriculum_backend is not None and hasattr(settings.curriculum_backend, "aclose"):
            stack.push_async_callback(settings.curriculum_backend.aclose)
        store = await stack.enter_async_context(
            LmdbReplayStore(settings.store, embedder=settings.embedder, config=settings.store_config)
        )
        eval_store = None
        if settings.eval_store is not None:
            eval_store = await stack.enter_async_context(
                LmdbReplayStore(settings.eval_store, embedder=settings.eval_embedder or settings.embedder)
            )
        real_envs = settings.real_envs or functools.partial(open_browser_envs, settings.sites, settings.browsers)
        if settings.workers is not None:
            from dreamgym.runtime import RayWorkers

            workers = await stack.enter_async_context(RayWorkers(real_envs, settings.workers))
            real_env: Callable[[], Environment] = workers.env
        else:
            real_env = await stack.enter_async_context(real_envs())
        runtime = settings.runtime or RuntimeConfig()
        sides = Sides(
            store=store,
            real_env=real_env,
            eval_store=eval_store,
            runtime_config=runtime,
            curriculum_backend=settings.curriculum_backend,
            reset_hook=settings.reset_hook,
        )
        if settings.sim_model is not None:
            model = load_experience_model(
                settings.sim_model, store=store, limiter=limiter, max_attempts=settings.sim_attempts
            )
            sides.slot = ModelSlot(model, settings.refit(limiter) if settings.refit is not None else None)
            sides.synthetic_env = grounded_simulator(
                sides.slot, store, neighbours=model.config.template.neighbours, max_steps=runtime.max_steps,
                exclude_task_seeds=settings.exclude_task_seeds,
            )  # fmt: skip
        yield sides


@asynccontextmanager
async def open_browser_envs(sites: Sequence[Site] = (), browsers: int = 1) -> AsyncIterator[Callable[[], Environment]]:
    """Open MiniWoB++'s site, ``browsers`` Chromium processes and ``sites``; yield a factory of real environments
    on them (MiniWoB++ tasks, the tasks of ``sites`` by benchmark, generic tasks). A Ray worker opens its own
    through this (:class:`~dreamgym.runtime.RayWorkers`), so ``sites`` must pickle there."""
    from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobSite

    site = MiniWobSite()
    try:
        async with BrowserPool(BrowserConfig(processes=browsers)) as pool:
            everywhere = [site, *sites]
            yield lambda: BrowserEnv(pool, sites=everywhere)
    finally:
        site.close()


def stack_sides(settings: StackSettings) -> OpenSides:
    """The trainer's :data:`~dreamgym.runtime.OpenSides` for these settings (opened in the trainer's loop)."""
    return functools.partial(open_stack, settings)


@asynccontextmanager
async def open_runtime(settings: StackSettings, policy: PolicyFactory) -> AsyncIterator[tuple[Runtime, Sides]]:
    """:func:`open_stack` with a :class:`~dreamgym.runtime.Runtime` over it; yields (runtime, sides).

    The policy, the runtime and the experience model share one torch limiter
    of ``RuntimeConfig.torch_slots`` slots.
    """
    config = settings.runtime or RuntimeConfig()
    limiter = anyio.CapacityLimiter(config.torch_slots)
    async with (
        open_stack(settings, limiter) as sides,
        Runtime(
            policy=policy(limiter),
            store=sides.store,
            config=config,
            real_env=sides.real_env,
            synthetic_env=sides.synthetic_env,
            reset_hook=sides.reset_hook,
            torch_limiter=limiter,
        ) as runtime,
    ):
        if sides.slot is not None:
            slot = sides.slot
            runtime.stats.repeated_retries = lambda: _repeated_retries(slot.current)
        yield runtime, sides


def _repeated_retries(model: ExperienceModel) -> int:
    """The model's retries that repeated the attempt before them (0 for a model that does not count them)."""
    from dreamgym.simulator import LLMExperienceModel

    return model.stats.repeated_retries if isinstance(model, LLMExperienceModel) else 0


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
