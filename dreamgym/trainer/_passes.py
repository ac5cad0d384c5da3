"""An update's episodes in several forward/backward passes of like length, each cut to its own width.

TRL pads every episode of an update to the longest prompt and the longest
completion among them, and takes them in one pass. A policy's episodes are
multi-turn (each turn's page is part of the sequence), so their lengths differ
several-fold, and on a CPU the padded positions cost more than the tokens:
attention under a padding mask runs on the slow path, and grows with the
square of the padded width. :class:`LengthSortedGRPO` takes TRL's generation
batch (the update's episodes, their advantages already computed over their
groups) and hands its accumulation steps rows sorted by length, each slice
trimmed of the padding its rows do not need. With equal slices the summed
gradient is the one-pass gradient for the ``grpo`` loss (a mean over sequences
of per-sequence means, divided by the accumulation steps), ``dapo`` and
``dr_grpo`` (normalised by the whole batch): only the order of the additions
changes (``tests/trainer/test_exact_training.py``). ``bnpo`` normalises each
pass by its own tokens, as TRL does under any gradient accumulation.
"""

from __future__ import annotations

from typing import Any

import torch
from trl.trainer.grpo_trainer import GRPOTrainer

__all__ = ["LengthSortedGRPO", "split_by_length"]

PROMPT_KEYS = frozenset({"prompt_ids", "prompt_mask"})
"""Left-padded: trimmed from the left."""


def split_by_length(batch: dict[str, Any], parts: int) -> list[dict[str, Any]]:
    """``batch``'s rows in ``parts`` equal slices, shortest first, each cut to its longest prompt and completion.

    Per-row tensors are sliced; those as wide as the completions (ids, masks, per-token log-probabilities) are
    trimmed on the right, the prompts on the left; anything else (TRL's ``num_items_in_batch``) is passed to
    every slice as it is.

    Raises:
        ValueError: The rows do not divide into ``parts`` equal slices.
    """
    rows = batch["prompt_ids"].size(0)
    if parts < 1 or rows % parts:
        raise ValueError(f"{rows} rows do not split into {parts} equal passes")
    prompt_lengths = batch["prompt_mask"].sum(dim=1)
    completion_lengths = batch["completion_mask"].sum(dim=1)
    width = batch["completion_ids"].size(1)
    order = torch.argsort(prompt_lengths + completion_lengths, stable=True)
    slices = []
    for rows_of_pass in order.chunk(parts):
        prompt_width = max(int(prompt_lengths[rows_of_pass].max()), 1)
        completion_width = max(int(completion_lengths[rows_of_pass].max()), 1)
        part: dict[str, Any] = {}
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.size(0) != rows:
                part[key] = value
            elif key in PROMPT_KEYS:
                part[key] = value[rows_of_pass, -prompt_width:]
            elif value.dim() >= 2 and value.size(1) == width:
                part[key] = value[rows_of_pass, :completion_width]
            else:
                part[key] = value[rows_of_pass]
        slices.append(part)
    return slices


class LengthSortedGRPO(GRPOTrainer):
    """TRL's GRPO trainer whose accumulation steps take :func:`split_by_length`'s slices of each generation
    batch, in place of TRL's shuffled, equally padded ones (``TrainConfig.micro_batch_size``)."""

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        grpo: Any = self  # TRL's buffering state, as its own _prepare_inputs keeps it
        if not grpo.model.training:
            return super()._prepare_inputs(generation_batch)
        steps = grpo.args.steps_per_generation
        if grpo._step % (steps * grpo.num_iterations) == 0 or grpo._buffered_inputs is None:
            grpo._buffered_inputs = split_by_length(grpo._generate_and_score_completions(generation_batch), steps)
        return grpo._buffered_inputs[grpo._step % steps]
