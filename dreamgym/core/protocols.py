"""The seams between dreamgym's parts, as ``typing.Protocol``\\ s.

The browser environment and the simulated environment are two
implementations of one :class:`Environment`; the runtime, the agents and the
trainer never know which one they hold except through ``source``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Action, Episode, Observation, PolicyTokens, Source, Step, Task

__all__ = [
    "ChatMessage",
    "Completion",
    "Embedder",
    "Environment",
    "ExperienceModel",
    "ExperienceQuery",
    "Neighbour",
    "Policy",
    "PolicyDecision",
    "Prediction",
    "ReplayStore",
    "Sampling",
    "StepResult",
    "TextBackend",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """What :meth:`Environment.step` returns (Gymnasium's five values, named).

    ``terminated`` is the task's own end; ``truncated`` is a cut from outside
    (step limit, deadline, crash), and ``truncation_reason`` then says which.
    """

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    truncation_reason: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A web environment, real or simulated. Use it as an async resource.

    Example:
        >>> obs = await env.reset(task, seed=3)
        >>> result = await env.step(parse_action("click [e5]"))
        >>> await env.aclose()
    """

    source: Source
    """``"real"`` for live pages, ``"synthetic"`` for the experience model."""

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Start an episode of ``task``; the same task and seed give the same observation."""
        ...

    async def step(self, action: Action) -> StepResult:
        """Carry out one action. A bad action is reported in ``last_action_error``, never raised."""
        ...

    async def aclose(self) -> None:
        """Release resources; calling it again does nothing."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Neighbour:
    """A stored step returned by :meth:`ReplayStore.nearest`, with its cosine similarity."""

    seq: int
    score: float
    step: Step


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperienceQuery:
    """Everything an experience model conditions one prediction on."""

    task: Task
    history: tuple[tuple[Observation, Action], ...]
    observation: Observation
    action: Action
    neighbours: tuple[Neighbour, ...] = ()
    seed: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """An experience model's answer: the next observation, reward and end."""

    observation: Observation
    reward: float
    terminated: bool
    reasoning: str = ""
    model_id: str = ""
    template_id: str = ""
    raw: str = ""
    """The model's raw output, kept for debugging and fidelity reports."""
    salvaged: bool = False
    """Every attempt's answer was malformed and this one was kept in part (its placeable diff lines):
    a worse prediction than a clean one, which fidelity reports count and score apart."""


@runtime_checkable
class ExperienceModel(Protocol):
    """Predicts the next state and reward of a web environment."""

    @property
    def model_id(self) -> str:
        """Names the model and its weights; recorded on every synthetic step."""
        ...

    async def predict(self, query: ExperienceQuery) -> Prediction:
        """Predict what ``query.action`` does; raises ``ModelOutputError`` when no answer is usable."""
        ...

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        """Predict a task's first page, for tasks the store has never seen really start."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyDecision:
    """A policy's action, with its token record when the policy is trainable."""

    action: Action
    tokens: PolicyTokens | None = None
    reasoning: str = ""


@runtime_checkable
class Policy(Protocol):
    """Chooses the next action from the task, the history and the observation."""

    policy_id: str

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message of a chat prompt (``role`` is ``system``, ``user`` or ``assistant``)."""

    role: str
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampling:
    """How a text backend samples an answer; part of every cache key.

    ``temperature == 0`` is greedy decoding. ``seed`` makes sampling
    reproducible where the backend supports it (the local backend seeds each
    request's own generator; OpenAI-compatible servers receive it as ``seed``).
    """

    temperature: float = 0.0
    """Softmax temperature; 0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling: draw from the smallest set of tokens whose probability reaches this."""
    max_new_tokens: int = 512
    """Token budget of each answer."""
    seed: int | None = None
    """Seeds each request's sampling where the backend supports it."""
    stop: tuple[str, ...] = ()
    """Strings the answer ends at (at most four for OpenAI-compatible servers)."""
    copy_lines: tuple[str, ...] = field(default=(), metadata={"flag": False})
    """Per request, not a setting (no command-line flag): the lines an answer's ``<diff>`` may name in its removal
    (``- ``) and context (``  ``) lines, the page the diff applies to. A backend that steers its own decoding keeps
    those lines to copies of these, and an added line of an element they hold to that element's role and name
    (the local backend does: :class:`~dreamgym.simulator.backends.LocalBackend`); an OpenAI-compatible server is
    not told. Empty: no constraint."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"Sampling.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"Sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"Sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A text backend's answer to one chat prompt."""

    text: str
    finish_reason: str = "stop"
    """``stop`` (the model ended or hit a stop string) or ``length`` (``max_new_tokens`` ran out)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    """True when the answer came from the replay store's call cache."""
    steered: int = 0
    """Tokens where the backend kept the answer to its form (``Sampling.copy_lines``) against the model's own
    choice: the model's most likely token was one the form does not allow, outside the spelling of a page line
    the answer had chosen (a corrected copy is not counted). A steered answer applies, but where it was steered
    the model was writing something the page does not support."""


@runtime_checkable
class TextBackend(Protocol):
    """A chat model: an OpenAI-compatible server or an in-process transformers model.

    ``backend_id`` names the model *and its weights* (a hash of the weights or
    adapter for local models); it is recorded on every synthetic step and keys
    the call cache, so two backends with one id must answer alike.
    """

    backend_id: str

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        """Answer one chat prompt.

        Raises:
            BackendError: The backend failed after its retries, or its deadline passed.
        """
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    ``name`` identifies the model and its settings: two embedders with the
    same name and ``dim`` must give the same vectors, since stores record it.
    """

    name: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts; returns an array of shape ``(len(texts), dim)``."""
        ...


@runtime_checkable
class ReplayStore(Protocol):
    """The store of every record dreamgym produces (see ``dreamgym.replay``)."""

    async def append(self, steps: Sequence[Step], *, episodes: Sequence[Episode] = ()) -> list[int]:
        """Commit steps and the summaries of the episodes they finish, all or nothing; returns the
        steps' sequence numbers once the commit is durable."""
        ...

    async def put_task(self, task: Task) -> None: ...

    async def put_episode(self, episode: Episode) -> None: ...

    async def get_step(self, seq: int) -> Step: ...

    async def get_steps(self, seqs: Sequence[int]) -> list[Step]: ...

    async def get_task(self, task_id: str) -> Task | None: ...

    async def task_seqs(self, task_id: str, *, source: Source | None = None) -> list[int]:
        """Sequence numbers of a task's steps (of one source, or all), in commit order."""
        ...

    async def episode_steps(self, episode_id: str) -> list[Step]: ...

    async def nearest(
        self,
        query: str | npt.NDArray[np.float32],
        k: int,
        *,
        source: Source | None = None,
        task_id: str | None = None,
        site: str | None = None,
        exclude_episodes: Sequence[str] = (),
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> list[Neighbour]: ...

    async def get_cached(self, key: bytes) -> bytes | None:
        """The value stored under ``key`` in the model-call cache, or ``None``."""
        ...

    async def put_cached(self, key: bytes, value: bytes) -> None:
        """Store a model-call answer under ``key`` (committed like every record)."""
        ...

    async def flush(self) -> None: ...

    async def aclose(self) -> None: ...
