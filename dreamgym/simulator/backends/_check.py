"""What a served model's server honours, and whether it answers as the same model in process: :func:`check_server`.

Servers differ: ``transformers serve`` samples only when the model's
generation config says so and keeps the stop string in its answers; vLLM and
SGLang sample as asked and take a structured-output regex, each under its own
field; a hosted endpoint may ignore ``seed``. ``dreamgym sim eval --parity N``
runs this check and prints its one table (``docs/guides/served-models.md``
says what to set for each server).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.protocols import ChatMessage, Sampling, TextBackend
from dreamgym.simulator.backends._openai import OpenAIBackend

__all__ = ["STRUCTURED_FIELDS", "ServerCheck", "check_server", "structured_fields"]

log = logging.getLogger(__name__)

STRUCTURED_FIELDS: Mapping[str, str] = {
    "vllm": "structured_outputs.regex",
    "vllm-guided": "guided_regex",
    "sglang": "regex",
}
"""The request field each server reads a structured-output regex from: vLLM 0.10.2 and later, earlier vLLM,
SGLang."""

_PROBE_PATTERN = "(yes|no)"
"""A form no experience model writes by itself: an answer in it says the server kept to the regex."""
_PROBE_SEEDS = (11, 12)


def structured_fields(option: str, pattern: str) -> dict[str, Any]:
    """The extra request fields that ask the server ``option`` (see :data:`STRUCTURED_FIELDS`) for ``pattern``.

    Raises:
        ConfigError: An unknown option.
    """
    if option not in STRUCTURED_FIELDS:
        raise ConfigError(f"structured output {option!r} is not one of {sorted(STRUCTURED_FIELDS)}")
    if option == "vllm":
        return {"structured_outputs": {"regex": pattern}}
    return {STRUCTURED_FIELDS[option]: pattern}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerCheck:
    """What :func:`check_server` found."""

    backend_id: str
    prompts: int
    """Prompts answered greedily by the server (and by the in-process model, where one was given)."""
    identical: int | None = None
    """Greedy answers identical to the in-process model's; ``None`` without one."""
    first_difference: str = ""
    """Where the first differing pair of answers parts (empty when all agree)."""
    samples: bool = False
    """Answers at temperature 1 with other seeds differed from the greedy one: the server samples when asked."""
    seed: bool | None = None
    """The same seed twice gave the same sampled answer; ``None`` when the server does not sample."""
    stop: str = "untested"
    """``honoured`` (the answer ends before the stop string), ``kept`` (it ends at the stop string but keeps it:
    dreamgym cuts it), ``ignored``, or ``untested`` (the greedy answer was too short to pick one from)."""
    structured: Mapping[str, str] = field(default_factory=dict)
    """Per structured-output option (:data:`STRUCTURED_FIELDS`): ``honoured``, ``ignored`` or ``rejected: ...``."""

    @property
    def identical_share(self) -> float | None:
        return None if self.identical is None or not self.prompts else self.identical / self.prompts

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "structured": dict(self.structured), "identical_share": self.identical_share}

    def rows(self) -> list[tuple[str, str, str]]:
        """The table: (what was checked, what the server did, what to set)."""
        rows: list[tuple[str, str, str]] = []
        if self.identical is not None:
            share = self.identical_share or 0.0
            fix = "" if self.identical == self.prompts else f"not the same model or prompt: {self.first_difference}"
            rows.append(("greedy answers as in process", f"{self.identical}/{self.prompts} ({share:.0%})", fix))
        else:
            rows.append(("greedy answers as in process", f"not compared ({self.prompts} answered)",
                         "give the model's directory to compare"))  # fmt: skip
        rows.append(("samples at temperature > 0", "yes" if self.samples else "no",
                     "" if self.samples else "retries repeat the first answer: make the server sample "
                     '(transformers serve: "do_sample": true in generation_config.json), '
                     "or --sim-attempts 1"))  # fmt: skip
        seed = "n/a (does not sample)" if self.seed is None else ("yes" if self.seed else "no")
        rows.append(("honours seed", seed, "" if self.seed is not False else "sampled runs will not repeat"))
        stop_fix = {"kept": "dreamgym cuts the answer at the stop string", "ignored": "answers run to the budget"}
        rows.append(("stop strings", self.stop, stop_fix.get(self.stop, "")))
        for option, result in self.structured.items():
            fix = f"--sim-structured {option} keeps answers to the form" if result == "honoured" else ""
            rows.append((f"structured output ({STRUCTURED_FIELDS[option]})", result, fix))
        return rows


async def check_server(
    served: OpenAIBackend,
    prompts: Sequence[Sequence[ChatMessage]],
    *,
    local: TextBackend | None = None,
    max_new_tokens: int = 64,
    structured: Sequence[str] = tuple(STRUCTURED_FIELDS),
) -> ServerCheck:
    """Ask ``served`` each prompt greedily, beside ``local`` (the same model in process), then probe what it honours.

    The probes use the first prompt: two answers at temperature 1 with other
    seeds (does it sample?), the first seed again (does it honour ``seed``?),
    a stop string picked from the middle of its greedy answer, and each
    structured-output option of ``structured`` with a regex no model writes
    by itself (an option the server refuses is ``rejected``, not an error).

    Raises:
        ConfigError: No prompts.
        BackendError: The server failed a plain greedy request.

    Example:
        >>> check = await check_server(OpenAIBackend(model=name, base_url=url), prompts, local=LocalBackend.load(name))
        >>> check.identical_share
        1.0
    """
    if not prompts:
        raise ConfigError("check_server needs at least one prompt")
    raw = _sibling(served, served.extra_body)
    try:
        greedy = Sampling(max_new_tokens=max_new_tokens)
        answers = [(await raw.complete(p, greedy)).text for p in prompts]
        identical, difference = None, ""
        if local is not None:
            mine = [(await local.complete(p, greedy)).text for p in prompts]
            identical = sum(a == b for a, b in zip(answers, mine, strict=True))
            difference = next((_parting(a, b) for a, b in zip(answers, mine, strict=True) if a != b), "")
        first = prompts[0]
        sampled = [
            (await raw.complete(first, Sampling(temperature=1.0, seed=s, max_new_tokens=max_new_tokens))).text
            for s in (*_PROBE_SEEDS, _PROBE_SEEDS[0])
        ]
        samples = len({answers[0], *sampled[:2]}) > 1
        stop = await _check_stop(raw, first, answers[0], max_new_tokens)
    finally:
        await raw.aclose()
    return ServerCheck(
        backend_id=served.backend_id,
        prompts=len(prompts),
        identical=identical,
        first_difference=difference,
        samples=samples,
        seed=(sampled[0] == sampled[2]) if samples else None,
        stop=stop,
        structured={option: await _check_structured(served, first, option) for option in structured},
    )


def _sibling(served: OpenAIBackend, extra_body: Mapping[str, Any]) -> OpenAIBackend:
    """A backend to the same server and model that shows answers as the server sends them (not cut at stops)."""
    return OpenAIBackend(model=served.model, base_url=served.base_url, timeout_s=served.timeout_s,
                         max_retries=served.max_retries, backoff_s=served.backoff_s, extra_body=extra_body,
                         cut_at_stop=False)  # fmt: skip


def _parting(served: str, local: str) -> str:
    at = next((n for n, (a, b) in enumerate(zip(served, local, strict=False)) if a != b), min(len(served), len(local)))
    return f"at character {at}: served {served[at : at + 30]!r}, in process {local[at : at + 30]!r}"


async def _check_stop(raw: OpenAIBackend, prompt: Sequence[ChatMessage], greedy: str, max_new_tokens: int) -> str:
    """Stop at a string from the middle of the greedy answer: where does the server's answer end?"""
    middle = len(greedy) // 2
    stop = greedy[middle : middle + 4]
    if middle < 1 or not stop.strip():
        return "untested"
    at = greedy.find(stop)
    text = (await raw.complete(prompt, Sampling(max_new_tokens=max_new_tokens, stop=(stop,)))).text
    if text.rstrip() == greedy[:at].rstrip():
        return "honoured"
    if text.startswith(greedy[:at] + stop) and len(text) < len(greedy):
        return "kept"
    return "ignored"


async def _check_structured(served: OpenAIBackend, prompt: Sequence[ChatMessage], option: str) -> str:
    probe = _sibling(served, {**served.extra_body, **structured_fields(option, _PROBE_PATTERN)})
    try:
        text = (await probe.complete(prompt, Sampling(max_new_tokens=8))).text
    except BackendError as exc:
        log.debug("structured output %s refused: %s", option, exc)
        return f"rejected: {_reason(exc)}"
    finally:
        await probe.aclose()
    return "honoured" if text.strip() in ("yes", "no") else "ignored"


def _reason(exc: BackendError) -> str:
    """The server's part of a refusal (after "failed with"), short enough for a table cell."""
    text = str(exc)
    text = text.split("failed with ", 1)[-1].split(" (", 1)[0]
    return text if len(text) <= 80 else text[:79] + "…"
