"""One trainer, three modes (synthetic, mixed, sim2real): multi-turn GRPO with LoRA through TRL.

- ``Trainer`` with ``TrainConfig``: GRPO over groups of episodes that the runtime
  plays on the simulator, on real pages, or both (see ``_trainer``'s docstring).
- ``Sides``: what a run plays on, opened in the trainer's event loop; ``ModelSlot``
  and ``sft_refit`` let it refit the experience model during training.
- ``evaluate``: success of a policy on held-out real tasks and seeds, with n and a 95% interval.
"""

from dreamgym.trainer._config import LoraSettings, Mode, TrainConfig
from dreamgym.trainer._evaluate import EvalResult, TaskScore, evaluate, wilson_interval
from dreamgym.trainer._sides import ModelSlot, OpenSides, Refit, Sides, sft_refit
from dreamgym.trainer._trainer import Trainer, TrainerState, TrainResult, latest_checkpoint

__all__ = [
    "EvalResult",
    "LoraSettings",
    "Mode",
    "ModelSlot",
    "OpenSides",
    "Refit",
    "Sides",
    "TaskScore",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainerState",
    "evaluate",
    "latest_checkpoint",
    "sft_refit",
    "wilson_interval",
]
