"""Loading a trained experience model the way it was trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamgym.core.protocols import ReplayStore, Sampling
from dreamgym.simulator._model import ExperienceModelConfig, LLMExperienceModel
from dreamgym.simulator._sft import read_metadata
from dreamgym.simulator._templates import TemplateConfig
from dreamgym.simulator.backends import LocalBackend

__all__ = ["load_experience_model"]


def load_experience_model(
    path: str | Path,
    *,
    store: ReplayStore | None = None,
    sampling: Sampling | None = None,
    max_attempts: int = 3,
    **backend_options: Any,
) -> LLMExperienceModel:
    """A local model directory as an experience model, with the template it was trained on.

    The template comes from the directory's ``dreamgym_model.json`` (written by
    ``dreamgym sim train``); a directory without one (an untrained chat model)
    gets the default template. ``backend_options`` go to :class:`LocalBackend`.

    Raises:
        ConfigError: The directory holds no model.
    """
    recorded = read_metadata(path).get("template")
    template = TemplateConfig(**recorded) if recorded else TemplateConfig()
    config = ExperienceModelConfig(
        template=template, sampling=sampling or Sampling(max_new_tokens=384), max_attempts=max_attempts
    )
    return LLMExperienceModel(LocalBackend.load(path, **backend_options), config=config, store=store)
