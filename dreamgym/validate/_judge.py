"""The paper's rubric, scored by an LLM judge on an OpenAI-compatible endpoint (optional).

A judge reads one real episode at a time: the task, the first page, and for
each step the action, what really changed and what the model predicted
changed (teacher-forced predictions, as line diffs), with the real and the
predicted reward and action errors. It scores the predictions 0–2 on each
criterion (higher is better for all five, hallucination included: 2 means
nothing invented) and answers with one JSON object. An answer without the
five integer scores is counted in ``unusable`` and left out of the means.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import anyio

from dreamgym.core.errors import BackendError, ModelOutputError, StateFormatError
from dreamgym.core.protocols import ChatMessage, Sampling, TextBackend
from dreamgym.core.state import diff_states
from dreamgym.validate._outcomes import StepOutcome

__all__ = ["RUBRIC", "JudgeSummary", "judge_episodes", "parse_rubric", "rubric_messages"]

RUBRIC = ("causal_consistency", "diversity", "informativeness", "hallucination", "failure_feedback")
"""The criteria, in the order the judge is asked for them."""

_SYSTEM = """You judge a simulator of web pages against reality. For each step of an episode you see the agent's action,
what really changed on the page and what the simulator predicted changed, with rewards and action errors.
Score the simulator's predictions over the whole episode, 0 (bad), 1 (partly) or 2 (good), on:
- causal_consistency: predicted changes follow from the actions, as the real ones do
- diversity: predictions differ where the real outcomes differ, instead of repeating one answer
- informativeness: predicted pages carry the information the agent needs next
- hallucination: 2 when nothing is invented, 0 when elements or text appear that the real page lacks
- failure_feedback: failed or useless actions get clear feedback (an error, no change, reward 0)
Answer with one JSON object and nothing else, e.g.
{"causal_consistency": 2, "diversity": 1, "informativeness": 2, "hallucination": 2, "failure_feedback": 1}"""

MAX_PAGE_CHARS = 1500
MAX_DIFF_LINES = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeSummary:
    """Mean rubric scores (0–2) over the ``n`` episodes the judge scored."""

    judge_id: str
    n: int
    unusable: int
    """Episodes whose judgement had no usable scores (bad answer or backend failure)."""
    scores: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def rubric_messages(outcomes: Sequence[StepOutcome]) -> list[ChatMessage]:
    """The judge's prompt for one episode's teacher-forced outcomes (in step order)."""
    first = outcomes[0].step
    lines = [f"Task: {first.observation.goal or first.task_id}", "First page:", _cut(first.observation.state)]
    for outcome in outcomes:
        step, prediction = outcome.step, outcome.prediction
        lines.append(f"Step {step.step_index + 1}: {step.action}")
        lines.append(f"real: reward {step.reward:g}, {'ended' if step.terminated else 'continues'}")
        if step.next_observation.last_action_error:
            lines.append(f"real error: {step.next_observation.last_action_error}")
        lines.extend(_changes("real changes", step.observation.state, step.next_observation.state))
        if prediction is None:
            lines.append("simulator: no usable answer")
            continue
        ended = "ended" if prediction.terminated else "continues"
        lines.append(f"simulator: reward {prediction.reward:g}, {ended}")
        if prediction.observation.last_action_error:
            lines.append(f"simulator error: {prediction.observation.last_action_error}")
        lines.extend(_changes("simulator changes", step.observation.state, prediction.observation.state))
    return [ChatMessage(role="system", content=_SYSTEM), ChatMessage(role="user", content="\n".join(lines))]


def parse_rubric(text: str) -> dict[str, int]:
    """The five scores from a judge's answer (the first JSON object in it).

    Raises:
        ModelOutputError: No JSON object, a criterion missing, or a score not 0, 1 or 2.
    """
    match = re.search(r"\{.*?\}", text, re.DOTALL)
    if match is None:
        raise ModelOutputError(f"the judge's answer holds no JSON object: {text[:200]!r}")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise ModelOutputError(f"the judge's JSON does not parse: {exc}") from exc
    scores = {}
    for name in RUBRIC:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value not in (0, 1, 2):
            raise ModelOutputError(f"the judge gave {name}={value!r}; each score must be 0, 1 or 2")
        scores[name] = int(value)
    return scores


async def judge_episodes(
    backend: TextBackend,
    episodes: Sequence[Sequence[StepOutcome]],
    *,
    sampling: Sampling | None = None,
    concurrency: int = 4,
) -> JudgeSummary:
    """Rubric scores of each episode's predictions, averaged (see the module docstring)."""
    sampling = sampling or Sampling(temperature=0.0, max_new_tokens=200)
    results: list[dict[str, int] | None] = [None] * len(episodes)
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(n: int, outcomes: Sequence[StepOutcome]) -> None:
        async with limiter:
            try:
                completion = await backend.complete(rubric_messages(outcomes), sampling)
                results[n] = parse_rubric(completion.text)
            except (ModelOutputError, BackendError):
                return

    async with anyio.create_task_group() as group:
        for n, outcomes in enumerate(episodes):
            if outcomes:
                group.start_soon(one, n, outcomes)
    usable = [r for r in results if r is not None]
    means = {name: round(statistics.fmean(r[name] for r in usable), 4) for name in RUBRIC} if usable else {}
    return JudgeSummary(judge_id=backend.backend_id, n=len(usable), unusable=len(episodes) - len(usable), scores=means)


def _cut(state: str) -> str:
    return state if len(state) <= MAX_PAGE_CHARS else state[:MAX_PAGE_CHARS] + "\n(... cut)"


def _changes(label: str, before: str, after: str) -> list[str]:
    try:
        diff = diff_states(before, after).split("\n")
    except StateFormatError:
        return [f"{label}: (unreadable)"]
    if diff == [""]:
        return [f"{label}: (none)"]
    shown = diff[:MAX_DIFF_LINES]
    more = [f"(... {len(diff) - MAX_DIFF_LINES} more lines)"] if len(diff) > MAX_DIFF_LINES else []
    return [f"{label}:", *shown, *more]
