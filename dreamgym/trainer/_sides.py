"""What a training run plays on: the store, the real and synthetic environments, and their extras."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from dreamgym.core.protocols import Environment, ExperienceModel, ExperienceQuery, Prediction, ReplayStore, TextBackend
from dreamgym.core.types import Observation, Task
from dreamgym.runtime import ResetHook, RuntimeConfig, SyntheticEnvironment

__all__ = ["ModelSlot", "OpenSides", "Refit", "Sides", "sft_refit"]


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


def sft_refit(
    work_dir: Path,
    *,
    base: Path,
    epochs: float = 1.0,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    max_length: int = 2048,
    batch_size: int = 8,
    **backend_options: Any,
) -> Refit:
    """A :data:`Refit` that fine-tunes the current model on every real transition in the store.

    Each refit continues from the last model (the first from ``base``), with
    the template ``base`` was trained on, and writes ``work_dir/refit-N``. The
    held-out pairs stay out of the examples and of retrieval (the leakage rule).
    ``backend_options`` go to each new model's ``LocalBackend`` (e.g. the run's ``limiter``).
    """
    from dreamgym.simulator import (
        SimTrainConfig,
        TemplateConfig,
        build_sft_examples,
        load_experience_model,
        read_metadata,
        train_experience_model,
    )

    recorded = read_metadata(base).get("template")
    template = TemplateConfig(**recorded) if recorded else TemplateConfig()
    last = [Path(base)]

    async def refit(store: ReplayStore, ordinal: int) -> ExperienceModel:
        examples = await build_sft_examples(store, template, exclude_task_seeds=exclude_task_seeds)
        config = SimTrainConfig(
            base=str(last[0]), lora=False, epochs=epochs, max_length=max_length, batch_size=batch_size
        )
        out = work_dir / f"refit-{ordinal}"
        await anyio.to_thread.run_sync(
            lambda: train_experience_model(
                examples, out, config, template=template, extra_metadata={"refit": ordinal, "parent": str(last[0])}
            )
        )
        last[0] = out
        return load_experience_model(out, store=store, **backend_options)

    return refit


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
