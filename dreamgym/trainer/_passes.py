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

from dreamgym.trainer._anchor import Anchor

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
    batch, in place of TRL's shuffled, equally padded ones (``TrainConfig.micro_batch_size``).

    With ``choice_ids`` (an index policy's label tokens, :attr:`dreamgym.agents.LocalPolicy.choice_token_ids`),
    a completion token that is one of them is scored in the softmax over them alone, as the policy drew it
    (:func:`dreamgym.agents.choice_logprobs`); every other token (the environment's, never trained) over the
    whole vocabulary. This runs the model's own head, so its full logits are made (TRL's fused head does not
    make them): the vocabulary's size in floats per completion token of a pass.

    With ``anchor`` (:class:`~dreamgym.trainer._anchor.Anchor`), each pass's loss also carries its share of the
    behaviour-cloning term on the update's anchor demonstrations (``train/anchor_loss`` logs their mean
    cross-entropy).
    """

    def __init__(
        self, *args: Any, choice_ids: tuple[int, ...] | None = None, anchor: Anchor | None = None, **kwargs: Any
    ) -> None:
        self.choice_ids = choice_ids
        self.anchor = anchor
        super().__init__(*args, **kwargs)

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss, plus this pass's share of the behaviour-cloning anchor (``TrainConfig.anchor_weight``)."""
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        grpo: Any = self
        if self.anchor is None or not grpo.model.training:
            return loss
        # the optimizer steps taken so far number the update (kept across a resume); TRL's pass counter, the pass
        share = self.anchor.loss(model, grpo.state.global_step, grpo._step % self.anchor.passes)
        if share is None:
            return loss
        term, cross_entropy = share
        grpo._metrics["train"]["anchor_loss"].append(cross_entropy)
        return loss + term

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **images: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if self.choice_ids is None or compute_aux_loss or any(value is not None for value in images.values()):
            return super()._get_per_token_logps_and_entropies(  # type: ignore[no-any-return]
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **images,
            )  # fmt: skip
        from dreamgym.agents import choice_logprobs

        grpo: Any = self
        among = torch.tensor(self.choice_ids, dtype=torch.long, device=input_ids.device)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            with grpo.accelerator.autocast():  # the inputs TRL's own pass gives the model, its head unfused
                logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1).logits
            logits = logits[:, :-1].float() / grpo.temperature
            targets = ids[:, -logits_to_keep:]
            logps.append(choice_logprobs(logits, targets, among))
            if compute_entropy:
                with torch.no_grad():
                    entropies.append(_entropy(logits, targets, among))
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        grpo: Any = self  # TRL's buffering state, as its own _prepare_inputs keeps it
        if not grpo.model.training:
            return super()._prepare_inputs(generation_batch)
        steps = grpo.args.steps_per_generation
        if grpo._step % (steps * grpo.num_iterations) == 0 or grpo._buffered_inputs is None:
            grpo._buffered_inputs = split_by_length(grpo._generate_and_score_completions(generation_batch), steps)
        return grpo._buffered_inputs[grpo._step % steps]


def _entropy(logits: torch.Tensor, targets: torch.Tensor, among: torch.Tensor) -> torch.Tensor:
    """Each position's entropy in the distribution its token was scored in (the choices', or the vocabulary's)."""

    def entropy(scores: torch.Tensor) -> torch.Tensor:
        logprobs = torch.log_softmax(scores, dim=-1)
        return -(logprobs.exp() * logprobs).sum(dim=-1)

    return torch.where(torch.isin(targets, among), entropy(logits.index_select(-1, among)), entropy(logits))
