"""The reasoning experience model: a prompt template, a text backend, a parser and a call cache.

:class:`LLMExperienceModel` turns an :class:`~dreamgym.core.protocols.ExperienceQuery`
into chat messages (``_templates``), asks a :class:`~dreamgym.core.protocols.TextBackend`,
and parses the answer (``_parse``). A malformed answer is asked again, up to
``max_attempts`` in all; the first attempt samples as configured, retries
sample at ``retry_temperature`` with a new seed (a greedy retry would repeat
the same answer). When every attempt fails, :class:`ModelOutputError` says why,
and :class:`~dreamgym.simulator.SimulatedEnv` ends the episode as truncated.
A sampled retry that comes back with the text of the attempt before it is
counted (``repeated_retries``) and, for a served model, warned about once
(:class:`~dreamgym.simulator.backends.RetryWatch`): its server does not sample.

Call cache: with a store, every answer is kept in the store's ``cache``
database under ``sha256(backend_id, template_id, messages, sampling, seed)``.
``backend_id`` names the weights (a hash of them for local models), so a
cached run with the same model, template, seeds and policy actions replays
byte-identical synthetic trajectories; a retrained model misses the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, replace

import msgspec

from dreamgym.core.errors import ConfigError, ModelOutputError
from dreamgym.core.protocols import (
    ChatMessage,
    Completion,
    ExperienceQuery,
    Prediction,
    ReplayStore,
    Sampling,
    TextBackend,
)
from dreamgym.core.state import parse_state
from dreamgym.core.types import Observation, Task
from dreamgym.simulator._judge import OutcomeJudge
from dreamgym.simulator._parse import ParsedAnswer, parse_answer, parse_initial_answer
from dreamgym.simulator._rules import rule_writes_page
from dreamgym.simulator._templates import TemplateConfig
from dreamgym.simulator.backends._retries import RetryWatch

__all__ = ["ExperienceModelConfig", "ExperienceModelStats", "LLMExperienceModel", "call_cache_key"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperienceModelConfig:
    """How the experience model asks its backend."""

    template: TemplateConfig = field(default_factory=TemplateConfig)
    """The prompt template and its switches (history, retrieval, reasoning, output form)."""
    sampling: Sampling = field(default_factory=lambda: Sampling(max_new_tokens=512))
    """Sampling of the first attempt; greedy by default."""
    max_attempts: int = 3
    """Attempts per prediction when answers are malformed (1 = no retry)."""
    retry_temperature: float = 0.7
    """Temperature of the retries, so that they can differ from the first answer."""
    initial_max_new_tokens: int = 1024
    """Token budget of the initial-page prompt (a whole page, not a diff)."""
    rule_pages: bool = True
    """With a judge: when the first answer is malformed, repaired (a diff line that named no page line, dropped
    or read by its id: a garbled line read so removes its element) or steered (``Completion.steered``: kept to
    a diff that applies against the model's own choice) and the action is one the simulator's rules
    write the page for (a ``type`` into a field, a ``select``, a click on a checkbox or radio button:
    :func:`~dreamgym.simulator.rule_writes_page`), take the page as it was (the rules then write the change) and
    the judge's outcome, instead of retrying. Counted in ``rule_pages``."""
    copy_page_lines: bool = True
    """Ask the backend to keep the answer to a diff that applies to the page (``Sampling.copy_lines``, the page
    the action was taken on). The local backend steers its decoding so
    (:class:`~dreamgym.simulator.backends.LocalBackend`): removal and context lines are copies of page lines the
    diff can still reach, an added line is a state line and one of an element the page has keeps that element's
    role and name, and the reward and end follow in the template's tags. A small model that garbles a line it
    copies writes one of the page's instead, and its first answer applies. Replayed open loop on validation seeds
    (``benchmarks/results/open_loop_outcomes.json``, arm ``judge+copy`` against ``judge``), every first answer
    applied, with the judge's outcomes as they were without it (the check rule keeps the boxes the model's
    applied diffs used to mark or drop wrongly). Servers are not told, so a served model's answers are the same
    with it on or off (:func:`~dreamgym.simulator.answer_pattern` keeps a constrained server to the form). The
    call cache keys on the lines. ``False`` decodes unconstrained."""
    salvage: bool = True
    """When every attempt's diff fails to apply, keep the first answer whose diff lines that
    can be placed make a valid page (the rest dropped; see ``_parse``) instead of failing the
    step. ``False`` ends such a step as truncated (``model_output``)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("ExperienceModelConfig.max_attempts must be >= 1")


@dataclass(slots=True)
class ExperienceModelStats:
    """Counters of one model's calls (``sim/...`` metrics)."""

    predictions: int = 0
    calls: int = 0
    cached_calls: int = 0
    malformed_answers: int = 0
    clean_first_answers: int = 0
    """Predictions whose first answer applied as it was written (no retry, no line dropped or read by its id)."""
    repaired_answers: int = 0
    """Answers whose diff named page lines that do not exist; those lines were dropped."""
    salvaged_answers: int = 0
    """Predictions taken, after every attempt failed, from an answer whose diff only partly applied."""
    steered_answers: int = 0
    """First answers the backend kept to a diff that applies against the model's own choice
    (``Completion.steered``): they apply, but the model was writing a line that would not have."""
    rule_pages: int = 0
    """Predictions whose first answer was malformed, repaired or steered and whose page the rules wrote
    (``rule_pages``)."""
    failed_predictions: int = 0
    """Predictions whose every attempt was malformed (each ends an episode as truncated)."""
    repeated_retries: int = 0
    """Retries sampled at a temperature above 0 that came back with the text of the attempt before them: a
    served model whose server does not sample (see :class:`~dreamgym.simulator.backends.RetryWatch`)."""

    def as_metrics(self) -> dict[str, int]:
        return {f"sim/{key}": value for key, value in asdict(self).items()}


class _Cached(msgspec.Struct, frozen=True):
    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steered: int = 0


def _derive_seed(*parts: int | None) -> int:
    """A stable 31-bit seed from the run's, the episode's, the depth and the attempt."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big") & 0x7FFFFFFF


def call_cache_key(backend_id: str, template_id: str, messages: list[ChatMessage], sampling: Sampling) -> bytes:
    """The cache key of one model call (32 bytes)."""
    payload = {
        "backend": backend_id,
        "template": template_id,
        "messages": [[m.role, m.content] for m in messages],
        "sampling": asdict(sampling),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).digest()


class LLMExperienceModel:
    """An :class:`~dreamgym.core.protocols.ExperienceModel` on any text backend.

    Args:
        backend: The chat model.
        config: Template, sampling and retries.
        store: Where the call cache lives; ``None`` disables caching.
        judge: Where given, the reward and end of every prediction are the judge's
            (:class:`~dreamgym.simulator.OutcomeJudge`, from the page the action was taken on), not the
            model's; the model writes the page. ``model_id`` then names both.

    Example:
        >>> model = LLMExperienceModel(LocalBackend.load(path), store=store)
        >>> prediction = await model.predict(query)
    """

    def __init__(
        self,
        backend: TextBackend,
        *,
        config: ExperienceModelConfig | None = None,
        store: ReplayStore | None = None,
        judge: OutcomeJudge | None = None,
    ) -> None:
        self.backend = backend
        self.judge = judge
        self.config = config or ExperienceModelConfig()
        self.store = store
        self.stats = ExperienceModelStats()
        self.retries = RetryWatch(backend_id=backend.backend_id, base_url=getattr(backend, "base_url", None))

    @property
    def model_id(self) -> str:
        if self.judge is None:
            return self.backend.backend_id
        return f"{self.backend.backend_id}+judge@{self.judge.judge_id}"

    @property
    def template_id(self) -> str:
        return self.config.template.template_id

    async def predict(self, query: ExperienceQuery) -> Prediction:
        """Predict the next observation, reward and end for ``query``.

        Raises:
            ModelOutputError: Every attempt's answer was malformed.
            BackendError: The backend failed.
        """
        self.stats.predictions += 1
        messages, alias = self.config.template.prompt(query)
        current = query.observation
        errors: list[str] = []
        answers: list[str] = []
        copy_lines = self._copy_lines(alias.text(current.state))  # the answer is written against the shown page
        for attempt in range(self.config.max_attempts):
            sampling = replace(self._sampling(query.seed, len(query.history), attempt), copy_lines=copy_lines)
            completion = await self._call(messages, sampling)
            text = alias.text(completion.text)  # in the page's own ids
            if answers:
                self._watch_retry(answers[-1], text, completion, sampling)
            try:
                answer = parse_answer(text, current.state)
            except ModelOutputError as exc:
                self.stats.malformed_answers += 1
                errors.append(f"attempt {attempt + 1}: {exc}")
                answers.append(text)
                log.debug("malformed experience-model answer (%s): %r", exc, text[:200])
                if attempt == 0 and self._rule_page(query):
                    return self._rule_prediction(query, text)
                continue
            repaired = bool(answer.dropped_lines or answer.anchored_lines)
            steered = attempt == 0 and completion.steered > 0
            self.stats.repaired_answers += repaired
            self.stats.steered_answers += steered
            self.stats.clean_first_answers += attempt == 0 and not repaired and not steered
            if (repaired or steered) and attempt == 0 and self._rule_page(query):
                return self._rule_prediction(query, text)
            return self._prediction(answer, query, text)
        if self.config.salvage:
            for text in answers:  # the last resort: the first answer whose placeable diff lines make a page
                try:
                    answer = parse_answer(text, current.state, salvage=True)
                except ModelOutputError:
                    continue
                self.stats.salvaged_answers += 1
                return self._prediction(answer, query, text, salvaged=True)
        self.stats.failed_predictions += 1
        raise ModelOutputError(f"{self.model_id} gave no usable answer in {len(errors)} attempts: {'; '.join(errors)}")

    def _copy_lines(self, page: str) -> tuple[str, ...]:
        """The page's lines, for a backend that keeps a diff's copied lines to them (``copy_page_lines``)."""
        if not self.config.copy_page_lines or self.config.template.output != "diff":
            return ()
        return tuple(line for line in page.split("\n") if line.strip())

    def _rule_page(self, query: ExperienceQuery) -> bool:
        return self.judge is not None and self.config.rule_pages and rule_writes_page(query)

    def _rule_prediction(self, query: ExperienceQuery, raw: str) -> Prediction:
        """The page as it was (the rules write the action's change onto it) with the judge's outcome."""
        self.stats.rule_pages += 1
        unchanged = ParsedAnswer(state=parse_state(query.observation.state), reward=0.0, done=False)
        return self._prediction(unchanged, query, raw)

    def _prediction(
        self, answer: ParsedAnswer, query: ExperienceQuery, raw: str, *, salvaged: bool = False
    ) -> Prediction:
        current = query.observation
        reward, done = answer.reward, answer.done
        if self.judge is not None:
            reward, done = self.judge.outcome(current.goal or query.task.instruction, current.state, query.action)
        observation = Observation(
            state=answer.state.render(),
            url=current.url,
            tabs=current.tabs,
            active_tab=current.active_tab,
            goal=current.goal,
            last_action_error=answer.error,
        )
        return Prediction(
            observation=observation,
            reward=reward,
            terminated=done,
            reasoning=answer.reasoning,
            model_id=self.model_id,
            template_id=self.template_id,
            raw=raw,
            salvaged=salvaged,
        )

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        """Predict a task's first page (when the store holds no real one).

        Raises:
            ModelOutputError: Every attempt's answer was malformed.
        """
        messages = self.config.template.initial_messages(task, seed=seed)
        errors = []
        previous: str | None = None
        for attempt in range(self.config.max_attempts):
            sampling = replace(self._sampling(seed, 0, attempt), max_new_tokens=self.config.initial_max_new_tokens)
            completion = await self._call(messages, sampling, self.config.template.initial_template_id)
            if previous is not None:
                self._watch_retry(previous, completion.text, completion, sampling)
            previous = completion.text
            try:
                state = parse_initial_answer(completion.text)
            except ModelOutputError as exc:
                self.stats.malformed_answers += 1
                errors.append(f"attempt {attempt + 1}: {exc}")
                continue
            return Observation(state=state.render(), url=task.start_url)
        self.stats.failed_predictions += 1
        raise ModelOutputError(f"{self.model_id} could not write the first page of {task.task_id}: {'; '.join(errors)}")

    def _watch_retry(self, previous: str, text: str, completion: Completion, sampling: Sampling) -> None:
        """Count a retry whose answer ``text`` repeated the attempt before it (a cached answer says nothing of the
        server)."""
        if not completion.cached and self.retries.answered(
            previous=previous, text=text, temperature=sampling.temperature
        ):
            self.stats.repeated_retries += 1

    def _sampling(self, seed: int | None, depth: int, attempt: int) -> Sampling:
        base = self.config.sampling
        derived = None if seed is None and base.seed is None else _derive_seed(base.seed, seed, depth, attempt)
        if attempt == 0:
            return replace(base, seed=derived if base.temperature > 0 else base.seed)
        retry_seed = derived if derived is not None else attempt
        return replace(base, temperature=self.config.retry_temperature, seed=retry_seed)

    async def _call(
        self, messages: list[ChatMessage], sampling: Sampling, template_id: str | None = None
    ) -> Completion:
        self.stats.calls += 1
        if self.store is None:
            return await self.backend.complete(messages, sampling)
        # the backend's id, not the model's: a judge changes no answer of the backend
        key = call_cache_key(self.backend.backend_id, template_id or self.template_id, messages, sampling)
        hit = await self.store.get_cached(key)
        if hit is not None:
            self.stats.cached_calls += 1
            cached = msgspec.msgpack.decode(hit, type=_Cached)
            return Completion(
                text=cached.text,
                finish_reason=cached.finish_reason,
                prompt_tokens=cached.prompt_tokens,
                completion_tokens=cached.completion_tokens,
                cached=True,
                steered=cached.steered,
            )
        completion = await self.backend.complete(messages, sampling)
        value = _Cached(
            completion.text,
            completion.finish_reason,
            completion.prompt_tokens,
            completion.completion_tokens,
            completion.steered,
        )
        await self.store.put_cached(key, msgspec.msgpack.encode(value))
        return completion
