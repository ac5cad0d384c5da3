"""The policies' prompt text and the parser of their answers: pure functions.

Two answer formats:

- ``"tagged"`` (chat models that generate): ``<think>reasoning</think><action>one action</action>``.
  :func:`parse_agent_answer` reads it strictly: exactly one ``<action>`` tag,
  whose content :func:`~dreamgym.core.actions.parse_action` accepts; anything
  else becomes an invalid action (data, with the reason), never an exception.
- ``"action"`` (choosers that score candidates): the answer is one action, bare.
- ``"index"`` (policies that pick a listed choice): the user message lists the
  page's candidate actions, each behind a label token of :data:`INDEX_TOKENS`
  (``<a0> click [e5] "Yes"``), and the answer is one label token. The
  choices the goal names (every word of the element's name, or of the option
  a ``select`` picks, is a word of the goal) come first and end with
  :data:`IN_GOAL` (:func:`goal_first`), as a candidate ranker ranks elements
  before the model picks one (Mind2Web's MindAct): a model trained from
  scratch on a few hundred pages cannot learn to match strings, a page with
  more candidates than label tokens keeps the ones the goal names, and what
  is left to learn is which named choice comes when.

A user message shows optionally the last actions taken, the observation as
:func:`render_observation` writes it (URL, tabs, focus, the last action's
error, then the page in the abstract state format), and last the goal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from dreamgym.core.actions import describe_actions, invalid_action, try_parse_action
from dreamgym.core.protocols import ChatMessage
from dreamgym.core.types import Action, Observation, Step, Task

__all__ = [
    "INDEX_TOKENS",
    "IN_GOAL",
    "AnswerFormat",
    "agent_messages",
    "assistant_text",
    "choice_lines",
    "goal_first",
    "parse_agent_answer",
    "render_observation",
    "system_message",
    "user_message",
]

AnswerFormat = Literal["tagged", "action", "index"]
"""How the policy answers: ``tagged`` (think + action tags), ``action`` (one bare action) or
``index`` (the label token of one listed choice)."""

INDEX_TOKENS: tuple[str, ...] = tuple(f"<a{n}>" for n in range(64))
"""The label tokens of an ``index`` policy's choices, in order: each must be one token of its
tokenizer (:func:`dreamgym.agents.add_index_tokens` adds them). A page's candidates past the
64th are not offered."""

IN_GOAL = "(in goal)"
"""The mark after an ``index`` choice whose target the goal names (see :func:`choice_lines`)."""

_WORD = re.compile(r"[0-9a-z]+")

_ROLE = (
    "You are a web agent. You see a web page as an accessibility tree, one element per line, "
    "each element an id in brackets, a role, a name in quotes and properties; "
    "you act on elements by their ids, one action at a time, to reach the goal."
)
_FORMATS: dict[str, str] = {
    "tagged": (
        "Answer in exactly this format:\n<think>your reasoning, briefly</think><action>one action</action>\n"
        'e.g. <think>The goal asks for "Yes".</think><action>click [e5] "Yes"</action>'
    ),
    "action": 'Answer with exactly one action and nothing else, e.g. click [e5] "Yes"',
    "index": "Answer with the label of exactly one of the listed choices and nothing else, e.g. <a0>",
}

_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_THINK_TAG = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def system_message(
    answer_format: AnswerFormat, *, actions: Iterable[str] | None = None, list_actions: bool = True
) -> str:
    """The system message: the agent's role, the action list (from ``describe_actions``), the answer format.

    Args:
        answer_format: ``"tagged"`` or ``"action"``.
        actions: Names of the actions to list; ``None`` lists every action.
        list_actions: Whether to list the actions at all (a chooser does not need them).
    """
    parts = [_ROLE]
    if list_actions:
        parts.append("Actions:\n" + describe_actions(actions))
    parts.append(_FORMATS[answer_format])
    return "\n\n".join(parts)


def render_observation(observation: Observation) -> str:
    """An observation as prompt text: page facts present (URL, tabs, focus, last error), then the page.

    Example:
        >>> render_observation(Observation(state='[e1] button "OK"', url="http://x/"))
        'URL: http://x/\\nPage:\\n[e1] button "OK"'
    """
    lines = []
    if observation.url:
        lines.append(f"URL: {observation.url}")
    if observation.tabs:
        tabs = [
            f"{n}: {title}" + (" (active)" if n == observation.active_tab else "")
            for n, title in enumerate(observation.tabs)
        ]
        lines.append("Tabs: " + " | ".join(tabs))
    if observation.focused_id:
        lines.append(f"Focused: [{observation.focused_id}]")
    if observation.last_action_error:
        lines.append(f"Error of the last action: {observation.last_action_error}")
    lines.append("Page:")
    lines.append(observation.state)
    if observation.cut_note:
        lines.append(f"({observation.cut_note})")
    return "\n".join(lines)


def user_message(
    instruction: str,
    observation: Observation,
    previous_actions: Sequence[Action] = (),
    choices: Sequence[Action] = (),
) -> str:
    """The user message of one turn: the previous actions (oldest first), the observation, the choices, the goal.

    ``choices`` (an ``index`` policy's) are listed behind their label tokens.
    The goal comes last, next to the answer, where a small model heeds it most.
    """
    lines = []
    if previous_actions:
        lines.append("Previous actions (oldest first):")
        lines.extend(f"- {action}" for action in previous_actions)
    lines.append(render_observation(observation))
    if choices:
        lines.append("Choices:")
        lines.extend(choice_lines(choices, instruction))
    lines.append(f"Goal: {instruction}")
    return "\n".join(lines)


def choice_lines(choices: Sequence[Action], goal: str = "") -> list[str]:
    """Each choice behind its label token, marked :data:`IN_GOAL` where ``goal`` names its target.

    A choice's target is the option a ``select`` picks, else its element's
    name (the action's label); the goal names it when every word of it
    (letters and digits, any case) is a word of the goal. Typed text is not
    a target: it is always the goal's own.

    Example:
        >>> ok, no = Action("click", ("e5",), label="OK"), Action("click", ("e6",), label="Cancel")
        >>> choice_lines([ok, no], 'Click on the "ok" button.')
        ['<a0> click [e5] "OK" (in goal)', '<a1> click [e6] "Cancel"']

    Raises:
        ValueError: More choices than :data:`INDEX_TOKENS`.
    """
    if len(choices) > len(INDEX_TOKENS):
        raise ValueError(f"{len(choices)} choices, but only {len(INDEX_TOKENS)} label tokens")
    words = _words(goal)
    return [
        f"{label} {action}" + (f" {IN_GOAL}" if _named(action, words) else "")
        for label, action in zip(INDEX_TOKENS, choices, strict=False)
    ]


def goal_first(choices: Sequence[Action], goal: str) -> tuple[Action, ...]:
    """``choices`` with those whose target ``goal`` names first, each part in its own order.

    Example:
        >>> ok, no = Action("click", ("e5",), label="OK"), Action("click", ("e6",), label="Cancel")
        >>> [a.label for a in goal_first([no, ok], 'Click on the "ok" button.')]
        ['OK', 'Cancel']
    """
    words = _words(goal)
    return tuple(sorted(choices, key=lambda action: not _named(action, words)))


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _named(action: Action, goal_words: set[str]) -> bool:
    target = action.args[1] if action.name == "select" and len(action.args) > 1 else action.label
    named = _words(target)
    return bool(named) and named <= goal_words


def agent_messages(
    task: Task,
    history: Sequence[Step],
    observation: Observation,
    *,
    answer_format: AnswerFormat = "tagged",
    history_actions: int = 5,
    actions: Iterable[str] | None = None,
) -> list[ChatMessage]:
    """A one-turn chat prompt for the next action: system message, then one user message.

    The user message shows ``observation.goal or task.instruction``, the last
    ``history_actions`` actions taken, and the current observation.
    """
    shown = [step.action for step in history][-history_actions:] if history_actions > 0 else []
    return [
        ChatMessage(role="system", content=system_message(answer_format, actions=actions)),
        ChatMessage(role="user", content=user_message(observation.goal or task.instruction, observation, shown)),
    ]


def parse_agent_answer(text: str) -> tuple[Action, str]:
    """Read a tagged answer into ``(action, reasoning)``; never raises.

    Exactly one ``<action>…</action>`` must be present and hold one action;
    otherwise the action is invalid and its ``error`` says why. The
    reasoning is the ``<think>`` content (empty without one). A valid action's
    ``raw`` is the tag's content; an invalid one's is that content, or the
    answer without its ``<think>`` block when no single tag was found.

    Example:
        >>> action, why = parse_agent_answer('<think>OK it is</think><action>click [e2]</action>')
        >>> str(action), why
        ('click [e2]', 'OK it is')
    """
    reasoning = "\n".join(part.strip() for part in _THINK_TAG.findall(text))
    opened, closed = text.count("<action>"), text.count("</action>")
    tags = _ACTION_TAG.findall(text)
    if opened != 1 or closed != 1 or len(tags) != 1:
        outside = _THINK_TAG.sub("", text).strip()
        if opened == 0 and closed == 0:
            reason = "the answer has no <action>...</action> tag; end it with <action>one action</action>"
        else:
            reason = (
                f"the answer must hold exactly one <action>...</action> tag, found {opened} opening and "
                f"{closed} closing tags; give one action per answer"
            )
        return invalid_action(outside, reason), reasoning
    content = tags[0].strip()
    action = try_parse_action(content)
    if action.is_invalid:
        return invalid_action(content, f"the <action> tag does not hold one action: {action.error}"), reasoning
    return action, reasoning


def assistant_text(action: Action, answer_format: AnswerFormat, choices: Sequence[Action] = ()) -> str:
    """How ``action`` reads as the agent's reply in ``answer_format`` (without reasoning).

    In ``index`` format it is the label of ``action`` among ``choices``, or the
    bare action when it is not one of them (a scripted step).
    """
    if answer_format == "tagged":
        return f"<action>{action}</action>"
    if answer_format == "index" and action in choices:
        return INDEX_TOKENS[list(choices).index(action)]
    return str(action)
