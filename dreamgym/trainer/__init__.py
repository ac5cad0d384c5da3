"""One trainer, three modes (synthetic, mixed, sim2real): multi-turn GRPO with LoRA through TRL.

- ``Trainer`` with ``TrainConfig``: GRPO over groups of episodes that the runtime
  plays on the simulator, on real pages, or both (see ``_trainer``'s docstring).
- ``Sides``: what a run plays on, opened in the trainer's event loop; ``ModelSlot``
  and ``sft_refit`` let it refit the experience model during training.
- ``evaluate``: success of a policy on held-out real tasks and seeds, with n and a 95% interval.
- ``tiny_index_policy`` and ``warm_start``: a ~1M-parameter index policy built from scratch, and
  behaviour cloning from demonstrations (``demonstrations``) before RL.
"""

from dreamgym.trainer._config import LoraSettings, Mode, TrainConfig
from dreamgym.trainer._evaluate import (
    EXAMPLE_COLUMNS,
    EvalExample,
    EvalResult,
    PairedComparison,
    SeedOutcome,
    TaskScore,
    evaluate,
    paired_comparison,
    wilson_interval,
)
from dreamgym.trainer._sides import ModelSlot, OpenSides, Refit, Sides, sft_refit
from dreamgym.trainer._tiny import TINY_POLICY, tiny_index_policy
from dreamgym.trainer._trainer import Trainer, TrainerState, TrainResult, latest_checkpoint
from dreamgym.trainer._warm import Demonstration, WarmStartConfig, WarmStartResult, demonstrations, warm_start

__all__ = [
    "EXAMPLE_COLUMNS",
    "TINY_POLICY",
    "Demonstration",
    "EvalExample",
    "EvalResult",
    "LoraSettings",
    "Mode",
    "ModelSlot",
    "OpenSides",
    "PairedComparison",
    "Refit",
    "SeedOutcome",
    "Sides",
    "TaskScore",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainerState",
    "WarmStartConfig",
    "WarmStartResult",
    "demonstrations",
    "evaluate",
    "latest_checkpoint",
    "paired_comparison",
    "sft_refit",
    "tiny_index_policy",
    "warm_start",
    "wilson_interval",
]
