"""The frozen record types every part of dreamgym exchanges and stores.

Records are ``msgspec.Struct``\\ s: frozen, keyword-only, with tuples inside.
Each record carries ``schema_version`` and a ``kind`` tag, and round-trips
losslessly through :func:`encode_record` / :func:`decode_record` (MessagePack)
and :func:`record_to_json` / :func:`record_from_json`.

Schema evolution follows msgspec's rules, and this is a promise to stores
already on disk: new fields get defaults and go at the end, no field is ever
renamed, reordered or retyped, and ``SCHEMA_VERSION`` is bumped whenever a
field is added. A reader refuses a record whose version is newer than its own
with :class:`~dreamgym.core.errors.SchemaVersionError`.

``Step`` is one transition ``(observation, action) -> next_observation,
reward`` with its full provenance; ``terminated``/``truncated`` follow
Gymnasium exactly: *terminated* is the task's own end (success, failure,
``stop``), *truncated* is a cut from outside (step limit, deadline, crash,
unparseable model output) and then ``truncation_reason`` says which.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, TypeVar

import msgspec

from dreamgym.core.errors import RecordFormatError, SchemaVersionError

__all__ = [
    "INFRASTRUCTURE_CUTS",
    "SCHEMA_VERSION",
    "SHADOW_SUFFIX",
    "Action",
    "Episode",
    "Observation",
    "PolicyTokens",
    "Record",
    "Source",
    "Step",
    "StepTimings",
    "Task",
    "decode_record",
    "encode_record",
    "observation_hash",
    "outcome_reward",
    "record_from_json",
    "record_to_json",
    "shadow_episode_id",
]

SCHEMA_VERSION = 2
"""Version of the record layout written by this dreamgym (2: ``PolicyTokens.action_mask``)."""

SHADOW_SUFFIX = "/shadow"
"""The simulator's shadow predictions of a real episode's steps are synthetic steps of episode
``<real episode id>/shadow``, with the real steps' indices; such an episode has no :class:`Episode` summary."""

Source = Literal["real", "synthetic"]
SOURCES: tuple[Source, ...] = ("real", "synthetic")


class Record(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of every stored record."""

    schema_version: int = SCHEMA_VERSION


class Task(Record, tag="task", frozen=True):
    """Something to do on a site, with the instruction the policy reads."""

    task_id: str
    """Unique id, e.g. ``miniwob/click-button`` or ``webarena/27``."""
    instruction: str
    """The natural-language goal given to the policy."""
    site: str = ""
    """Site or benchmark family (``miniwob``, ``shopping``, ...); a retrieval filter."""
    start_url: str = ""
    benchmark: str = ""
    """Where the task came from: ``miniwob``, ``webarena``, ``generic``, ``curriculum``."""
    max_steps: int = 0
    """Step limit the environment enforces; 0 means the runner's default."""
    parent_task_id: str = ""
    """For curriculum variants: the task this one was derived from."""
    generated: bool = False
    """Generated tasks run only on the synthetic side, never in real evaluation."""
    config_json: str = ""
    """The source configuration verbatim (e.g. a WebArena config), as JSON text."""


class Observation(Record, tag="observation", frozen=True):
    """What the policy sees: an abstract state (``core.state`` text) and page facts."""

    state: str
    """The page in the abstract state format of :mod:`dreamgym.core.state`."""
    url: str = ""
    tabs: tuple[str, ...] = ()
    """Titles or URLs of the open tabs, in order."""
    active_tab: int = 0
    focused_id: str = ""
    """Element id of the focused element, if any."""
    last_action_error: str = ""
    """Why the previous action could not be carried out; empty when it was."""
    cut_note: str = ""
    """What the length cap removed from ``state``; empty when nothing was cut."""
    goal: str = ""
    """The goal as this episode's page states it, where a task draws a new one per
    seed (MiniWoB's utterance); empty when ``Task.instruction`` says it all.
    Policies read ``observation.goal or task.instruction``."""


class Action(Record, tag="action", frozen=True):
    """One action of :mod:`dreamgym.core.actions`, or an unparseable one.

    ``name == "invalid"`` marks text that did not parse: ``raw`` keeps the
    text and ``error`` the reason, and environments answer it with a
    ``last_action_error`` instead of raising.
    """

    name: str
    args: tuple[str, ...] = ()
    label: str = ""
    """Name of the targeted element, shown to choosers (``click [e5] "Yes"``)."""
    raw: str = ""
    """The text the policy produced, verbatim."""
    error: str = ""

    @property
    def is_invalid(self) -> bool:
        return self.name == "invalid"

    def __str__(self) -> str:
        if self.is_invalid:
            return self.raw
        parts = [self.name, *(f"[{arg}]" for arg in self.args)]
        if self.label:
            parts.append(msgspec.json.encode(self.label).decode())
        return " ".join(parts)


class PolicyTokens(Record, tag="policy_tokens", frozen=True):
    """The token record of one policy turn, for the trainer.

    The whole episode is one id sequence built by appending, never by
    re-tokenizing: concatenate ``prompt_ids + action_ids + env_ids`` over the
    turns in order. Only ``action_ids`` are trained; the rest carry env_mask 0.

    Two layouts give the same sequence. As a policy records a turn (it sees
    the environment's answer only on its next turn), ``prompt_ids`` holds what
    the turn added before the action — the whole prompt on turn 0, the
    environment's answer to the previous action afterwards — and ``env_ids`` is
    empty. In the *linked* layout (``dreamgym.agents.link_turns``) only turn 0
    has ``prompt_ids`` and each turn's ``env_ids`` are the answer to its action.

    ``action_logprobs`` are the log-probabilities each action id was sampled
    with (``log_softmax(logits / T)`` at the policy's temperature ``T``).
    ``action_mask`` says which action ids the policy sampled (1) and which it
    appended without sampling (0: an end of turn forced after ``</action>`` or
    at the length cap, the end of turn after an index token); only sampled ids
    are trained. Empty means every action id was sampled (records of schema 1).
    """

    prompt_ids: tuple[int, ...] = ()
    action_ids: tuple[int, ...] = ()
    action_logprobs: tuple[float, ...] = ()
    env_ids: tuple[int, ...] = ()
    action_mask: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.action_ids) != len(self.action_logprobs):
            raise RecordFormatError(
                f"PolicyTokens has {len(self.action_ids)} action ids but "
                f"{len(self.action_logprobs)} logprobs; give one logprob per policy token"
            )
        if self.action_mask and len(self.action_mask) != len(self.action_ids):
            raise RecordFormatError(
                f"PolicyTokens has {len(self.action_ids)} action ids but an action_mask of "
                f"{len(self.action_mask)}; give one 0/1 flag per action id, or none"
            )

    @property
    def sampled(self) -> tuple[int, ...]:
        """One flag per action id: 1 where the policy sampled it (trained), 0 where it was appended."""
        return self.action_mask or (1,) * len(self.action_ids)


class StepTimings(Record, tag="timings", frozen=True):
    """Wall-clock facts of one step, in seconds (``started_at`` is Unix time)."""

    started_at: float = 0.0
    policy_s: float = 0.0
    env_s: float = 0.0


class Step(Record, tag="step", frozen=True):
    """One transition with its provenance."""

    source: Source
    task_id: str
    episode_id: str
    step_index: int
    observation: Observation
    action: Action
    next_observation: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str = ""
    """Why the episode was cut: ``step_limit``, ``deadline``, ``error``, ``model_output``..."""
    group_id: str = ""
    seed: int | None = None
    site: str = ""
    policy_id: str = ""
    experience_model_id: str = ""
    """Which experience model (and weights) predicted this step; synthetic steps only."""
    prompt_template_id: str = ""
    """Which prompt template the experience model was asked with; synthetic steps only."""
    timings: StepTimings = msgspec.field(default_factory=StepTimings)
    policy_tokens: PolicyTokens | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise RecordFormatError(f"Step.source must be 'real' or 'synthetic', not {self.source!r}")
        if self.step_index < 0:
            raise RecordFormatError(f"Step.step_index must be >= 0, got {self.step_index}")
        if self.truncated and not self.truncation_reason:
            raise RecordFormatError("a truncated Step needs a truncation_reason (e.g. 'step_limit')")
        if self.source == "synthetic" and not self.experience_model_id:
            raise RecordFormatError("a synthetic Step needs the experience_model_id that predicted it")

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


INFRASTRUCTURE_CUTS = frozenset(
    {"deadline", "error", "cancelled", "page_crashed", "browser_crashed", "worker_lost", "model_output", "backend",
     "store"}
)  # fmt: skip
"""Truncation reasons that say the infrastructure ended an episode, not the policy: the
deadline, an exception (``Episode.error``), cancellation, a crashed page or browser, a rollout
worker that died (``dreamgym.runtime.RayWorkers``), an experience model whose answer was
unusable or whose backend failed, a store that did not take the records. Such an episode
says nothing about the policy: its outcome is ``None``. The step limit (``step_limit``) is
the policy's own doing and scores 0."""


class Episode(Record, tag="episode", frozen=True):
    """Summary of one finished episode; its steps are keyed by ``episode_id``.

    ``total_reward`` is the episode's *outcome reward*, in [0, 1]: the reward
    of its terminating step, clipped to [0, 1], or 0 when it never
    terminated. Rewards of middle steps (an experience model may predict
    some) stay on their steps, as the model said them, and do not count.
    """

    episode_id: str
    task_id: str
    source: Source
    group_id: str = ""
    seed: int | None = None
    site: str = ""
    policy_id: str = ""
    experience_model_id: str = ""
    num_steps: int = 0
    total_reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str = ""
    error: str = ""
    """The error that ended the episode, if one did (recorded, not raised)."""
    started_at: float = 0.0
    ended_at: float = 0.0
    initial_observation_hash: str = ""
    """:func:`observation_hash` of the first observation; groups compare these."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise RecordFormatError(f"Episode.source must be 'real' or 'synthetic', not {self.source!r}")

    @property
    def cut_reason(self) -> str:
        """Why the infrastructure ended the episode (one of :data:`INFRASTRUCTURE_CUTS`), or ``""``."""
        if self.error and self.truncation_reason not in INFRASTRUCTURE_CUTS:
            return "error"
        return self.truncation_reason if self.truncation_reason in INFRASTRUCTURE_CUTS else ""


def outcome_reward(episode: Episode) -> float | None:
    """What the episode says about its policy: its outcome reward in [0, 1], or ``None`` when the
    infrastructure ended it (:attr:`Episode.cut_reason`): a trainer gives such an episode no
    advantage and leaves it out of its group's baseline; an evaluation counts it apart."""
    if episode.cut_reason:
        return None
    return min(1.0, max(0.0, episode.total_reward))  # schema-1 episodes stored the sum of their step rewards


_ANY_RECORD = Task | Observation | Action | PolicyTokens | StepTimings | Step | Episode
R = TypeVar("R", bound=Record)

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}
_json_encoder = msgspec.json.Encoder()


class _Header(msgspec.Struct):
    kind: str = ""
    schema_version: int = 0


def encode_record(record: Record) -> bytes:
    """Encode a record to MessagePack bytes."""
    return _encoder.encode(record)


def decode_record(data: bytes | memoryview, kind: type[R] | None = None) -> R:
    """Decode bytes made by :func:`encode_record`.

    Args:
        data: The bytes.
        kind: The expected record type; ``None`` accepts any record type.

    Raises:
        SchemaVersionError: The record is newer than this dreamgym.
        RecordFormatError: The bytes are not a record (of that kind).
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind or _ANY_RECORD)
    try:
        record = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        _raise_if_newer(msgspec.msgpack.decode, data)
        raise RecordFormatError(f"cannot decode {_kind_name(kind)} record: {exc}") from exc
    _check_version(record)
    return record  # type: ignore[no-any-return]


def record_to_json(record: Record) -> bytes:
    """Encode a record as one line of JSON (no trailing newline)."""
    return _json_encoder.encode(record)


def record_from_json(data: bytes | str, kind: type[R] | None = None) -> R:
    """Decode JSON made by :func:`record_to_json`; raises like :func:`decode_record`."""
    try:
        record = msgspec.json.decode(data, type=kind or _ANY_RECORD)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        _raise_if_newer(msgspec.json.decode, data)
        raise RecordFormatError(f"cannot decode {_kind_name(kind)} record from JSON: {exc}") from exc
    _check_version(record)
    return record


def shadow_episode_id(episode_id: str) -> str:
    """The id under which the shadow predictions of real episode ``episode_id`` are stored (:data:`SHADOW_SUFFIX`)."""
    return episode_id + SHADOW_SUFFIX


def observation_hash(observation: Observation) -> str:
    """A stable hex digest of what the policy sees (state, goal, URL, tabs)."""
    digest = hashlib.sha256()
    parts = (observation.state, observation.goal, observation.url, *observation.tabs, str(observation.active_tab))
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def _check_version(record: Record) -> None:
    if record.schema_version > SCHEMA_VERSION or record.schema_version < 1:
        raise SchemaVersionError(_version_message(type(record).__name__, record.schema_version))


def _raise_if_newer(decode: Any, data: bytes | memoryview | str) -> None:
    try:
        header = decode(data, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    if header.schema_version > SCHEMA_VERSION:
        raise SchemaVersionError(_version_message(header.kind or "record", header.schema_version))


def _version_message(kind: str, version: int) -> str:
    return (
        f"{kind} record has schema version {version}, but this dreamgym reads versions "
        f"1..{SCHEMA_VERSION}; upgrade dreamgym to read this store"
    )


def _kind_name(kind: type[Record] | None) -> str:
    return kind.__name__ if kind is not None else "a"
