"""Settings of the trainer: one config, three modes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dreamgym.core.devices import check_device, check_dtype
from dreamgym.core.errors import ConfigError
from dreamgym.simulator import CurriculumConfig

__all__ = ["LoraSettings", "Mode", "TrainConfig"]

Mode = Literal["synthetic", "mixed", "sim2real"]
MODES: tuple[Mode, ...] = ("synthetic", "mixed", "sim2real")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraSettings:
    """LoRA adapters through PEFT (``TrainConfig.lora=None`` trains every weight)."""

    r: int = 16
    """The adapters' rank."""
    alpha: int = 32
    """The adapters' scale numerator (their update is scaled by alpha / r)."""
    dropout: float = 0.0
    """Kept at 0 by default: the policy scores its candidates with the model in training
    mode between updates, and dropout would make the recorded log-probabilities noise."""
    target_modules: tuple[str, ...] | str = "all-linear"
    """The modules that get adapters: names, or PEFT's ``all-linear``."""

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1:
            raise ConfigError(f"LoraSettings.r and alpha must be >= 1, got r={self.r}, alpha={self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"LoraSettings.dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """How :class:`~dreamgym.trainer.Trainer` trains, evaluates and saves.

    The mode decides each group's side (a group is never mixed):

    - ``synthetic``: every group on the simulator;
    - ``mixed``: ``real_share`` of the groups of each update real (spread evenly),
      or ``real_share_schedule`` over updates;
    - ``sim2real``: ``switch_at`` updates on the simulator, then every group real,
      continuing from the same weights (the checkpoint of update ``switch_at`` is kept).

    Example:
        >>> TrainConfig(mode="sim2real", updates=40, switch_at=30, group_size=4, output_dir=Path("runs/a"))
    """

    mode: Mode
    updates: int
    """Policy updates (optimizer steps) in all."""
    output_dir: Path
    group_size: int = 4
    """G: episodes per group, all from one start; advantages are normalised within it."""
    groups_per_update: int = 2
    """Groups (tasks) per update: each update trains on ``groups_per_update x group_size`` episodes."""
    learning_rate: float = 1e-5
    """The optimizer's learning rate (constant)."""
    beta: float = 0.0
    """KL coefficient against the starting weights (0: no reference model is kept)."""
    loss_type: str = "grpo"
    """TRL's GRPO loss variant (``grpo``, ``dapo``, ``dr_grpo``, ``bnpo``, ...)."""
    micro_batch_size: int = 0
    """Episodes per forward/backward pass within an update's one optimizer step: the update's episodes are taken
    shortest first, each pass cut to its own longest episode (:mod:`dreamgym.trainer._passes`), and their
    gradients summed (the same gradient as one pass for the ``grpo``, ``dapo`` and ``dr_grpo`` losses). Must divide
    ``groups_per_update x group_size``. 0: all of them in one pass, padded to the longest (TRL's way). On a CPU,
    a demo's multi-turn episodes (700 to 2,100 tokens, a third of the padded batch padding) took 7.4 s an update
    in one padded pass of 16 and 2.5 s one by one (``benchmarks/results/train_passes.json``)."""
    epsilon: float = 0.2
    """PPO-style clipping of the update ratio."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this norm."""
    resample_flat: int = 0
    """Dynamic sampling (DAPO's): a group that teaches nothing (its scorable rewards all equal,
    so every advantage is zero, or dropped) is replaced by a fresh group on the same side, a
    new draw of task and seed that avoids the tasks that came back flat in this update while
    others remain, up to this many rounds per update; a group still flat after them is kept.
    Replaced groups' transitions count as consumed (``real_steps``, ``synthetic_steps``) and
    their rewards still reach the task pool. 0 keeps every group as drawn."""
    step_cost: float = 0.0
    """Subtracted from an episode's outcome reward for each step it took, before the group's rewards are
    normalised: of two episodes with one outcome the shorter then scores higher, so a group whose episodes all
    succeed (or all fail) still teaches when their lengths differ, and a no-op taken on the way (a scroll on a page
    that does not scroll) costs something. The task pool and the logged success figures keep the outcome alone.
    The price: in a group where every episode fails, the shortest failure is now taught (giving up early, a Submit
    on an untouched form). 0 rewards the outcome alone; keep ``step_cost x max_steps`` well under 1, or a short
    failure outscores a long success."""
    anchor_weight: float = 0.0
    """Weight of a behaviour-cloning term added to each update's loss: the mean cross-entropy of the demonstrated
    label among the label tokens on ``anchor_batch`` demonstrations (``Trainer(anchor=...)``, an index policy's
    :func:`~dreamgym.trainer.demonstrations` on training seeds) drawn afresh for each update. It speaks for the
    tasks whose groups teach nothing (all won, so flat and resampled away) while GRPO moves the weights they share
    with the others (:mod:`dreamgym.trainer._anchor`). 0: GRPO's loss alone."""
    anchor_batch: int = 16
    """``anchor_weight``: demonstrations per update, split across its passes."""
    lora: LoraSettings | None = field(default_factory=LoraSettings)
    """LoRA adapters through PEFT; ``None`` trains every weight."""
    real_share: float = 0.25
    """``mixed``: the share of real groups."""
    real_share_schedule: tuple[tuple[int, float], ...] = ()
    """``mixed``: ``(from_update, share)`` pairs, in order; overrides ``real_share`` from each
    listed update on (e.g. ``((0, 0.1), (20, 0.5))``)."""
    switch_at: int = 0
    """``sim2real``: updates on the simulator before the switch to real groups."""
    sim_trust: float = 0.0
    """``mixed``: the simulator must have earned a task before it plays that task's groups. Real groups are
    then shadowed (the simulator predicts each real step beside it), and a group drawn synthetic is played on
    real pages instead (counted in ``gated_groups``) while the simulator's outcome accuracy on the task's last
    ``sim_trust_window`` shadowed *deciding* steps (the real episode ended, or either side paid a reward) is
    below this, or fewer than ``sim_trust_min_steps`` of them have been seen. A policy trained on a simulator
    learns whatever it pays for wrongly (a tiny simulator paid 1 for Submit on an untouched form, and the
    policy got worse on real pages); shadowing measures those answers on the states the policy visits now.
    0 turns the gate off. Generated (curriculum) tasks have no real pages and are never gated."""
    sim_trust_window: int = 32
    """``sim_trust``: how many of a task's latest shadowed deciding steps count."""
    sim_trust_min_steps: int = 8
    """``sim_trust``: shadowed deciding steps a task needs before its groups may be synthetic."""
    eval_every: int = 0
    """Evaluate on the held-out real tasks and seeds every N updates (0: only at the end, if any are given)."""
    eval_at_start: bool = True
    """Also evaluate before the first update (the "before" figure)."""
    save_every: int = 0
    """Checkpoint every N updates (0: only at the end; sim2real also saves at the switch). A run
    resumed after its last update trains no further."""
    sim_refit_every: int = 0
    """Refit the experience model on the grown store every N updates (0: never)."""
    curriculum: CurriculumConfig | None = None
    """Vary the highest-variance tasks into new (synthetic-only) ones; ``None`` keeps the task list."""
    curriculum_every: int = 5
    """Refresh the task pool from the recorded group rewards every N updates."""
    seed: int = 0
    """Seeds TRL, each update's task and seed draws, and the policy's sampling (from the command line)."""
    report_to: tuple[str, ...] = ("tensorboard",)
    """Loggers besides the JSON lines file (``metrics.jsonl``): any of TRL's ``report_to``
    (``tensorboard``, ``trackio``, ``wandb`` where installed), or ``()``. Each gets TRL's training figures and
    dreamgym's (evaluations under ``eval/``, with a table of example episodes; refits, curriculum, groups played,
    gated and dropped by reason, the simulator's shadow accuracy under ``train/``)."""
    device: str = "auto"
    """Where TRL trains the policy: ``auto`` (CUDA where torch sees a GPU, else the CPU), ``cpu`` or ``cuda``
    (the first GPU the process sees, each rank its own: pick one with ``CUDA_VISIBLE_DEVICES``); TRL moves the
    policy's model there."""
    dtype: str = "auto"
    """The precision of TRL's passes: ``auto`` or ``float32`` (the policy's weights' own), or ``bfloat16`` /
    ``float16``: mixed precision over the weights as they are (keep them float32 for ``float16``), on CUDA only."""

    def __post_init__(self) -> None:
        check_device(self.device, "TrainConfig.device", trl=True)
        check_dtype(self.dtype, "TrainConfig.dtype")
        if self.mode not in MODES:
            raise ConfigError(f"TrainConfig.mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for name in ("updates", "group_size", "groups_per_update"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ConfigError(
                f"TrainConfig.group_size must be >= 2, got {self.group_size}: GRPO's advantage is "
                "relative to the group, and a group of one learns nothing"
            )
        for name in ("eval_every", "save_every", "sim_refit_every", "switch_at", "resample_flat"):
            if getattr(self, name) < 0:
                raise ConfigError(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.curriculum_every < 1:
            raise ConfigError(f"TrainConfig.curriculum_every must be >= 1, got {self.curriculum_every}")
        if not 0.0 <= self.real_share <= 1.0:
            raise ConfigError(f"TrainConfig.real_share must be in [0, 1], got {self.real_share}")
        if self.mode == "sim2real" and not 0 < self.switch_at < self.updates:
            raise ConfigError(
                f"TrainConfig.switch_at must be between 1 and updates - 1 ({self.updates - 1}) in sim2real mode, "
                f"got {self.switch_at}"
            )
        if self.mode != "sim2real" and self.switch_at:
            raise ConfigError("TrainConfig.switch_at applies to sim2real mode only")
        last = -1
        for start, share in self.real_share_schedule:
            if start <= last or not 0.0 <= share <= 1.0:
                raise ConfigError(
                    "TrainConfig.real_share_schedule must list (from_update, share) with increasing updates "
                    f"and shares in [0, 1]; got {self.real_share_schedule}"
                )
            last = start
        if self.real_share_schedule and self.mode != "mixed":
            raise ConfigError("TrainConfig.real_share_schedule applies to mixed mode only")
        if not 0.0 <= self.sim_trust <= 1.0:
            raise ConfigError(f"TrainConfig.sim_trust must be in [0, 1], got {self.sim_trust}")
        if self.sim_trust and self.mode != "mixed":
            raise ConfigError("TrainConfig.sim_trust applies to mixed mode only (it plays gated groups for real)")
        if self.sim_trust_window < 1 or not 1 <= self.sim_trust_min_steps <= self.sim_trust_window:
            raise ConfigError(
                "TrainConfig.sim_trust_window must be >= 1 and sim_trust_min_steps between 1 and the window, got "
                f"{self.sim_trust_window} and {self.sim_trust_min_steps}"
            )
        if not 0.0 <= self.step_cost < 1.0:
            raise ConfigError(f"TrainConfig.step_cost must be in [0, 1), got {self.step_cost}")
        episodes = self.groups_per_update * self.group_size
        if self.micro_batch_size < 0 or (self.micro_batch_size and episodes % self.micro_batch_size):
            raise ConfigError(
                f"TrainConfig.micro_batch_size must divide the {episodes} episodes of an update "
                f"(groups_per_update x group_size), or be 0; got {self.micro_batch_size}"
            )
        if not (0.0 <= self.anchor_weight < math.inf) or self.anchor_batch < 1:
            raise ConfigError(
                f"TrainConfig.anchor_weight must be a finite number >= 0 and anchor_batch >= 1, got "
                f"{self.anchor_weight} and {self.anchor_batch}"
            )
        if self.learning_rate <= 0 or self.beta < 0:
            raise ConfigError("TrainConfig.learning_rate must be > 0 and beta >= 0")

    def real_share_at(self, update: int) -> float:
        """The share of real groups in update ``update`` (0-based)."""
        if self.mode == "synthetic":
            return 0.0
        if self.mode == "sim2real":
            return 0.0 if update < self.switch_at else 1.0
        share = self.real_share
        for start, scheduled in self.real_share_schedule:
            if update >= start:
                share = scheduled
        return share

    @property
    def needs_real(self) -> bool:
        """Whether any update runs real groups (the trust gate may play any group real)."""
        return self.sim_trust > 0 or any(self.real_share_at(update) > 0 for update in range(self.updates))

    @property
    def needs_synthetic(self) -> bool:
        return any(self.real_share_at(update) < 1 for update in range(self.updates))
