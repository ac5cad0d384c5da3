"""Training sides for MiniWoB++: real pages in Chromium, the simulator grounded in a store, a held-out store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Embedder, TextBackend
from dreamgym.runtime import RuntimeConfig
from dreamgym.trainer._sides import ModelSlot, OpenSides, Sides, sft_refit

if TYPE_CHECKING:
    from dreamgym.bridge import Site
    from dreamgym.simulator import ServedModel

__all__ = ["MiniWobSides", "miniwob_sides"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MiniWobSides:
    """Where a MiniWoB++ training run keeps its records, and which experience model it asks.

    ``store`` should already hold real transitions (``dreamgym collect``): the
    simulator starts groups from their real first pages and retrieves its
    neighbours from them. Evaluation episodes go to ``eval_store`` only.
    """

    store: Path
    eval_store: Path
    sim_model: Path | ServedModel | None = None
    """The experience model's directory, or a served one (not refittable); ``None`` runs real groups only."""
    exclude_task_seeds: tuple[tuple[str, int | None], ...] = ()
    """Held-out (task, seed) pairs: never retrieved, never in refit data."""
    refit_dir: Path | None = None
    """Where ``sim_refit_every`` writes the refit models (``None``: no refits)."""
    browsers: int = 1
    runtime: RuntimeConfig | None = None
    embedder: Embedder | None = None
    sites: tuple[Site, ...] = ()
    """Sites beside MiniWoB++'s for tasks of other benchmarks (a ``WebArenaSite`` for webarena configs)."""
    curriculum_backend: TextBackend | None = None
    """The chat model that varies tasks (``TrainConfig.curriculum``); closed with the run."""


def miniwob_sides(settings: MiniWobSides) -> OpenSides:
    """An :data:`OpenSides` for MiniWoB++ that opens everything in the trainer's event loop."""

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        from dreamgym._jobs import grounded_simulator
        from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobSite
        from dreamgym.replay import LmdbReplayStore
        from dreamgym.simulator import load_experience_model

        site = MiniWobSite()
        async with AsyncExitStack() as stack:
            stack.callback(site.close)
            store = await stack.enter_async_context(LmdbReplayStore(settings.store, embedder=settings.embedder))
            eval_store = await stack.enter_async_context(
                LmdbReplayStore(settings.eval_store, embedder=settings.embedder)
            )
            pool = await stack.enter_async_context(BrowserPool(BrowserConfig(processes=settings.browsers)))
            runtime = settings.runtime or RuntimeConfig()
            sides = Sides(
                store=store,
                real_env=lambda: BrowserEnv(pool, sites=[site, *settings.sites]),
                eval_store=eval_store,
                runtime_config=runtime,
                curriculum_backend=settings.curriculum_backend,
            )
            if settings.curriculum_backend is not None and hasattr(settings.curriculum_backend, "aclose"):
                stack.push_async_callback(settings.curriculum_backend.aclose)
            if settings.sim_model is not None:
                model = load_experience_model(settings.sim_model, store=store, limiter=limiter)
                refit = None
                if settings.refit_dir is not None:
                    if not isinstance(settings.sim_model, Path):
                        raise ConfigError(
                            "sim_refit_every refits the experience model's weights: it needs a local model "
                            "directory, not a served model"
                        )
                    refit = sft_refit(
                        settings.refit_dir,
                        base=settings.sim_model,
                        exclude_task_seeds=settings.exclude_task_seeds,
                        limiter=limiter,  # refit models share the run's torch slot too
                    )
                sides.slot = ModelSlot(model, refit)
                sides.synthetic_env = grounded_simulator(
                    sides.slot, store, neighbours=model.config.template.neighbours, max_steps=runtime.max_steps,
                    exclude_task_seeds=settings.exclude_task_seeds,
                )  # fmt: skip
            yield sides

    return open_sides


def held_out(tasks: Sequence[str], seeds: Sequence[int]) -> tuple[tuple[str, int | None], ...]:
    """Every (task id, seed) pair of ``tasks`` x ``seeds``: what retrieval and refits must leave out."""
    return tuple((task, seed) for task in tasks for seed in seeds)
