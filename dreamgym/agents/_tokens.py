"""A policy's episode as one append-only token id sequence, and its per-turn records.

The scheme (what :class:`~dreamgym.agents.LocalPolicy` does). An episode is a
chat: the system message and the first user message, then per turn the
policy's reply and the environment's answer as the next user message. Its
ids are never made by tokenizing the conversation's text; each piece is
tokenized alone and appended:

- turn 0: the chat template's prompt for ``[system, user]`` with the
  generation prefix (``...<|im_start|>assistant\\n``) -> ``prompt_ids``;
- each reply: the action text's ids (an index policy's: one label token),
  then the end-of-turn token (the tokenizer's EOS, which the template closes
  assistant turns with) -> ``action_ids``, every one with its
  log-probability, and in ``action_mask`` whether the policy drew it (an end
  of turn appended after ``</action>``, at the length cap or after a label
  was not drawn: 0, never trained);
- each later turn: what the template writes after that EOS (often ``\\n``),
  the next user message in the template's user-turn format, and the
  generation prefix, tokenized together -> the environment's ids.

A policy learns the environment's answer to its action only on its next
turn, when the record of the turn that acted is already returned, so the
record a turn returns (the *act-time* form) holds the ids that turn added:
``prompt_ids`` are the first prompt on turn 0 and the environment's answer to
the previous action on later turns; ``env_ids`` are empty. Either way the
episode's sequence is ``Σ (prompt_ids + action_ids + env_ids)`` over the
turns in order, and on turn ``t`` it is exactly what the policy fed its model
(followed by the candidates it scored).

Steps without a record (a scripted prefix) are folded into the next turn's
``prompt_ids``, which then start the sequence afresh: the sum runs over the
trailing run of steps that carry records. An episode branched from a recorded
prefix continues the prefix's records; hand the policy the prefix steps
without their records to make the branch's records self-contained.

:func:`link_turns` rewrites the records into the form
:class:`~dreamgym.core.types.PolicyTokens` describes (only turn 0 has
``prompt_ids``; each turn's ``env_ids`` follow its action), and
:func:`episode_sequence` flattens them into what TRL's ``rollout_func``
returns. Environment ids are never trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.agents._prompt import AnswerFormat, assistant_text, user_message
from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Action, Observation, PolicyTokens, Step, Task

Choices = Callable[[Task, Observation], Sequence[Action]]
"""An ``index`` policy's choices on a page of a task."""

__all__ = ["ChatTurns", "EpisodeSequence", "episode_sequence", "link_turns", "sequence_ids", "turn_prefix"]

_S, _U, _A = "\x01system\x01", "\x01user\x01", "\x01reply\x01"


class ChatTurns:
    """A tokenizer's chat template cut into the pieces an append-only episode needs.

    Raises:
        ConfigError: The tokenizer has no chat template or EOS token, closes
            assistant turns with something other than its EOS, or its
            template rewrites earlier turns when one is added.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the policy's tokenizer has no chat template; use a chat model or set one")
        eos = tokenizer.eos_token
        if not eos or tokenizer.eos_token_id is None:
            raise ConfigError("the policy's tokenizer names no EOS token; set tokenizer.eos_token")
        self.tokenizer = tokenizer
        self.eos_id: int = tokenizer.eos_token_id
        replied = self._render([_S, _U, _A], generation=False)
        close = replied[replied.rindex(_A) + len(_A) :]
        if not close.startswith(eos):
            raise ConfigError(
                f"the chat template closes an assistant turn with {close!r}, not the EOS token {eos!r}; "
                "the policy's replies must end with the EOS it stops at"
            )
        self._after_eos = close[len(eos) :]
        self._replied = replied
        whole = self._render([_S, _U, _A, "\x01next\x01"], generation=True)
        pieces = self._render([_S, _U], generation=True) + _A + close + self.user_turn("\x01next\x01")
        if whole != pieces:
            raise ConfigError(
                "the chat template renders earlier turns differently once a turn is added; "
                "an append-only token record needs a template that does not"
            )

    def _render(self, contents: Sequence[str], *, generation: bool) -> str:
        roles = ["system", "user", "assistant", "user"]
        messages = [{"role": role, "content": content} for role, content in zip(roles, contents, strict=False)]
        text: str = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)
        return text

    def user_turn(self, content: str) -> str:
        """A later user message in the template's format, with the generation prefix after it."""
        whole = self._render([_S, _U, _A, content], generation=True)
        return whole[len(self._replied) :]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def prompt_ids(self, system: str, user: str) -> list[int]:
        """Turn 0: the prompt for ``[system, user]`` with the generation prefix."""
        return self.encode(self._render([system, user], generation=True))

    def head_ids(self, system: str) -> list[int]:
        """The ids every episode's prompt with this system message starts with (whatever the user says)."""
        probes = [self.prompt_ids(system, text) for text in ("a", "Z 9", "\n[", "Goal")]
        length = 0
        while all(len(p) > length for p in probes) and len({p[length] for p in probes}) == 1:
            length += 1
        return probes[0][:length]

    def reply_ids(self, text: str) -> list[int]:
        """A reply: its text's ids, then the EOS that ends the turn."""
        return [*self.encode(text), self.eos_id]

    def env_ids(self, user: str) -> list[int]:
        """The environment's answer: the rest of the closed turn, the user message, the generation prefix."""
        return self.encode(self._after_eos + self.user_turn(user))


def sequence_ids(records: Sequence[PolicyTokens]) -> list[int]:
    """The episode's id sequence: ``Σ (prompt_ids + action_ids + env_ids)``, in either form."""
    ids: list[int] = []
    for record in records:
        ids.extend(record.prompt_ids)
        ids.extend(record.action_ids)
        ids.extend(record.env_ids)
    return ids


def turn_prefix(
    turns: ChatTurns,
    system: str,
    task: Task,
    history: Sequence[Step],
    observation: Observation,
    answer_format: AnswerFormat,
    *,
    goal: str | None = None,
    choices: Choices | None = None,
) -> tuple[list[int], list[int]]:
    """The ids the policy feeds its model on this turn, and those this turn's record adds.

    When the last step of ``history`` carries a token record, the prefix is
    the sequence of the trailing run of steps that carry records (exact,
    whatever produced them: chosen or sampled ids), plus the environment's
    answer to the last action, which is what this turn adds. When it does not
    (a scripted prefix, records dropped), the episode is rebuilt from the
    steps' content by the same rules, each piece tokenized alone, replies as
    ``assistant_text`` of their actions, and this turn adds all of it: a
    record after a step without one starts the sequence afresh.

    Args:
        goal: Show this goal in every user message instead of the episode's
            own, rebuilding from content (the chooser's goal-free baseline).
        choices: An ``index`` policy's choices of a page: listed in each user
            message, and a rebuilt reply is the label of its action among them.
    """

    def offered(step_observation: Observation) -> Sequence[Action]:
        return choices(task, step_observation) if choices is not None else ()

    def user(step_observation: Observation) -> str:
        shown = goal if goal is not None else step_observation.goal or task.instruction
        return user_message(shown, step_observation, choices=offered(step_observation))

    records = [step.policy_tokens for step in history]
    if goal is None and records and records[-1] is not None:
        start = max((n + 1 for n, record in enumerate(records) if record is None), default=0)
        prefix = sequence_ids([record for record in records[start:] if record is not None])
        if records[-1].env_ids:
            return prefix, []  # linked records already hold the answer to the last action
        added = turns.env_ids(user(observation))
        return prefix + added, added
    if not history:
        ids = turns.prompt_ids(system, user(observation))
        return ids, list(ids)
    ids = turns.prompt_ids(system, user(history[0].observation))
    for n, step in enumerate(history):
        if n:
            ids += turns.env_ids(user(step.observation))
        ids += turns.reply_ids(assistant_text(step.action, answer_format, offered(step.observation)))
    ids += turns.env_ids(user(observation))
    return ids, list(ids)


def link_turns(records: Sequence[PolicyTokens]) -> tuple[PolicyTokens, ...]:
    """Rewrite one sequence's act-time records (see the module) into the linked form; the ids are unchanged.

    In the linked form only turn 0 has ``prompt_ids`` and each turn's
    ``env_ids`` are the environment's answer to its action (the last turn's
    are empty), as :class:`~dreamgym.core.types.PolicyTokens` describes.
    Linked records stay as they are.
    """
    linked = []
    for n, record in enumerate(records):
        following = records[n + 1].prompt_ids if n + 1 < len(records) else ()
        linked.append(
            PolicyTokens(
                prompt_ids=record.prompt_ids if n == 0 else (),
                action_ids=record.action_ids,
                action_logprobs=record.action_logprobs,
                env_ids=record.env_ids + following,
                action_mask=record.action_mask,
            )
        )
    return tuple(linked)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSequence:
    """An episode's ids as TRL's ``rollout_func`` returns them."""

    prompt_ids: tuple[int, ...]
    """The first turn's prompt."""
    completion_ids: tuple[int, ...]
    """Everything after it: the replies and the environment's answers between them."""
    logprobs: tuple[float, ...]
    """One per completion id: the policy's log-probability, 0.0 for environment ids."""
    env_mask: tuple[int, ...]
    """One per completion id: 1 for the ids the policy sampled (trained); 0 for the environment's
    and for ids appended to a reply without being sampled (a forced end of turn)."""


def episode_sequence(records: Sequence[PolicyTokens]) -> EpisodeSequence:
    """Flatten an episode's records (either form) into prompt, completion, logprobs and mask.

    Raises:
        ConfigError: There are no records.
    """
    if not records:
        raise ConfigError("an episode needs at least one token record; was it run by a token-recording policy?")
    completion: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    for n, record in enumerate(records):
        outside = record.prompt_ids if n else ()
        completion.extend(outside)
        completion.extend(record.action_ids)
        completion.extend(record.env_ids)
        mask.extend([0] * len(outside))
        mask.extend(record.sampled)
        mask.extend([0] * len(record.env_ids))
        logprobs.extend([0.0] * len(outside))
        logprobs.extend(record.action_logprobs)
        logprobs.extend([0.0] * len(record.env_ids))
    return EpisodeSequence(
        prompt_ids=records[0].prompt_ids,
        completion_ids=tuple(completion),
        logprobs=tuple(logprobs),
        env_mask=tuple(mask),
    )
