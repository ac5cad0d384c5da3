"""Loading a trained experience model the way it was trained, or reaching one a server serves."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import ReplayStore, Sampling
from dreamgym.simulator._judge import OutcomeJudge
from dreamgym.simulator._model import ExperienceModelConfig, LLMExperienceModel
from dreamgym.simulator._sft import read_metadata
from dreamgym.simulator._templates import TemplateConfig, answer_pattern
from dreamgym.simulator.backends import LocalBackend, OpenAIBackend, structured_fields

__all__ = ["STRUCTURED_OUTPUTS", "ServedModel", "StructuredOutput", "load_experience_model"]

StructuredOutput = Literal["none", "vllm", "vllm-guided", "sglang"]
STRUCTURED_OUTPUTS: frozenset[str] = frozenset({"none", "vllm", "vllm-guided", "sglang"})
"""The structured-output options :class:`ServedModel` passes to its server."""


@dataclass(frozen=True)
class ServedModel:
    """An experience model behind an OpenAI-compatible server (vLLM, SGLang, ``transformers serve``).

    Whatever the server runs must answer in :attr:`template`'s format (a model
    trained by ``dreamgym sim train`` and served, or a chat model prompted by
    the default template); its answers are parsed as a local model's are.
    """

    model: str
    """The model name the server serves."""
    url: str
    """The server's ``/v1`` URL."""
    max_new_tokens: int = 384
    stop: tuple[str, ...] = ()
    """Strings its answers end at (at most four)."""
    timeout_s: float = 120.0
    """Seconds a request may take once sent."""
    concurrency: int = 8
    """Requests in flight at once."""
    template: TemplateConfig = field(default_factory=TemplateConfig)
    structured: StructuredOutput = "none"
    """How the server is asked to keep its answers to the template's form (:func:`answer_pattern`): ``"vllm"``
    (``structured_outputs: {regex}``, vLLM 0.10.2 and later), ``"vllm-guided"`` (``guided_regex``, earlier vLLM),
    ``"sglang"`` (``regex``), or ``"none"`` (the server answers freely; the parser copes)."""
    attempts: int = 3
    """Attempts per prediction when answers are malformed; retries sample at a temperature above 0, so 1 (no
    retry) where the server does not sample (``docs/guides/served-models.md``)."""

    def __post_init__(self) -> None:
        if self.structured not in STRUCTURED_OUTPUTS:
            raise ConfigError(
                f"ServedModel.structured must be one of {sorted(STRUCTURED_OUTPUTS)}, not {self.structured!r}"
            )
        if self.attempts < 1:
            raise ConfigError(f"ServedModel.attempts must be >= 1 (1: no retry), not {self.attempts}")

    def request_fields(self) -> dict[str, Any]:
        """The extra JSON fields of every request: the server's structured-output option, where asked."""
        return {} if self.structured == "none" else structured_fields(self.structured, answer_pattern(self.template))


def load_experience_model(
    path: str | Path | ServedModel,
    *,
    store: ReplayStore | None = None,
    sampling: Sampling | None = None,
    max_attempts: int | None = None,
    judge: bool = True,
    **backend_options: Any,
) -> LLMExperienceModel:
    """A local model directory as an experience model, with the template it was trained on; or a served one.

    The template comes from the directory's ``dreamgym_model.json`` (written by
    ``dreamgym sim train``); a directory without one (an untrained chat model)
    gets the default template. ``backend_options`` go to :class:`LocalBackend`
    (a :class:`ServedModel` needs none: its server does the work). ``max_attempts`` defaults to 3, a served
    model's to its :attr:`ServedModel.attempts`.

    A directory that holds an outcome judge (:data:`~dreamgym.simulator.JUDGE_FILE`, fit by ``dreamgym sim
    judge`` or with the model) gives a model whose reward and end are the judge's; ``judge=False`` leaves it out.

    Raises:
        ConfigError: The directory holds no model, or a judge this version cannot read.
    """
    if isinstance(path, ServedModel):
        backend = OpenAIBackend(model=path.model, base_url=path.url, timeout_s=path.timeout_s,
                                max_concurrency=path.concurrency, extra_body=path.request_fields())  # fmt: skip
        sampling = sampling or Sampling(max_new_tokens=path.max_new_tokens, stop=path.stop)
        attempts = path.attempts if max_attempts is None else max_attempts
        served = ExperienceModelConfig(template=path.template, sampling=sampling, max_attempts=attempts)
        return LLMExperienceModel(backend, config=served, store=store)
    recorded = read_metadata(path).get("template")
    template = TemplateConfig(**recorded) if recorded else TemplateConfig()
    attempts = 3 if max_attempts is None else max_attempts
    config = ExperienceModelConfig(
        template=template, sampling=sampling or Sampling(max_new_tokens=384), max_attempts=attempts
    )
    outcome_judge = OutcomeJudge.load(Path(path)) if judge else None
    local = LocalBackend.load(path, **backend_options)
    return LLMExperienceModel(local, config=config, store=store, judge=outcome_judge)
