"""A behaviour-cloning anchor inside GRPO's updates (``TrainConfig.anchor_weight``).

GRPO moves the policy only on the tasks whose groups teach something: a group
whose episodes all won (or all lost) has every advantage zero. A task the
warm start already solves gives flat groups, which ``resample_flat`` replaces
with other draws, so nothing in the updates speaks for it while the other
tasks' gradients move the weights it shares with them; the demo's tiny policy
solved enter-password on 34 of 40 held-out seeds before training and on 9
after (``first_run.json`` at 74e4ef3). The anchor adds, to every update's loss,
``anchor_weight`` times the mean cross-entropy of the demonstrated label among
the label tokens (the softmax the policy draws from) on ``anchor_batch``
demonstrations drawn afresh for that update: InstructGPT's mix of the
pretraining loss into PPO (PPO-ptx), with the demonstrations in place of the
pretraining text. Only training seeds' demonstrations may be given; the draws
depend on the seed and the update alone, so a resumed run draws the same.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dreamgym.core.errors import ConfigError
from dreamgym.trainer._warm import Demonstration, last_logits

if TYPE_CHECKING:
    import torch

__all__ = ["Anchor"]


class Anchor:
    """Each update's anchor demonstrations, split across its passes, and their share of the loss."""

    def __init__(
        self,
        examples: Sequence[Demonstration],
        *,
        weight: float,
        batch: int,
        passes: int,
        pad_id: int,
        among: Sequence[int],
        seed: int,
    ) -> None:
        if not examples:
            raise ConfigError("TrainConfig.anchor_weight > 0 needs demonstrations to anchor to (Trainer(anchor=...))")
        if not among:
            raise ConfigError("the anchor scores an index policy's label tokens; this policy has none")
        self.examples = tuple(examples)
        self.weight = weight
        self.batch = batch
        self.passes = passes
        self.pad_id = pad_id
        self.among = tuple(among)
        self.seed = seed

    def rows(self, update: int) -> list[Demonstration]:
        """The demonstrations of update ``update`` (0-based): ``batch`` of them, without repeats while they last."""
        rng = random.Random(f"{self.seed}/anchor/{update}")
        if self.batch <= len(self.examples):
            return rng.sample(self.examples, self.batch)
        return [rng.choice(self.examples) for _ in range(self.batch)]

    def loss(self, model: Any, update: int, pass_index: int) -> tuple[torch.Tensor, float] | None:
        """The share of update ``update`` (0-based) that its pass ``pass_index`` (of ``passes``) carries, and the
        mean cross-entropy of that pass's rows; ``None`` when the pass has no rows (fewer rows than passes).

        The shares of an update's passes add up to ``weight`` times the mean cross-entropy over its rows, which is
        how TRL's ``grpo`` loss adds up its passes too.
        """
        import torch

        from dreamgym.agents import choice_logprobs

        mine = self.rows(update)[pass_index :: self.passes]
        if not mine:
            return None
        logits = last_logits(model, mine, self.pad_id)
        labels = torch.tensor([row.label for row in mine], device=logits.device)
        among = torch.tensor(self.among, dtype=torch.long, device=logits.device)
        cross_entropy = -choice_logprobs(logits, labels, among)
        return self.weight * cross_entropy.sum() / self.batch, float(cross_entropy.mean().detach())
