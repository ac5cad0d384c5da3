"""The trainer's own figures through TRL's loggers: every backend of ``report_to`` gets them.

TRL's trainer logs its training figures to the integrations named in
``report_to`` (TensorBoard, wandb, trackio, ...) through its callbacks'
``on_log``. dreamgym's figures — evaluations, refits, the curriculum, the
groups played and dropped by reason, the simulator's shadow accuracy — go
the same way (:func:`relay`), so a run reads as one in any tracker.
Transformers files a key ``eval_x`` under ``eval/x`` and any other key ``k``
under ``train/k``; :func:`tracker_key` writes evaluation figures so they land
under ``eval/``. A table (an evaluation's example episodes) goes to each
backend in its own form (:func:`relay_table`): a ``Table`` for wandb and
trackio, a Markdown text for TensorBoard.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["close_writers", "relay", "relay_table", "tracker_key"]


def tracker_key(name: str) -> str:
    """The key that transformers' loggers file under ``name``: ``eval/x`` is sent as ``eval_x``."""
    return "eval_" + name.removeprefix("eval/") if name.startswith("eval/") else name


def relay(grpo: Any, metrics: Mapping[str, Any]) -> None:
    """Send the finite numbers of ``metrics`` to every ``report_to`` backend of ``grpo`` (TRL's trainer), at its
    current step. Other values (ids, text) stay in ``metrics.jsonl``."""
    numbers = {
        tracker_key(name): value
        for name, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }
    if not numbers or not _backends(grpo):
        return
    _before_training(grpo)
    grpo.callback_handler.on_log(grpo.args, grpo.state, grpo.control, numbers)


def relay_table(grpo: Any, name: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A table to every backend that draws one (wandb, trackio), and as Markdown text to TensorBoard."""
    from transformers.integrations.integration_utils import TensorBoardCallback, TrackioCallback, WandbCallback

    if not rows or not _backends(grpo):
        return
    _before_training(grpo)
    step = grpo.state.global_step
    for callback in grpo.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback):
            if callback.tb_writer is None:
                callback._init_summary_writer(grpo.args)  # type: ignore[no-untyped-call]
            if callback.tb_writer is not None:
                callback.tb_writer.add_text(name, _markdown(columns, rows), step)
                callback.tb_writer.flush()
        elif isinstance(callback, WandbCallback) and callback._wandb is not None and callback._initialized:
            table = callback._wandb.Table(columns=list(columns), data=[list(row) for row in rows])
            callback._wandb.log({name: table, "train/global_step": step})
        elif isinstance(callback, TrackioCallback) and callback._initialized and hasattr(callback._trackio, "Table"):
            table = callback._trackio.Table(columns=list(columns), data=[list(row) for row in rows])
            callback._trackio.log({name: table, "train/global_step": step})


def close_writers(grpo: Any) -> None:
    """Close the TensorBoard writer that figures logged after training reopened (TRL closes its own at the end)."""
    from transformers.integrations.integration_utils import TensorBoardCallback

    if grpo is None:
        return
    for callback in grpo.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
            callback.tb_writer.close()
            callback.tb_writer = None


def _backends(grpo: Any) -> bool:
    return grpo is not None and bool(grpo.args.report_to) and grpo.args.report_to != ["none"]


def _before_training(grpo: Any) -> None:
    """Before TRL's loop begins (the evaluation at update 0), TensorBoard's callback has no directory yet: give it
    the one it would choose at the start of training, so nothing lands in the working directory."""
    from transformers.integrations.integration_utils import TensorBoardCallback, default_logdir

    for callback in grpo.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(grpo.args.output_dir, default_logdir())


def _markdown(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)
