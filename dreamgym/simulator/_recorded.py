"""How a trained experience model's recipe compares with a recipe now: from the training config and the template
its metadata records (``dreamgym_model.json``, written by :func:`~dreamgym.simulator.train_experience_model`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from dreamgym.simulator._sft import SimTrainConfig
from dreamgym.simulator._templates import TemplateConfig

__all__ = ["SAME_WEIGHTS", "as_recorded", "recipe_changes"]

SAME_WEIGHTS = ("activation_checkpointing",)
"""Training settings that change the time a build takes and not its weights (activation checkpointing recomputes
the same forward pass: bit-identical weights in ``tests/simulator/test_sft_loop.py``)."""


def as_recorded(config: Any) -> Any:
    """A dataclass config as a model's metadata and the results files record it (JSON; paths as strings)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def recipe_changes(
    recorded_config: Mapping[str, Any] | None,
    config: SimTrainConfig,
    *,
    recorded_template: Mapping[str, Any] | None = None,
    template: TemplateConfig | None = None,
) -> list[str]:
    """What differs between the recipe a model was trained with (its metadata's ``config`` and ``template``) and
    ``config`` / ``template``, one ``"name: recorded -> now"`` per setting; empty when it is the same recipe.

    A setting the record lacks (added since it was written) counts as its default value; settings that change
    only the time (:data:`SAME_WEIGHTS`) are not compared. No record at all is one change (``"config: not
    recorded"``). The template is compared only when ``template`` is given.
    """
    if recorded_config is None:
        changes = ["config: not recorded"]
    else:
        defaults = as_recorded(SimTrainConfig())
        # the scratch model's shape is a nested dict: a field it lacks counts as its default too
        scratch = {**defaults["scratch"], **(recorded_config.get("scratch") or {})}
        before = {**defaults, **recorded_config, "scratch": scratch}
        changes = _differences(before, as_recorded(config), skip=SAME_WEIGHTS)
    if template is not None:
        if recorded_template is None:
            changes.append("template: not recorded")
        else:
            now = as_recorded(template)
            changes += _differences({**as_recorded(TemplateConfig()), **recorded_template}, now, prefix="template.")
    return changes


def _differences(before: Mapping[str, Any], now: Mapping[str, Any], *, skip: tuple[str, ...] = (),
                 prefix: str = "") -> list[str]:  # fmt: skip
    out = []
    for key in sorted(now):  # a setting since removed has no say in what the recipe trains now
        if key in skip or before.get(key) == now.get(key):
            continue
        if isinstance(before.get(key), dict) and isinstance(now.get(key), dict):
            out += _differences(before[key], now[key], prefix=f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}: {before.get(key)!r} -> {now.get(key)!r}")
    return out
