"""The experience model's supervised loop: next-token loss on the answer, batches of like length, nothing else.

Why not TRL's ``SFTTrainer`` here: measured on the offline default's
examples on 2 CPU cores (``benchmarks/sim_build.py``), its loop ran the same
small model at about half the tokens per second of a bare forward and
backward, spending the rest on its chunked log-probability loss and per-step
bookkeeping, none of which a from-scratch model of a few million parameters
needs. This loop is what remains: the prompt and answer tokenized once, the
loss only on the answer's tokens (the prompt is context), AdamW with a cosine
schedule after a short warm-up and gradients clipped at 1 (the Trainer's
defaults). It trains whatever model it is given, a PEFT-wrapped one
included, on that model's device.

Three things make a step cheap without changing what it computes:

- **Micro-batches of like length.** A batch's examples, sorted by length,
  are fed in micro-batches of about one length (:func:`micro_batches`), each
  micro-batch's summed answer loss divided by the whole batch's answer
  tokens and the gradients added up before the optimizer steps: the same
  gradient as the padded batch (the mean over its answer tokens), without
  its padding. A random batch of 8 of the offline default's examples is
  more than a quarter padding, and on a CPU a padded batch also takes
  attention's masked path: fed whole, such batches ran at 0.6 of the tokens
  per second (``benchmarks/sim_build.py``).
- **Logits for the answer only.** Only the positions from the earliest
  answer of a micro-batch on get the output layer (``logits_to_keep``, where
  the model takes it): the answer is about a seventh of an example's tokens, and a
  small model's output layer over its whole vocabulary is a large share of
  its work.
- **A shared prefix once.** Where every example's prompt starts with the
  same tokens (a template's system message: a third of the offline
  default's tokens), each micro-batch runs that prefix once and its rows
  attend to its keys and values (a cache that keeps its gradient) instead of
  each row computing them again: the same outputs and gradients, the prefix's
  gradient the sum of its rows' (:func:`shared_prefix`; ``share_prefix``).

One thing changes what it computes, when asked: ``outcome_weight`` counts
each token of an example's weighted tail (:attr:`TokenizedExample.weighted_from`:
the experience model's ``<reward>`` and ``<done>``) that many times in the
loss and in the mean it is divided by. The outcome is two or three of an
answer's tens of tokens, and it is what a policy trained on the simulator
exploits when wrong.

Batches themselves are random (``group_by_length=False``) or of similar
length (``True``, as transformers' length-grouped sampler); grouping changes
which examples share a step, and on the offline default's data it cost
fidelity (``benchmarks/results/sim_ablation.json``).
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.core.devices import mixed_precision, model_device
from dreamgym.core.progress import progress

__all__ = [
    "MICRO_BATCH_TOKENS",
    "FitResult",
    "TokenizedExample",
    "fit",
    "length_grouped_batches",
    "micro_batches",
    "shared_prefix",
    "tokenize_example",
]

log = logging.getLogger(__name__)

IGNORE = -100
"""The label of a token the loss skips (the prompt's, the padding's)."""

MICRO_BATCH_TOKENS = 4096
"""Most tokens (padding included) a micro-batch holds; one longer example is a micro-batch of its own."""

_LIKE_LENGTH = 0.8
"""A micro-batch holds examples at least this share of its longest's length (a fifth of padding at most)."""

_SHORTEST_SHARED_PREFIX = 16
"""A shared prefix shorter than this is fed with each row (running it apart would save less than it costs)."""


@dataclass(frozen=True, slots=True)
class TokenizedExample:
    """One example's token ids: the prompt's first ``prompt_length``, then the answer's."""

    input_ids: tuple[int, ...]
    prompt_length: int
    weighted_from: int | None = None
    """Where the answer's weighted tail starts (:func:`fit`'s ``outcome_weight``); ``None``: no tail."""

    def __len__(self) -> int:
        return len(self.input_ids)

    def weight(self, outcome_weight: float) -> float:
        """How much the example's answer counts in a batch's mean: its tokens, the tail's ``outcome_weight`` each."""
        answer = len(self) - self.prompt_length
        if self.weighted_from is None or outcome_weight == 1.0:
            return float(answer)
        tail = len(self) - self.weighted_from
        return answer - tail + outcome_weight * tail


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """What a run of :func:`fit` did."""

    steps: int
    """Optimizer steps taken."""
    loss: float
    """Mean loss over the run's answer tokens, as the Trainer reports ``training_loss`` (with ``outcome_weight``,
    each tail token counted that many times)."""
    last_loss: float
    """Mean loss of the last step."""
    tokens: int
    """Tokens fed forward (padding excluded)."""
    padded_tokens: int
    """Tokens fed forward including padding."""
    seconds: float
    shared_prefix: int
    """Tokens every example starts with, run once per micro-batch (0: none shared, or ``share_prefix`` off)."""
    precision: str
    """What the passes ran in: the mixed precision's ``"bfloat16"`` / ``"float16"``, else the weights' own dtype
    (``"float32"``)."""


def tokenize_example(
    tokenizer: Any, prompt: list[dict[str, str]], completion: list[dict[str, str]], *, weight_from: str | None = None
) -> TokenizedExample:
    """The chat-templated prompt (with the assistant's opening) followed by the answer, and where the answer starts.

    The answer starts where the prompt alone and prompt + answer stop agreeing,
    as TRL's SFT tokenization does, so the two train on the same tokens.
    ``weight_from``: the answer's tokens from the last place its final message
    holds this text on are its weighted tail (:attr:`TokenizedExample.weighted_from`;
    where the text's first token merged with the one before, from that token).
    """
    prompt_ids = list(
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    full_ids = list(tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=False))
    shared = _agreeing(prompt_ids, full_ids)
    weighted_from = None
    content = completion[-1]["content"]
    at = content.rfind(weight_from) if weight_from else -1
    if at >= 0:
        head = [*completion[:-1], {**completion[-1], "content": content[:at]}]
        head_ids = list(tokenizer.apply_chat_template(prompt + head, tokenize=True, return_dict=False))
        weighted_from = max(_agreeing(head_ids, full_ids), shared)
    return TokenizedExample(input_ids=tuple(full_ids), prompt_length=shared, weighted_from=weighted_from)


def _agreeing(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


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


def micro_batches(
    lengths: Sequence[int], batch: Sequence[int], budget: int | None = MICRO_BATCH_TOKENS
) -> list[list[int]]:
    """A batch's indices split into micro-batches of like length: longest first, each micro-batch at most
    ``budget`` tokens padded and none of its examples shorter than :data:`_LIKE_LENGTH` of its longest.
    ``budget=None``: the batch whole, in one padded micro-batch."""
    if budget is None:
        return [list(batch)]
    parts: list[list[int]] = []
    for i in sorted(batch, key=lambda i: -lengths[i]):
        part = parts[-1] if parts else []
        if part and (len(part) + 1) * lengths[part[0]] <= budget and lengths[i] >= _LIKE_LENGTH * lengths[part[0]]:
            part.append(i)
        else:
            parts.append([i])
    return parts


def shared_prefix(examples: Sequence[TokenizedExample]) -> int:
    """How many first tokens all ``examples`` share within their prompts, short of each prompt's last token.

    The last prompt token stays with the rows: its position predicts the
    answer's first token, so every position the loss reads is a row's own.
    0 when fewer than :data:`_SHORTEST_SHARED_PREFIX` are shared.
    """
    if not examples:
        return 0
    first = examples[0].input_ids
    shared = min(e.prompt_length for e in examples) - 1
    for example in examples[1:]:
        ids = example.input_ids
        n = 0
        while n < shared and ids[n] == first[n]:
            n += 1
        shared = n
    return shared if shared >= _SHORTEST_SHARED_PREFIX else 0


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
    group_by_length: bool = False,
    micro_batch_tokens: int | None = MICRO_BATCH_TOKENS,
    share_prefix: bool = True,
    dtype: str = "auto",
    outcome_weight: float = 1.0,
    what: str = "train",
) -> FitResult:
    """Train ``model`` in place on ``examples`` (blocking), reported as a progress phase of optimizer steps.

    ``epochs`` may be fractional (the steps are rounded up); ``max_steps``
    (> 0) stops sooner. Each batch is fed in micro-batches of at most
    ``micro_batch_tokens`` (:func:`micro_batches`; ``None``: whole, padded),
    the gradient the batch's. ``share_prefix``: a prefix every example shares
    (:func:`shared_prefix`) runs once per micro-batch, where the model keeps a
    plain cache of keys and values (transformers' ``cache``).
    ``dtype`` ``bfloat16`` or ``float16`` runs the passes
    on CUDA in mixed precision (autocast over the weights, the loss scaled for
    ``float16``), ``bfloat16`` also on a CPU with bfloat16 units
    (:func:`~dreamgym.core.devices.mixed_precision`); otherwise they run in the
    weights' own dtype (:attr:`FitResult.precision` says which). ``outcome_weight``: each token of an example's
    weighted tail counts that many times (1: every answer token alike). Raises nothing of its own; a model that
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
    precision = mixed_precision(device, dtype, cpu=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.0)
    schedule = get_cosine_schedule_with_warmup(optimizer, math.ceil(warmup * total), total)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == torch.float16)
    keeps_logits = _takes_logits_to_keep(model)
    prefix = shared_prefix(examples) if share_prefix else 0
    if prefix and not _caches_plainly(model, examples[0].input_ids[:prefix], device):
        prefix = 0
    model.train()
    began = time.perf_counter()
    loss_sum = 0.0
    answer_tokens = 0.0  # weighted (outcome_weight)
    fed = padded = 0
    last = float("nan")
    with progress(what, total=total, unit="steps") as phase:
        for batch in plan:
            counted = sum(examples[i].weight(outcome_weight) for i in batch)
            summed = 0.0
            for part in micro_batches(lengths, batch, micro_batch_tokens):
                inputs = _collate([examples[i] for i in part], pad_id, device, outcome_weight)
                with (
                    torch.autocast(device.type, dtype=precision) if precision is not None else contextlib.nullcontext()
                ):
                    loss = _answer_loss(model, inputs, keeps_logits, prefix)
                scaler.scale(loss / counted).backward()
                summed += float(loss.detach())
                padded += inputs["input_ids"].numel()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            last = summed / max(counted, 1)
            loss_sum += summed
            answer_tokens += counted
            fed += sum(lengths[i] for i in batch)
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
        shared_prefix=prefix,
        precision=str(precision or next(model.parameters()).dtype).removeprefix("torch."),
    )


def _takes_logits_to_keep(model: Any) -> bool:
    """Whether the model can compute logits for its last positions only (transformers' ``logits_to_keep``)."""
    return _takes(model, "logits_to_keep")


def _takes(model: Any, argument: str) -> bool:
    """Whether the model's forward (under a PEFT wrapper, the wrapped model's) names ``argument``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return argument in inspect.signature(inner.forward).parameters


def _caches_plainly(model: Any, prefix: Sequence[int], device: Any) -> bool:
    """Whether the model keeps its keys and values in a plain full-attention cache (transformers' ``cache``, every
    layer a ``DynamicLayer``): only then do rows attend to a prefix run apart as they would to their own
    (a sliding window, a recurrent state or an older cache argument: the prefix is fed with each row)."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if not _takes(model, "cache"):
        return False
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=True).cache
    layers = list(getattr(cache, "layers", None) or ())
    return isinstance(cache, DynamicCache) and bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _answer_loss(model: Any, inputs: dict[str, Any], keeps_logits: bool, prefix: int = 0) -> Any:
    """The micro-batch's next-token loss summed over its answers' tokens.

    Logits are kept from the first position that predicts an answer token on
    (every row's answer ends its row; a row's prompt before that point only
    conditions), so the output layer runs on little more than the answers.
    ``prefix``: the rows' first ``prefix`` tokens are the same (:func:`shared_prefix`); they run once, as a cache
    the rows attend to and whose gradient sums theirs.
    """
    import torch.nn.functional as F

    labels = inputs["labels"][:, prefix:]
    width = labels.shape[1]
    answered = (labels != IGNORE).any(dim=0).nonzero()
    start = max(int(answered[0]) - 1, 0) if len(answered) and keeps_logits else 0  # predicts the first answer token
    extra: dict[str, Any] = {"logits_to_keep": width - start} if keeps_logits else {}
    if prefix:
        extra["cache"] = _prefix_cache(model, inputs["input_ids"][:1, :prefix], len(labels), keeps_logits)
    ids = inputs["input_ids"][:, prefix:]
    logits = model(input_ids=ids, attention_mask=inputs["attention_mask"], **extra).logits
    predicted = logits[:, :-1]  # position p predicts token p + 1
    targets = labels[:, start + 1 :].reshape(-1)
    flat = predicted.reshape(-1, predicted.shape[-1]).float()
    if "weights" not in inputs:
        return F.cross_entropy(flat, targets, ignore_index=IGNORE, reduction="sum")
    losses = F.cross_entropy(flat, targets, ignore_index=IGNORE, reduction="none")  # 0 where ignored
    return (losses * inputs["weights"][:, prefix + start + 1 :].reshape(-1)).sum()


def _prefix_cache(model: Any, prefix_ids: Any, rows: int, keeps_logits: bool) -> Any:
    """The shared prefix run once: each layer's keys and values, as a cache of ``rows`` rows that keeps the graph
    (the rows' gradients flow back through it, summed)."""
    from transformers import DynamicCache

    extra = {"logits_to_keep": 1} if keeps_logits else {}
    cache = model(input_ids=prefix_ids, use_cache=True, **extra).cache
    layers = [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers]
    return DynamicCache(ddp_cache_data=layers)


def _collate(rows: Sequence[TokenizedExample], pad_id: int, device: Any, outcome_weight: float = 1.0) -> dict[str, Any]:
    """Right-padded input ids, their attention mask, and labels that keep only the answers' tokens; with an
    ``outcome_weight`` other than 1 and a row with a weighted tail, each label's weight (``weights``)."""
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
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if outcome_weight != 1.0 and any(row.weighted_from is not None for row in rows):
        weights = torch.ones((len(rows), width), dtype=torch.float32, device=device)
        for n, row in enumerate(rows):
            if row.weighted_from is not None:
                weights[n, row.weighted_from : len(row)] = outcome_weight
        batch["weights"] = weights
    return batch
