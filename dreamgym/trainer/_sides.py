"""How a training run refits its experience model; what it plays on (:class:`Sides`) lives in the runtime."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from dreamgym.core.protocols import ExperienceModel, ReplayStore
from dreamgym.runtime._sides import ModelSlot, OpenSides, Refit, Sides

__all__ = ["ModelSlot", "OpenSides", "Refit", "Sides", "sft_refit"]


def sft_refit(
    work_dir: Path,
    *,
    base: Path,
    epochs: float = 1.0,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    max_length: int = 2048,
    batch_size: int = 8,
    learning_rate: float | None = None,
    judge: bool = True,
    **backend_options: Any,
) -> Refit:
    """A :data:`Refit` that fine-tunes the current model on every real transition in the store.

    Each refit continues from the last model (the first from ``base``), with
    the template ``base`` was trained on, and writes ``work_dir/refit-N``. The
    held-out pairs stay out of the examples and of retrieval (the leakage rule). With ``judge``, each refit fits
    its outcome judge (:func:`~dreamgym.simulator.fit_store_judge`) on the same real steps and saves it with the
    model.
    ``learning_rate``: ``None`` takes full fine-tuning's default (``SimTrainConfig.lr``, made for a pretrained
    base); a small model trained from scratch wants more (the demo's refits use 5e-4).
    ``backend_options`` go to each new model's ``LocalBackend`` (e.g. the run's ``limiter``).
    """
    from dreamgym.simulator import (
        SimTrainConfig,
        TemplateConfig,
        build_sft_examples,
        fit_store_judge,
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
            base=str(last[0]), lora=False, epochs=epochs, max_length=max_length, batch_size=batch_size,
            learning_rate=learning_rate,
        )  # fmt: skip
        out = work_dir / f"refit-{ordinal}"
        await anyio.to_thread.run_sync(
            lambda: train_experience_model(
                examples, out, config, template=template, extra_metadata={"refit": ordinal, "parent": str(last[0])}
            )
        )
        if judge:
            (await fit_store_judge(store, exclude_task_seeds=exclude_task_seeds)).save(out)
        last[0] = out
        return load_experience_model(out, store=store, **backend_options)

    return refit
