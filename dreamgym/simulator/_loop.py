"""The experience model's supervised loop: next-token loss on the answer, batches of like length, nothing else.

Why not TRL's ``SFTTrainer`` here: measured on the offline default's
examples on 2 CPU cores (``benchmarks/sim_build.py``), its loop ran the same
small model at about half the tokens per second of a bare forward and
backward, spending the rest on its chunked log-probability loss and per-step
bookkeeping, none of which a from-scratch model of a few million parameters
needs. This loop is what remains: the prompt and answer tokenized once, the
loss only on the answer's tokens (the prompt is context), AdamW with a cosine
schedule after a short warm-up and gradients clipped at 1 (the Trainer's
defaults), and batches of examples of similar length, shuffled, so padding
stays near zero. It trains whatever model it is given, a PEFT-wrapped one
included, on that model's device.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.core.devices import mixed_precision, model_device
from dreamgym.core.progress import progress

__all__ = ["FitResult", "TokenizedExample", "fit", "length_grouped_batches", "tokenize_example"]

log = logging.getLogger(__name__)

IGNORE = -100
"""The label of a token the loss skips (the prompt's, the padding's)."""


@dataclass(frozen=True, slots=True)
class TokenizedExample:
    """One example's token ids: the prompt's first ``prompt_length``, then the answer's."""

    input_ids: tuple[int, ...]
    prompt_length: int

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """What a run of :func:`fit` did."""

    steps: int
    """Optimizer steps taken."""
    loss: float
    """Mean loss over the run's answer tokens, as the Trainer reports ``training_loss``."""
    last_loss: float
    """Mean loss of the last step."""
    tokens: int
    """Tokens fed forward (padding excluded)."""
    padded_tokens: int
    """Tokens fed forward including padding."""
    seconds: float


def tokenize_example(
    tokenizer: Any, prompt: list[dict[str, str]], completion: list[dict[str, str]]
) -> TokenizedExample:
    """The chat-templated prompt (with the assistant's opening) followed by the answer, and where the answer starts.

    The answer starts where the prompt alone and prompt + answer stop agreeing,
    as TRL's SFT tokenization does, so the two train on the same tokens.
    """
    prompt_ids = list(
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    full_ids = list(tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=False))
    shared = 0
    for a, b in zip(prompt_ids, full_ids, strict=False):
        if a != b:
            break
        shared += 1
    return TokenizedExample(input_ids=tuple(full_ids), prompt_length=shared)


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, rng: random.Random, *, grouped: bool = True
) -> list[list[int]]:
    """One epoch's batches of indices: shuffled, then sorted by length within chunks of 50 batches, batches shuffled.

    Like transformers' length-grouped sampler: an epoch still visits every
    example once in a random order of batches, but each batch holds examples
    of about one length, so little of it is padding. ``grouped=False``: plain
    shuffled batches.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if not grouped:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    chunk = 50 * batch_size
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: -lengths[i])
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def fit(
    model: Any,
    examples: Sequence[TokenizedExample],
    *,
    pad_id: int,
    epochs: float,
    batch_size: int,
    learning_rate: float,
    seed: int = 0,
    max_steps: int = -1,
    warmup: float = 0.05,
    group_by_length: bool = True,
    dtype: str = "auto",
    what: str = "train",
) -> FitResult:
    """Train ``model`` in place on ``examples`` (blocking), reported as a progress phase of optimizer steps.

    ``epochs`` may be fractional (the steps are rounded up); ``max_steps``
    (> 0) stops sooner. ``dtype`` ``bfloat16`` or ``float16`` runs the passes
    on CUDA in mixed precision (autocast over the weights, the loss scaled for
    ``float16``; :func:`~dreamgym.core.devices.mixed_precision`); otherwise they
    run in the weights' own dtype. Raises nothing of its own; a model that
    cannot take the batch raises torch's error.
    """
    import contextlib

    import torch
    from transformers import get_cosine_schedule_with_warmup

    rng = random.Random(seed)
    torch.manual_seed(seed)
    lengths = [len(e) for e in examples]
    per_epoch = math.ceil(len(examples) / batch_size)
    total = math.ceil(per_epoch * epochs)
    if max_steps > 0:
        total = min(total, max_steps)
    plan: list[list[int]] = []
    while len(plan) < total:
        plan += length_grouped_batches(lengths, batch_size, rng, grouped=group_by_length)
    plan = plan[:total]
    device = model_device(model)
    precision = mixed_precision(device, dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.0)
    schedule = get_cosine_schedule_with_warmup(optimizer, math.ceil(warmup * total), total)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == torch.float16)
    model.train()
    began = time.perf_counter()
    loss_sum = 0.0
    answer_tokens = fed = padded = 0
    last = float("nan")
    with progress(what, total=total, unit="steps") as phase:
        for batch in plan:
            inputs = _collate([examples[i] for i in batch], pad_id, device)
            with torch.autocast(device.type, dtype=precision) if precision is not None else contextlib.nullcontext():
                out = model(**inputs)
            scaler.scale(out.loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            last = float(out.loss.detach())
            counted = int((inputs["labels"][:, 1:] != IGNORE).sum())
            loss_sum += last * counted
            answer_tokens += counted
            fed += sum(lengths[i] for i in batch)
            padded += inputs["input_ids"].numel()
            phase.advance(note=f"loss {last:.3f}")
    model.eval()
    seconds = time.perf_counter() - began
    log.info("%s: %d steps, %d tokens in %.0f s (%.0f tokens/s)", what, total, fed, seconds, fed / max(seconds, 1e-9))
    return FitResult(
        steps=total,
        loss=loss_sum / max(answer_tokens, 1),
        last_loss=last,
        tokens=fed,
        padded_tokens=padded,
        seconds=seconds,
    )


def _collate(rows: Sequence[TokenizedExample], pad_id: int, device: Any) -> dict[str, Any]:
    """Right-padded input ids, their attention mask, and labels that keep only the answers' tokens."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long, device=device)
    for n, row in enumerate(rows):
        values = torch.tensor(row.input_ids, dtype=torch.long, device=device)
        ids[n, : len(row)] = values
        mask[n, : len(row)] = 1
        labels[n, row.prompt_length : len(row)] = values[row.prompt_length :]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
