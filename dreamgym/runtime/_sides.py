"""What a run plays on (:class:`Sides`), and an experience model that can be swapped mid-run (:class:`ModelSlot`).

A job opens the sides once, in the event loop that runs the episodes
(:func:`dreamgym.jobs.open_stack` for any task set), and hands them to the
:class:`~dreamgym.runtime.Runtime` or the trainer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import anyio

from dreamgym.core.protocols import Environment, ExperienceModel, ExperienceQuery, Prediction, ReplayStore, TextBackend
from dreamgym.core.types import Observation, Task
from dreamgym.runtime._config import RuntimeConfig
from dreamgym.runtime._envs import ResetHook, SyntheticEnvironment

__all__ = ["ModelSlot", "OpenSides", "Refit", "Sides"]


Refit = Callable[[ReplayStore, int], Awaitable[ExperienceModel]]
"""Makes a new experience model from the grown store; the int counts refits (1, 2, ...)."""


class ModelSlot:
    """An experience model that can be swapped mid-run: the trainer's ``sim_refit_every``.

    Give ``SimulatedEnv`` the slot instead of the model. Every prediction asks
    the model in the slot now, so after :meth:`refit` later steps record the
    new model's id, with no environment rebuilt.
    """

    def __init__(self, model: ExperienceModel, refit: Refit | None = None) -> None:
        self.current = model
        self.refits = 0
        self._refit = refit

    @property
    def model_id(self) -> str:
        return self.current.model_id

    @property
    def can_refit(self) -> bool:
        return self._refit is not None

    async def predict(self, query: ExperienceQuery) -> Prediction:
        return await self.current.predict(query)

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        return await self.current.predict_initial(task, seed=seed)

    async def refit(self, store: ReplayStore) -> str:
        """Make the next model from ``store`` and put it in the slot; returns its id.

        A failed refit leaves the current model in place and raises.
        """
        if self._refit is None:
            return self.current.model_id
        model = await self._refit(store, self.refits + 1)
        self.current = model
        self.refits += 1
        return model.model_id


@dataclass(kw_only=True)
class Sides:
    """The resources of a training run, opened in the trainer's event loop.

    Args:
        store: Where training episodes go (with their provenance), and what the
            simulator retrieves from and refits on.
        real_env: Makes a real environment; needed by ``mixed``, ``sim2real`` and evaluation.
        synthetic_env: Makes a simulator environment; needed by ``synthetic``, ``mixed`` and ``sim2real``.
        eval_store: Where evaluation episodes go: keep it apart from ``store`` so
            held-out pages never reach retrieval or SFT data.
        slot: The experience model the synthetic environments ask, when it can be refit.
        curriculum_backend: Proposes task variations (``TrainConfig.curriculum``).
        reset_hook: Restores a stateful site before each real episode.
        runtime_config: Concurrency, deadlines and buffers of the runtime.
    """

    store: ReplayStore
    real_env: Callable[[], Environment] | None = None
    synthetic_env: Callable[[], SyntheticEnvironment] | None = None
    eval_store: ReplayStore | None = None
    slot: ModelSlot | None = None
    curriculum_backend: TextBackend | None = None
    reset_hook: ResetHook | None = None
    runtime_config: RuntimeConfig | None = None


OpenSides = Callable[[anyio.CapacityLimiter], AbstractAsyncContextManager[Sides]]
"""Opens a run's :class:`Sides` in the trainer's event loop. The limiter is the one every
in-process torch job of the run shares (the policy's included): give it to ``LocalBackend``."""
