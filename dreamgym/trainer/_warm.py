"""Behaviour cloning for an ``index`` policy: a warm start from demonstrations, before any RL.

Each demonstrated step becomes one example: the ids the policy would feed
its model on that turn (the episode so far, rebuilt from the steps'
content, with the page's listed choices) and the label token of the action
the demonstrator took among those choices. The loss is the cross-entropy of
that one token under the model's full softmax. The policy draws from that
softmax renormalised over its label tokens (``LocalPolicyConfig.labels_only``,
which GRPO then trains), whose cross-entropy is never above this one: the
warm start raises the label among the labels and the labels' share of the
vocabulary at once. Label accuracy is read as the greedy policy acts (the
likeliest label). An action matches a choice by name and arguments (its
label and raw text are cosmetic). Steps whose action is not among the page's
choices (or past the 64 labels) are skipped and counted.

The warm start runs before the trainer is built; afterwards only the GRPO
loss moves the weights.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dreamgym.agents import INDEX_TOKENS, LocalPolicy
from dreamgym.core.devices import model_device
from dreamgym.core.errors import ConfigError
from dreamgym.core.progress import progress
from dreamgym.core.types import Step, Task

__all__ = ["Demonstration", "WarmStartConfig", "WarmStartResult", "demonstrations", "warm_start"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmStartConfig:
    """How long and how hard behaviour cloning trains."""

    epochs: float = 2.0
    """Passes over the examples (a fraction trains on that share of one pass)."""
    learning_rate: float = 1e-3
    batch_size: int = 16
    seed: int = 0
    """Shuffles the examples."""
    lm_weight: float = 0.0
    """Weight of an auxiliary next-token loss on every id of each example (the prompt and the
    episode so far), added to the label's cross-entropy; 0 trains the label alone. For a model
    trained from scratch: predicting the page's own text teaches it to copy across the page (an
    element's name into its choice line, the goal's words), which matching the goal to a choice
    takes. On click-button the tiny policy's held-out label accuracy after 480 and 960 updates was
    0.43 and 0.40 with it against 0.23 and 0.33 without (best fixed label 0.25; 60 decisions;
    docs/findings.md)."""
    accuracy_examples: int | None = None
    """How many of the examples (drawn at ``seed``) :attr:`WarmStartResult.accuracy` is measured on; ``None``:
    all. A forward pass over every example costs about a third of one epoch's training (23 s of the demo's
    875 examples on 2 cores)."""

    def __post_init__(self) -> None:
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ConfigError(f"WarmStartConfig.epochs must be > 0, got {self.epochs}")
        if not (self.lm_weight >= 0 and math.isfinite(self.lm_weight)):
            raise ConfigError(f"WarmStartConfig.lm_weight must be a finite number >= 0, got {self.lm_weight}")
        if self.learning_rate <= 0 or self.batch_size < 1:
            raise ConfigError("WarmStartConfig.learning_rate must be > 0 and batch_size >= 1")
        if self.accuracy_examples is not None and self.accuracy_examples < 1:
            raise ConfigError(f"WarmStartConfig.accuracy_examples must be >= 1 or None, got {self.accuracy_examples}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Demonstration:
    """One demonstrated decision: the policy's input ids on that turn and the label id to answer."""

    ids: tuple[int, ...]
    label: int
    task_id: str
    episode_id: str
    step_index: int
    seed: int | None = None
    """The episode's seed (the trainer refuses to anchor to an evaluation seed's demonstrations)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmStartResult:
    """What a warm start did."""

    examples: int
    updates: int
    first_loss: float
    last_loss: float
    """Mean cross-entropy of the label over the first and last tenth of the updates (the auxiliary
    next-token loss left out)."""
    accuracy: float
    """Share of the examples whose label is the policy's most likely token afterwards (of
    ``accuracy_examples`` of them, drawn at the seed, when fewer than all)."""
    accuracy_examples: int
    """How many examples ``accuracy`` was measured on."""


def demonstrations(
    policy: LocalPolicy, episodes: Sequence[Sequence[Step]], tasks: Sequence[Task]
) -> tuple[list[Demonstration], int]:
    """The examples of ``episodes`` (each a demonstrator's steps) for ``policy``; and how many steps were skipped.

    Raises:
        ConfigError: The policy is not an ``index`` policy, or an episode's task is not among ``tasks``.
    """
    if policy.config.mode != "index":
        raise ConfigError(f"behaviour cloning trains an index policy's label token; {policy.policy_id} is not one")
    by_id = {task.task_id: task for task in tasks}
    found: list[Demonstration] = []
    skipped = 0
    for episode in episodes:
        steps = sorted(episode, key=lambda step: step.step_index)
        history: list[Step] = []
        for step in steps:
            task = by_id.get(step.task_id)
            if task is None:
                raise ConfigError(f"demonstration of {step.task_id!r}, which is not among the given tasks")
            keys = [(choice.name, choice.args) for choice in policy.choices(task, step.observation)]
            key = (step.action.name, step.action.args)  # labels and raw text are cosmetic
            if key in keys:
                index = keys.index(key)
                label = policy.turns.encode(INDEX_TOKENS[index])[0]
                ids = policy.input_ids(task, history, step.observation)
                found.append(
                    Demonstration(
                        ids=tuple(ids),
                        label=label,
                        task_id=step.task_id,
                        episode_id=step.episode_id,
                        step_index=step.step_index,
                        seed=step.seed,
                    )
                )
            else:
                skipped += 1
            history.append(msgspec.structs.replace(step, policy_tokens=None))
    return found, skipped


def warm_start(policy: LocalPolicy, examples: Sequence[Demonstration], config: WarmStartConfig) -> WarmStartResult:
    """Train ``policy``'s model in place on ``examples`` (cross-entropy of the label token); say so to its caches.

    Raises:
        ConfigError: There are no examples.
    """
    import torch

    if not examples:
        raise ConfigError("behaviour cloning needs at least one demonstration")
    model = policy.model
    rng = random.Random(config.seed)
    total = max(1, round(config.epochs * len(examples) / config.batch_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    try:
        batches: list[list[int]] = []
        with progress("warm start: clone the demonstrations", total=total, unit="updates") as phase:
            for _ in range(total):
                if not batches:
                    batches = _length_batches(examples, config.batch_size, rng)
                chosen = batches.pop()
                label_loss, text_loss = _losses(model, [examples[n] for n in chosen], policy.turns.eos_id,
                                                text=config.lm_weight > 0)  # fmt: skip
                optimizer.zero_grad()
                (label_loss + config.lm_weight * text_loss).backward()
                optimizer.step()
                losses.append(float(label_loss.detach()))
                phase.advance(note=f"label loss {losses[-1]:.2f}")
    finally:
        model.eval()
        policy.weights_changed()
    measured = list(examples)
    if config.accuracy_examples is not None and config.accuracy_examples < len(measured):
        measured = random.Random(f"{config.seed}/accuracy").sample(measured, config.accuracy_examples)
    accuracy = _accuracy(model, measured, policy.turns.eos_id, policy.choice_token_ids)
    tenth = max(1, len(losses) // 10)
    result = WarmStartResult(
        examples=len(examples),
        updates=total,
        first_loss=sum(losses[:tenth]) / tenth,
        last_loss=sum(losses[-tenth:]) / tenth,
        accuracy=accuracy,
        accuracy_examples=len(measured),
    )
    log.info("warm start: %d examples, %d updates, loss %.3f -> %.3f, label accuracy %.3f",
             result.examples, result.updates, result.first_loss, result.last_loss, result.accuracy)  # fmt: skip
    return result


def _length_batches(examples: Sequence[Demonstration], size: int, rng: random.Random) -> list[list[int]]:
    """One shuffled pass over ``examples`` in batches of similar lengths (padding to a batch's longest row
    costs as much as real ids, and an episode's late turns are several times its first)."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    window = size * 16
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda n: len(examples[n].ids))
        batches += [chunk[n : n + size] for n in range(0, len(chunk), size)]
    rng.shuffle(batches)
    return batches


def _batch(rows: Sequence[Demonstration], pad_id: int, device: Any) -> tuple[Any, Any]:
    """Rows right-padded into ids and an attention mask, on ``device``."""
    import torch

    width = max(len(row.ids) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for n, row in enumerate(rows):
        ids[n, : len(row.ids)] = torch.tensor(row.ids, device=device)
        mask[n, : len(row.ids)] = 1
    return ids, mask


def last_logits(model: Any, rows: Sequence[Demonstration], pad_id: int) -> Any:
    """The logits after each row's last id (rows right-padded, masked)."""
    import torch

    device = model_device(model)
    ids, mask = _batch(rows, pad_id, device)
    last = torch.tensor([len(row.ids) - 1 for row in rows], device=device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(rows), device=device), last].float()


def _losses(model: Any, rows: Sequence[Demonstration], pad_id: int, *, text: bool) -> tuple[Any, Any]:
    """The label's cross-entropy and (with ``text``) the mean next-token loss over the rows' ids."""
    import torch
    import torch.nn.functional as F

    device = model_device(model)
    ids, mask = _batch(rows, pad_id, device)
    last = torch.tensor([len(row.ids) - 1 for row in rows], device=device)
    labels = torch.tensor([row.label for row in rows], device=device)
    every = torch.arange(len(rows), device=device)
    if not text:
        logits = model(input_ids=ids, attention_mask=mask).logits
        return F.cross_entropy(logits[every, last].float(), labels), torch.zeros((), device=device)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    label_loss = F.cross_entropy(logits[every, last], labels)
    targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    text_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    return label_loss, text_loss


def _accuracy(
    model: Any, examples: Sequence[Demonstration], pad_id: int, among: Sequence[int] | None, batch: int = 32
) -> float:
    """The share of examples whose label is the greedy policy's answer: the likeliest of the ``among`` tokens (an
    index policy's labels, which it draws among), or of the whole vocabulary."""
    import torch

    right = 0
    ordered = sorted(examples, key=lambda row: len(row.ids))
    with torch.inference_mode():
        for start in range(0, len(ordered), batch):
            rows = ordered[start : start + batch]
            logits = last_logits(model, rows, pad_id)
            if among is not None:
                kept = torch.full_like(logits, float("-inf"))
                kept[:, list(among)] = logits[:, list(among)]
                logits = kept
            right += sum(int(int(logits[n].argmax()) == row.label) for n, row in enumerate(rows))
    return right / len(examples)
