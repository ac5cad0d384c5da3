"""The local policy: an in-process transformers causal LM that returns token records with its actions.

Three modes.

- ``choose`` (the default) scores every candidate action of the state
  (:func:`~dreamgym.core.actions.candidate_actions`, labelled with the
  element's name) by the sum of its tokens' log-likelihoods after the prompt,
  less the same sum after the prompt without its goal (``calibrate``), then
  samples one from ``softmax(scores / temperature)``: a small chat model
  chooses well where it cannot follow a format when asked to generate. Its
  draw is over candidates, not tokens, so it is **not trainable** by the
  trainer (which differentiates token log-probabilities); its token records
  hold the candidate's token log-likelihoods at temperature 1, for reading.
- ``index`` lists the candidates in the user message behind label tokens
  (:data:`~dreamgym.agents.INDEX_TOKENS`) and draws one token from
  ``softmax(logits / temperature)`` over the label tokens alone
  (``labels_only``; the whole vocabulary without it): one forward pass per
  decision, and the recorded log-probability is exactly what GRPO
  differentiates. A label past the listed choices (or, without
  ``labels_only``, any other token) is an invalid action (data, never raised).
- ``generate`` samples a ``<think>…</think><action>…</action>`` reply token
  by token at ``temperature``.

In ``index`` and ``generate`` modes each drawn token is recorded with
``log_softmax(logits / temperature)`` of it (for ``index``, over the label tokens); an end of turn the policy
appends without drawing it is flagged 0 in ``PolicyTokens.action_mask``.

The token record follows :mod:`dreamgym.agents._tokens`: each turn's ids
are appended to one sequence per episode, which is rebuilt on every turn
from the token records of ``history`` (so it survives steps stored and read
back, and any number of concurrent episodes; no per-episode state is kept).

Every prompt starts with the same system turn, whose KV cache is kept and
reused, and an ``index`` policy keeps the next-token logits of recent prompts
(``LocalPolicyConfig.logits_memo``); both are made again whenever the weights
change: whoever changes them
calls :meth:`LocalPolicy.weights_changed` (the trainer does after every
optimizer step and checkpoint restore). Concurrent :meth:`LocalPolicy.act`
calls are batched: the first caller to find the model idle leads, waits
``batch_window_s`` for others, and runs every prompt of the batch through one
forward pass (identical prompts, as in a GRPO group's first turn, once) and,
for a chooser, all their candidates, packed behind their prompts, through the next.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import anyio

from dreamgym.agents._model import (
    LogitsMemo,
    PromptHead,
    WeightsVersion,
    add_index_tokens,
    draw_tokens,
    generate_reply,
    model_digest,
    score_candidates,
)
from dreamgym.agents._prompt import INDEX_TOKENS, AnswerFormat, goal_first, parse_agent_answer, system_message
from dreamgym.agents._tokens import ChatTurns, turn_prefix
from dreamgym.core.actions import candidate_actions, invalid_action, stop
from dreamgym.core.batching import ThreadBatcher
from dreamgym.core.devices import check_device, check_dtype, place_given, place_loaded
from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.models import resolve_model
from dreamgym.core.protocols import PolicyDecision
from dreamgym.core.state import parse_state
from dreamgym.core.types import Action, Observation, PolicyTokens, Step, Task

__all__ = ["CandidateScore", "LocalPolicy", "LocalPolicyConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalPolicyConfig:
    """How :class:`LocalPolicy` decides."""

    mode: Literal["choose", "generate", "index"] = "choose"
    """``choose``: score the state's candidate actions (not trainable); ``index``: draw the label
    token of one listed candidate; ``generate``: sample a tagged reply."""
    temperature: float = 1.0
    """``choose``: of ``softmax(scores / temperature)``; ``index`` and ``generate``: of each
    drawn token, whose recorded log-probability is ``log_softmax(logits / temperature)``
    (the trainer sets TRL's temperature to this). 0 takes the best candidate (the most likely
    token). Keep it above 0 for GRPO: a greedy policy makes every episode of a group the same."""
    seed: int | None = None
    """Seeds the policy's random generators: the same calls in the same order
    make the same choices. ``None`` seeds from the system."""
    calibrate: bool = True
    """``choose``: score a candidate by how much the goal raises its likelihood,
    ``log p(c | episode) - log p(c | the same episode with the goal left out)``
    (domain-conditional PMI, Holtzman et al. 2021), instead of by
    ``log p(c | episode)``. It cancels a small model's prior for some names and
    ids: SmolLM2-135M took the instructed button on 19 of 20 click-button pages
    calibrated, at chance without. Costs a second prompt per turn."""
    labels_only: bool = True
    """``index``: draw from the softmax over the label tokens alone (every other token of the vocabulary gets no
    probability) and record the log-probability in it; the trainer differentiates the same distribution
    (:attr:`LocalPolicy.choice_token_ids`). ``False`` draws from the whole vocabulary's softmax, where a token
    that labels no choice is an invalid action: under GRPO the negative advantages then push probability off
    the labels and onto page tokens the policy never drew, and a demo's tiny policy came to answer ``down``,
    ``e`` or a newline greedily (login-user 35 → 1 of 40 held-out episodes, 2026-12-04)."""
    include_scroll: bool = True
    """Offer ``scroll [down]`` and ``scroll [up]`` among the candidates."""
    list_actions: bool = True
    """List the action definitions in the system message."""
    max_new_tokens: int = 256
    """``generate``: the longest reply before its end-of-turn is forced."""
    max_batch: int = 8
    """Most ``act`` calls per batch."""
    batch_window_s: float = 0.005
    """How long a batch's leader waits for other calls to join."""
    logits_memo: int = 256
    """``index``: keep the next-token logits of this many recent distinct prompts, while the weights do not
    change, and draw from them when a prompt comes again instead of running it (a group's episodes share
    their first page); 0 runs every prompt. Each takes the vocabulary size in floats (8 KB for the tiny
    policy, 200 KB for SmolLM2)."""
    max_pass_tokens: int = 1024
    """Cap on rows x candidate tokens of one scoring pass; its logits take that
    many times the vocabulary size in floats (200 MB for SmolLM2 at 1024)."""
    device: str = "auto"
    """Where the model runs: ``auto`` (CUDA where torch sees a GPU, else the CPU; a model given
    already loaded stays where it is), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    dtype: str = "auto"
    """The model's weights: ``auto`` (as loaded, float32 on the CPU; a model given already loaded
    keeps its own), ``float32``, ``bfloat16`` or ``float16``."""

    def __post_init__(self) -> None:
        check_device(self.device, "LocalPolicyConfig.device")
        check_dtype(self.dtype, "LocalPolicyConfig.dtype")
        if self.mode not in ("choose", "generate", "index"):
            raise ConfigError(f"LocalPolicyConfig.mode must be 'choose', 'generate' or 'index', not {self.mode!r}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"LocalPolicyConfig.temperature must be a finite number >= 0, got {self.temperature}")
        if self.max_new_tokens < 1 or self.max_batch < 1 or self.max_pass_tokens < 1:
            raise ConfigError("LocalPolicyConfig.max_new_tokens, max_batch and max_pass_tokens must be >= 1")
        if self.logits_memo < 0:
            raise ConfigError(f"LocalPolicyConfig.logits_memo must be >= 0, got {self.logits_memo}")

    @property
    def answer_format(self) -> AnswerFormat:
        return {"choose": "action", "generate": "tagged", "index": "index"}[self.mode]  # type: ignore[return-value]

    @property
    def trainable(self) -> bool:
        """Whether what the policy records is the log-probability it drew each action with (not a chooser)."""
        return self.mode != "choose"


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateScore:
    """A chooser's view of one candidate action."""

    action: Action
    score: float
    """What the chooser samples by: ``logprob``, less the goal-free baseline when calibrated."""
    logprob: float
    """The sum of its tokens' log-probabilities (end-of-turn included) after the prompt."""
    probability: float
    """Its share of ``softmax(scores / temperature)``: the chance the chooser takes it."""


@dataclass(eq=False)
class _Request:
    task: Task
    history: tuple[Step, ...]
    observation: Observation
    prefix: list[int] = field(default_factory=list)
    baseline: list[int] = field(default_factory=list)
    """The goal-free prefix a calibrated chooser scores against (empty when not calibrated)."""
    added: list[int] = field(default_factory=list)
    candidates: tuple[Action, ...] = ()
    candidate_ids: list[tuple[int, ...]] = field(default_factory=list)
    draw: bool = True
    """False: only score the candidates (``scores`` is set, ``decision`` is not)."""
    scores: list[CandidateScore] = field(default_factory=list)
    decision: PolicyDecision | None = None
    error: BaseException | None = None
    done: bool = False


class LocalPolicy:
    """A transformers causal LM as a :class:`~dreamgym.core.protocols.Policy` with token records.

    Each :class:`~dreamgym.core.protocols.PolicyDecision` carries the turn's
    :class:`~dreamgym.core.types.PolicyTokens`: ``prompt_ids`` (the first
    prompt on turn 0, the environment's answer to the previous action later),
    ``action_ids`` (the reply and its end-of-turn token) and their
    ``action_logprobs``; see :mod:`dreamgym.agents._tokens` for the scheme and
    :func:`~dreamgym.agents.link_turns` for the linked form.

    Note that a chooser samples from its softmax over candidates, so the
    recorded token log-probabilities are the model's, not the probability of
    the draw (the draw's probability is in ``PolicyDecision.reasoning``): a
    chooser is not trainable. ``index`` and ``generate`` policies record the
    log-probability of every token they drew, at their temperature.

    ``policy_id`` is ``local:{name}@{digest[:16]}/{mode}``, recorded on every step.

    Args:
        model: A transformers causal LM (set to eval mode here), moved to ``config.device`` and cast to
            ``config.dtype`` where they are not ``"auto"``: with ``"auto"`` it stays where it is, as it is.
        tokenizer: Its tokenizer, with a chat template that ends assistant
            turns with its EOS token.
        name: What ``policy_id`` calls the model.
        digest: A hash of the weights (:func:`dreamgym.simulator.weights_digest`
            for a directory); ``None`` hashes the model's parameters.
        config: Mode, temperature, seed, batching.
        limiter: Shared cap on in-process torch work; one slot by default.
        weights: The count of the model's weight changes, shared with other
            policies over the same model (:meth:`sibling` shares it).

    Raises:
        ConfigError: The tokenizer's chat template cannot make an append-only
            record, or an ``index`` policy's tokenizer lacks the label tokens.

    Example:
        >>> policy = LocalPolicy.load("~/.cache/dreamgym/smollm2-135m-instruct", config=LocalPolicyConfig(seed=0))
        >>> decision = await policy.act(task, [], observation)
        >>> decision.tokens.action_ids, decision.tokens.action_logprobs
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "model",
        digest: str | None = None,
        config: LocalPolicyConfig | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        weights: WeightsVersion | None = None,
    ) -> None:
        import torch

        self.config = config or LocalPolicyConfig()
        self.weights = weights or WeightsVersion()
        self._model = place_given(model, self.config.device, self.config.dtype).eval()
        self.tokenizer = tokenizer
        self.turns = ChatTurns(tokenizer)
        self.name = name
        self.digest = digest or model_digest(model)
        self.version = ""
        self.policy_id = self._policy_id()
        self.system = system_message(self.config.answer_format, list_actions=self.config.list_actions)
        self._index_of = self._label_ids() if self.config.mode == "index" else {}
        self._head = PromptHead(self.turns.head_ids(self.system), self.weights)
        self.memo = LogitsMemo(self.config.logits_memo, self.weights) if self.config.logits_memo else None
        """``index``: the logits of recent prompts (``LocalPolicyConfig.logits_memo``); ``None`` when off."""
        self._rng = random.Random(self.config.seed)
        self._generator = torch.Generator()
        if self.config.seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(self.config.seed)
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.turns.eos_id
        self._batcher = ThreadBatcher(
            self._run_batch, max_batch=self.config.max_batch, window_s=self.config.batch_window_s, limiter=limiter
        )

    @property
    def model(self) -> Any:
        """The causal LM; replacing it (a trainer wraps it in adapters) counts as a weight change."""
        return self._model

    @model.setter
    def model(self, model: Any) -> None:
        self._model = model
        self.weights.bump()

    def weights_changed(self) -> None:
        """Say that the model's weights changed in place (an optimizer step, a restore, a refit).

        Every cache of weights-derived values (the prompt head's KV) is made
        again on next use, for this policy and every :meth:`sibling`.
        """
        self.weights.bump()

    def sibling(self, **changes: Any) -> LocalPolicy:
        """A policy over the same model, tokenizer, weight count and torch limiter, with ``changes``
        to the config (e.g. ``temperature=0`` for greedy evaluation); it takes the model where it is
        (its ``device`` and ``dtype`` are ``"auto"``)."""
        return LocalPolicy(
            self._model,
            self.tokenizer,
            name=self.name,
            digest=self.digest,
            config=replace(self.config, **{"device": "auto", "dtype": "auto", **changes}),
            limiter=self.limiter,
            weights=self.weights,
        )

    @property
    def choice_token_ids(self) -> tuple[int, ...] | None:
        """The token ids an ``index`` policy draws among (its label tokens, with ``labels_only``), sorted; ``None``
        where any token of the vocabulary can be drawn. A trainer scores the policy's drawn tokens in the softmax
        over these (:func:`~dreamgym.agents.choice_logprobs`), which is what the policy drew them from."""
        if self.config.mode != "index" or not self.config.labels_only:
            return None
        return tuple(sorted(self._index_of))

    def _label_ids(self) -> dict[int, int]:
        """Token id -> choice index of the label tokens; each must be one token of the tokenizer."""
        found: dict[int, int] = {}
        for index, label in enumerate(INDEX_TOKENS):
            ids = self.turns.encode(label)
            if len(ids) != 1:
                raise ConfigError(
                    f"an index policy needs each label token ({label!r}, ...) to be one token of its tokenizer; "
                    "add them with dreamgym.agents.add_index_tokens(model, tokenizer) (and train the model on them)"
                )
            found[ids[0]] = index
        return found

    def choices(self, task: Task, observation: Observation) -> tuple[Action, ...]:
        """The candidate actions an ``index`` or ``choose`` policy picks among on ``observation``.

        An ``index`` policy offers those the goal names first
        (:func:`~dreamgym.agents._prompt.goal_first`), then the rest in page
        order, up to :data:`~dreamgym.agents.INDEX_TOKENS` of them; a page
        without any offers ``stop`` alone.
        """
        instruction = observation.goal or task.instruction
        state = parse_state(observation.state)
        found = candidate_actions(state, instruction, include_scroll=self.config.include_scroll)
        if self.config.mode == "index":
            found = goal_first(found, instruction)[: len(INDEX_TOKENS)]
        return found or (stop(""),)

    def _policy_id(self) -> str:
        version = f"+{self.version}" if self.version else ""
        return f"local:{self.name}@{self.digest[:16]}{version}/{self.config.mode}"

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> LocalPolicy:
        """Load a model directory (weights, tokenizer and chat template).

        An ``index`` policy whose tokenizer lacks the label tokens gets them
        (:func:`~dreamgym.agents.add_index_tokens`, logged): its ``name`` then
        ends in ``+labels``, since the model is no longer the directory's. The
        model goes where ``config``'s ``device`` and ``dtype`` say, ``"auto"``
        resolved (CUDA where torch sees a GPU; float32 on the CPU).

        Raises:
            ConfigError: There is no model directory at ``path``.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from dreamgym.simulator import weights_digest

        root = resolve_model(path, what="policy model")
        kwargs.setdefault("name", root.name if Path(path).expanduser().is_dir() else str(path))
        kwargs.setdefault("digest", weights_digest(root))
        model = AutoModelForCausalLM.from_pretrained(str(root))
        tokenizer = AutoTokenizer.from_pretrained(str(root))
        config = kwargs.get("config") or LocalPolicyConfig()
        if config.mode == "index" and add_index_tokens(model, tokenizer):
            log.warning(
                "%s has no label tokens: added %d; an index policy picks near chance until trained on them",
                root,
                len(INDEX_TOKENS),
            )
            kwargs["name"] = f"{kwargs['name']}+labels"
        return cls(place_loaded(model, config.device, config.dtype), tokenizer, **kwargs)

    def mark_version(self, version: str) -> None:
        """Name weights trained in place without re-hashing them: ``policy_id`` gains ``+version``.

        A trainer calls it after each update (``version`` counts updates), which
        costs nothing where :meth:`refresh_digest` hashes every parameter.
        """
        self.version = version
        self.policy_id = self._policy_id()

    def refresh_digest(self) -> None:
        """Re-hash the model's parameters into ``policy_id`` (after the weights were trained in place)."""
        self.digest = model_digest(self.model)
        self.policy_id = self._policy_id()

    def input_ids(self, task: Task, history: Sequence[Step], observation: Observation) -> list[int]:
        """The ids this policy feeds its model on this turn (before any candidate; an index policy's
        prompt lists its choices)."""
        return self._prefix(_Request(task=task, history=tuple(history), observation=observation))[0]

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        """Choose (or generate) the next action, with the turn's token record.

        Raises:
            BackendError: The model failed, or the episode outgrew the model's
                context (the message names the cause).
        """
        request = await self._submit(_Request(task=task, history=tuple(history), observation=observation))
        if request.decision is None:  # a drawn request always gets one; this names a bug, should one appear
            raise BackendError(f"{self.policy_id} finished a turn without a decision")
        return request.decision

    async def scores(self, task: Task, history: Sequence[Step], observation: Observation) -> list[CandidateScore]:
        """The chooser's candidates with their scores and probabilities, without drawing one.

        Raises:
            ConfigError: The policy generates instead of choosing.
            BackendError: As for :meth:`act`.
        """
        if self.config.mode != "choose":
            raise ConfigError("LocalPolicy.scores needs mode='choose'; a generating policy has no candidates")
        request = _Request(task=task, history=tuple(history), observation=observation, draw=False)
        return (await self._submit(request)).scores

    async def _submit(self, request: _Request) -> _Request:
        await self._batcher.submit(request)
        if request.error is not None:
            raise BackendError(f"{self.policy_id} failed to act: {request.error}") from request.error
        return request

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The cap on in-process torch work this policy takes a slot of; share it with other torch jobs."""
        return self._batcher.limiter

    @property
    def batches(self) -> int:
        """Batches run so far (several episodes' turns in one forward pass)."""
        return self._batcher.batches

    # ------------------------------------------------------------------ in the worker thread

    def _run_batch(self, batch: list[_Request]) -> None:
        log.debug("%s: a batch of %d turns", self.policy_id, len(batch))
        ready = [request for request in batch if self._prepare(request)]
        try:
            if self.config.mode == "choose":
                self._choose(ready)
            elif self.config.mode == "index":
                self._pick(ready)
            else:
                for request in ready:
                    self._generate(request)
        except Exception as exc:  # a failed batch fails each of its requests, not the caller's task group
            for request in ready:
                request.error = exc
        for request in batch:
            request.done = True

    def _prepare(self, request: _Request) -> bool:
        """Tokenize the turn (and list the candidates); a failure fails this request alone."""
        try:
            request.prefix, request.added = self._prefix(request)
            if self.config.mode == "choose":
                request.candidates = self.choices(request.task, request.observation)
                request.candidate_ids = [tuple(self.turns.reply_ids(str(a))) for a in request.candidates]
                if self.config.calibrate:
                    request.baseline = self._prefix(request, goal="")[0]
            elif self.config.mode == "index":
                request.candidates = self.choices(request.task, request.observation)
            reply = max((len(c) for c in request.candidate_ids), default=self.config.max_new_tokens + 1)
            reply = 2 if self.config.mode == "index" else reply
            self._check_context(max(len(request.prefix), len(request.baseline)) + reply)
        except Exception as exc:
            request.error = exc
            return False
        return True

    def _prefix(self, request: _Request, goal: str | None = None) -> tuple[list[int], list[int]]:
        return turn_prefix(
            self.turns,
            self.system,
            request.task,
            request.history,
            request.observation,
            self.config.answer_format,
            goal=goal,
            choices=self.choices if self.config.mode == "index" else None,
        )

    def _check_context(self, length: int) -> None:
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and length > limit:
            raise ConfigError(
                f"the episode's ids ({length}) outgrew the model's context ({limit}); "
                "cap the episode's steps, or shorten the states (the bridge's state cap)"
            )

    def _choose(self, requests: list[_Request]) -> None:
        if not requests:
            return
        prefixes: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}
        for request in requests:
            for prefix in (request.prefix, request.baseline) if request.baseline else (request.prefix,):
                group = prefixes.setdefault(tuple(prefix), {})
                for ids in request.candidate_ids:
                    group.setdefault(ids, len(group))
        scored = score_candidates(
            self.model,
            list(prefixes),
            [list(group) for group in prefixes.values()],
            pad_id=self._pad,
            max_pass_tokens=self.config.max_pass_tokens,
            head=self._head,
        )
        found = dict(zip(prefixes, scored, strict=True))

        def logprobs(prefix: list[int], ids: tuple[int, ...]) -> list[float]:
            return found[tuple(prefix)][prefixes[tuple(prefix)][ids]]

        for request in requests:
            token_logprobs = [logprobs(request.prefix, ids) for ids in request.candidate_ids]
            sums = [sum(lp) for lp in token_logprobs]
            scores = list(sums)
            if request.baseline:
                scores = [
                    s - sum(logprobs(request.baseline, ids)) for s, ids in zip(sums, request.candidate_ids, strict=True)
                ]
            if not request.draw:
                probabilities = self._probabilities(scores)
                request.scores = [
                    CandidateScore(action=action, score=score, logprob=logprob, probability=p)
                    for action, score, logprob, p in zip(request.candidates, scores, sums, probabilities, strict=True)
                ]
                continue
            pick, probability = self._draw(scores)
            action = request.candidates[pick]
            request.decision = PolicyDecision(
                action=action,
                tokens=PolicyTokens(
                    prompt_ids=tuple(request.added),
                    action_ids=request.candidate_ids[pick],
                    action_logprobs=tuple(token_logprobs[pick]),
                ),
                reasoning=f"chose {action} (p={probability:.3f}) among {len(request.candidates)} candidates",
            )

    def _probabilities(self, scores: list[float]) -> list[float]:
        """``softmax(scores / temperature)``; at temperature 0, all on the first best score."""
        best = max(range(len(scores)), key=scores.__getitem__)
        if self.config.temperature == 0:
            return [float(n == best) for n in range(len(scores))]
        weights = [math.exp((s - scores[best]) / self.config.temperature) for s in scores]
        total = sum(weights)
        return [w / total for w in weights]

    def _draw(self, scores: list[float]) -> tuple[int, float]:
        """Sample an index from ``softmax(scores / temperature)``; returns it and its probability."""
        probabilities = self._probabilities(scores)
        if self.config.temperature == 0:
            pick = probabilities.index(1.0)
        else:
            pick = self._rng.choices(range(len(scores)), weights=probabilities)[0]
        return pick, probabilities[pick]

    def _pick(self, requests: list[_Request]) -> None:
        """Draw one token per request from the softmax at the temperature (over the label tokens alone, with
        ``labels_only``); its label names the choice."""
        if not requests:
            return
        drawn = draw_tokens(
            self.model,
            [request.prefix for request in requests],
            pad_id=self._pad,
            temperature=self.config.temperature,
            generator=self._generator,
            head=self._head,
            memo=self.memo,
            among=self.choice_token_ids,
        )
        eos = self.turns.eos_id
        for request, (token, logprob) in zip(requests, drawn, strict=True):
            index = self._index_of.get(token)
            if index is not None and index < len(request.candidates):
                action = request.candidates[index]
            else:
                text = self.tokenizer.decode([token], skip_special_tokens=False)
                action = invalid_action(
                    text, f"the answer {text!r} labels none of the {len(request.candidates)} listed choices"
                )
            ids: tuple[int, ...]
            logprobs: tuple[float, ...]
            sampled: tuple[int, ...]
            if token == eos:  # the turn ended without a choice: nothing appended
                ids, logprobs, sampled = (token,), (logprob,), (1,)
            else:
                ids, logprobs, sampled = (token, eos), (logprob, 0.0), (1, 0)
            request.decision = PolicyDecision(
                action=action,
                tokens=PolicyTokens(
                    prompt_ids=tuple(request.added), action_ids=ids, action_logprobs=logprobs, action_mask=sampled
                ),
                reasoning=f"drew {action} (p={math.exp(logprob):.3f}) among {len(request.candidates)} choices",
            )

    def _generate(self, request: _Request) -> None:
        def finished(ids: list[int]) -> bool:
            return "</action>" in self.tokenizer.decode(ids[-8:], skip_special_tokens=False)

        ids, logprobs, sampled = generate_reply(
            self.model,
            request.prefix,
            eos_id=self.turns.eos_id,
            temperature=self.config.temperature,
            max_new_tokens=self.config.max_new_tokens,
            generator=self._generator,
            finished=finished,
            head=self._head,
        )
        text = self.tokenizer.decode(ids[:-1], skip_special_tokens=True)
        action, reasoning = parse_agent_answer(text)
        request.decision = PolicyDecision(
            action=action,
            tokens=PolicyTokens(
                prompt_ids=tuple(request.added),
                action_ids=tuple(ids),
                action_logprobs=tuple(logprobs),
                action_mask=tuple(sampled),
            ),
            reasoning=reasoning,
        )
