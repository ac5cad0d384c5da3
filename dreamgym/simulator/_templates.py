"""The experience model's prompt templates: what it reads and how it answers.

One template family, switched by :class:`TemplateConfig`; its
:attr:`~TemplateConfig.template_id` names every switch and is recorded on each
synthetic step, so a store says which prompt produced which prediction. The
paper's ablations are settings: ``history=0`` (no history), ``neighbours=0``
(no retrieval), ``reasoning=False`` (no chain of thought).

The prompt (a system message, then one user message)::

    Task: Enter "Marcella" into the text field and press Submit.
    Similar real transitions (most similar first):
    #1 goal: Enter "Ronda" into the text field and press Submit.
    action: click [e3] "Submit"
    outcome: reward 1, episode ended
    changes: (none)
    History (oldest first):
    step 1: type [e2] [Marcella] [0]
    changes:
    - [e2] textbox
    + [e2] textbox: Marcella
    Current state:
    [e1] generic: Enter "Marcella" into the text field and press Submit.
    [e2] textbox: Marcella
    [e3] button "Submit"
    Action: click [e3] "Submit"

The answer (``<think>`` only when the template asks for reasoning; ``<state>``
with the whole next state instead of ``<diff>`` when ``output="state"``;
``<error>`` only when the action fails on the page)::

    <think>The field holds the requested name, so submitting solves the task.</think>
    <diff>
    </diff>
    <reward>1</reward>
    <done>yes</done>

Changing what a template id renders breaks cached calls and the meaning of
stored steps: make a new version instead (bump ``VERSION``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dreamgym.core.actions import ELEMENT_ACTIONS
from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import ChatMessage, ExperienceQuery, Neighbour
from dreamgym.core.state import diff_states, lean_diff
from dreamgym.core.types import Action, Observation, Step, Task
from dreamgym.simulator._alias import Alias, aliased_query, element_line

__all__ = [
    "MAX_PAST_ACTIONS",
    "VERSION",
    "TemplateConfig",
    "answer_pattern",
    "answer_text",
    "history_of",
    "initial_answer_text",
    "target_line",
]

VERSION = "v1"
"""Version of the text this module renders; part of every template id."""

OutputForm = Literal["diff", "state"]

_SYSTEM = """You are the experience model of a web environment: you predict what a web page shows after an agent acts.
Pages are written one element per line: [id] role "name" [property]: text, two spaces of indent per nesting level.
Given the task, the history, the current page and the action, answer with the page after the action{reasoning}:
{form}
<reward>1 if this action completes the task successfully, else 0</reward>
<done>yes if the episode ends with this action (the task is solved or failed for good), else no</done>
Add <error>why</error> after the page only when the action cannot be carried out on this page."""

_REASONING = ", after thinking step by step inside <think>...</think>"
_DIFF_FORM = (
    "<diff>\nthe changed lines: '- ' removes a line, '+ ' adds one, '  ' is an unchanged line that "
    "locates the change; leave it empty when nothing changes\n</diff>"
)
_STATE_FORM = "<state>\nevery line of the page after the action\n</state>"

_INITIAL_SYSTEM = """You are the experience model of a web environment: you predict what a web page shows.
Pages are written one element per line: [id] role "name" [property]: text, two spaces of indent per nesting level.
Given a task and its start URL, write the page as it first appears, inside <state>...</state>."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateConfig:
    """The switches of the experience model's prompt."""

    history: int = 2
    """How many past (state, action) steps the prompt shows, as the changes each made (H)."""
    neighbours: int = 3
    """How many retrieved real transitions the prompt shows (k); 0 turns retrieval off."""
    reasoning: bool = False
    """Ask for step-by-step reasoning in ``<think>`` before the prediction."""
    output: OutputForm = "diff"
    """Predict the next state as a diff against the current one, or in full."""
    max_state_chars: int = 8000
    """Longer states are cut (with a note) so prompts stay within the model's context."""
    max_change_lines: int = 12
    """Longest diff shown for a retrieved transition or a history step (the rest is counted)."""
    instructions: bool = True
    """Open the prompt with the system message that explains the page format and the answer. A model trained
    from scratch on this template learns both from its examples, and the message, the same in every prompt, was
    a third of the offline default's training tokens (185 of 555 per example): ``False`` leaves it out (the id
    gains ``:bare``)."""
    past_actions: bool = False
    """Name every action the episode took so far on one line just before the action (``Actions so far: ...``,
    ``(none)`` at the first step; the id gains ``:acts``). The history shows only the last ``history`` steps, and
    a sequence task's end depends on an action taken earlier (where a second click ends the episode, the
    first never does); a few tokens per step say it where the model reads the action."""
    target_line: bool = False
    """Repeat the page's line of the element the action targets on one line after the action (``Target: [e5]
    checkbox "kp6"``, the line as the page writes it; ``(none)`` for an action that names no element, ``(not on
    the page)`` for an id the page lacks; the id gains ``:tgt``). A diff's first line is usually that line: the
    demo-size model (two layers) often wrote the first check control's line whatever the action's id was
    (13 of 120 validation steps of the demo's two check-control tasks); next to the answer, the line is there to
    be copied. Measured, it did not help: built twice on the first run's seed set, the demo-size model's first
    answers that applied with nothing overruled were 0.84 and 0.95 of 1,890 open loop, against 0.92 and 0.96
    without the line, with more malformed answers (114 and 75 against 1 and 18;
    ``benchmarks/results/demo_sim_builds.json``). Off by default."""
    target_alias: bool = False
    """Show the element the action works on as ``[e0]`` (:data:`~dreamgym.simulator._alias.TARGET_ALIAS`), in the
    page, the history, the action and the answer, its own id where ``e0`` was; each retrieved transition shows its
    own action's element so (:mod:`~dreamgym.simulator._alias`; the id gains ``:alias``). The answer is read back
    through the same swap, so a store records the page's own ids. A model trained from scratch need not copy the
    action's id to write the element's line: it is always ``[e0]``."""

    def __post_init__(self) -> None:
        if self.history < 0 or self.neighbours < 0:
            raise ConfigError("TemplateConfig.history and .neighbours must be >= 0")
        if self.output not in ("diff", "state"):
            raise ConfigError(f"TemplateConfig.output must be 'diff' or 'state', not {self.output!r}")
        if self.max_state_chars < 200 or self.max_change_lines < 1:
            raise ConfigError("TemplateConfig.max_state_chars must be >= 200 and max_change_lines >= 1")

    @property
    def template_id(self) -> str:
        """E.g. ``experience/v1:h2:k3:direct:diff``; recorded on every synthetic step."""
        mode = "think" if self.reasoning else "direct"
        bare = "" if self.instructions else ":bare"
        acts = ":acts" if self.past_actions else ""
        target = ":tgt" if self.target_line else ""
        alias = ":alias" if self.target_alias else ""
        return (
            f"experience/{VERSION}:h{self.history}:k{self.neighbours}:{mode}:{self.output}{bare}{acts}{target}{alias}"
        )

    @property
    def initial_template_id(self) -> str:
        """The id of the initial-state prompt (used when the store has no real start)."""
        return f"experience/{VERSION}:initial"

    def messages(self, query: ExperienceQuery) -> list[ChatMessage]:
        """The chat prompt for one prediction: the system message (unless ``instructions`` is off), then the query
        (as :meth:`prompt` shows it)."""
        return self.prompt(query)[0]

    def prompt(self, query: ExperienceQuery) -> tuple[list[ChatMessage], Alias]:
        """:meth:`messages`, and the swap of ids that reads an answer to them back to the page's own: with
        ``target_alias`` the prompt shows :func:`~dreamgym.simulator._alias.aliased_query`'s query; else the query
        as it is, and no swap."""
        shown, alias = aliased_query(query) if self.target_alias else (query, Alias())
        user = ChatMessage(role="user", content=self._user_text(shown))
        if not self.instructions:
            return [user], alias
        system = _SYSTEM.format(
            reasoning=_REASONING if self.reasoning else "",
            form=_DIFF_FORM if self.output == "diff" else _STATE_FORM,
        )
        return [ChatMessage(role="system", content=system), user], alias

    def initial_messages(self, task: Task, *, seed: int | None = None) -> list[ChatMessage]:
        """The chat prompt that asks for a task's first page."""
        lines = [f"Task: {task.instruction}"]
        if task.start_url:
            lines.append(f"Start URL: {task.start_url}")
        if seed is not None:
            lines.append(f"Seed: {seed}")
        return [
            ChatMessage(role="system", content=_INITIAL_SYSTEM),
            ChatMessage(role="user", content="\n".join(lines)),
        ]

    def _user_text(self, query: ExperienceQuery) -> str:
        current = query.observation
        lines = [f"Task: {current.goal or query.task.instruction}"]
        if current.url:
            lines.append(f"URL: {current.url}")
        if len(current.tabs) > 1:
            lines.append(f"Tabs: {' | '.join(current.tabs)} (active: {current.active_tab})")
        neighbours = query.neighbours[: self.neighbours]
        if neighbours:
            lines.append("Similar real transitions (most similar first):")
            for n, neighbour in enumerate(neighbours, 1):
                lines.extend(_neighbour_lines(n, neighbour, self.max_change_lines))
        history = query.history[-self.history :] if self.history else ()
        if history:
            lines.append("History (oldest first):")
            first = len(query.history) - len(history) + 1
            following = [obs for obs, _ in history[1:]] + [current]
            for n, ((before, action), after) in enumerate(zip(history, following, strict=True), first):
                lines.append(f"step {n}: {action}")
                lines.extend(_changes(before.state, after.state, after.last_action_error, self.max_change_lines))
        lines.append("Current state:")
        lines.append(self._cut(current.state))
        if current.focused_id:
            lines.append(f"Focused: [{current.focused_id}]")
        if current.last_action_error:
            lines.append(f"Last action error: {current.last_action_error}")
        if self.past_actions:
            lines.append(f"Actions so far: {_past_actions(query.history)}")
        lines.append(f"Action: {query.action}")
        if self.target_line:
            lines.append(f"Target: {target_line(current.state, query.action)}")
        return "\n".join(lines)

    def _cut(self, state: str) -> str:
        if len(state) <= self.max_state_chars:
            return state
        kept = state[: self.max_state_chars].rsplit("\n", 1)[0]
        return f"{kept}\n(... {state.count(chr(10)) - kept.count(chr(10))} more lines cut)"


MAX_PAST_ACTIONS = 24
"""The most earlier actions ``past_actions`` names (the latest; how many more came before is counted)."""


def _past_actions(history: Sequence[tuple[Observation, Action]]) -> str:
    if not history:
        return "(none)"
    named = [str(action) for _, action in history[-MAX_PAST_ACTIONS:]]
    earlier = len(history) - len(named)
    if earlier:
        named.insert(0, f"({earlier} earlier)")
    return " | ".join(named)


def target_line(state: str, action: Action) -> str:
    """The line of ``state`` that writes the element ``action`` targets, as the page writes it (indent and all).

    ``(none)`` where the action names no element (a scroll, a key press) and ``(not on the page)`` where the
    page has no element of that id.
    """
    if action.name not in ELEMENT_ACTIONS or not action.args:
        return "(none)"
    line = element_line(state, action.args[0])
    return "(not on the page)" if line is None else line


def _neighbour_lines(n: int, neighbour: Neighbour, max_lines: int) -> list[str]:
    step = neighbour.step
    ended = "episode ended" if step.terminated else "episode continues"
    lines = [
        f"#{n} goal: {step.observation.goal or step.task_id}",
        f"action: {step.action}",
        f"outcome: reward {_number(step.reward)}, {ended}",
    ]
    after = step.next_observation
    lines.extend(_changes(step.observation.state, after.state, after.last_action_error, max_lines))
    return lines


def _changes(before: str, after: str, error: str, max_lines: int) -> list[str]:
    lines = [f"error: {error}"] if error else []
    diff = diff_states(before, after).split("\n")
    if diff == [""]:
        return [*lines, "changes: (none)"]
    lines.append("changes:")
    lines.extend(diff[:max_lines])
    if len(diff) > max_lines:
        lines.append(f"(... {len(diff) - max_lines} more changed lines)")
    return lines


def _number(value: float) -> str:
    return f"{value:g}"


def answer_text(
    config: TemplateConfig,
    *,
    observation: Observation,
    next_observation: Observation,
    reward: float,
    done: bool,
    reasoning: str = "",
) -> str:
    """The answer the template asks for, written for a known transition (SFT targets)."""
    parts = []
    if config.reasoning:
        parts.append(f"<think>{reasoning.strip()}</think>")
    if config.output == "diff":
        diff = lean_diff(observation.state, next_observation.state)
        parts.append(f"<diff>\n{diff}\n</diff>" if diff else "<diff>\n</diff>")
    else:
        parts.append(f"<state>\n{next_observation.state}\n</state>")
    if next_observation.last_action_error:
        parts.append(f"<error>{next_observation.last_action_error}</error>")
    parts.append(f"<reward>{_number(reward)}</reward>")
    parts.append(f"<done>{'yes' if done else 'no'}</done>")
    return "\n".join(parts)


def answer_pattern(config: TemplateConfig) -> str:
    """A regular expression that every answer :func:`answer_text` writes for ``config`` matches in full.

    For a server's structured output (vLLM's ``structured_outputs`` regex,
    SGLang's ``regex``), so a served model answers in the template's form.
    Kept to what those engines' regex grammars take (no lookarounds, no
    backreferences): reasoning holds no ``<``, a page or diff line any text,
    a reward a number as ``:g`` writes it. The parser stays as tolerant as
    it is; the pattern only keeps a constrained model to the form.
    """
    parts = []
    if config.reasoning:
        parts.append(r"<think>[^<]*</think>\n")
    if config.output == "diff":
        parts.append(r"<diff>\n(?:[-+ ] [^\n]*\n)*</diff>\n")
    else:
        parts.append(r"<state>\n(?:[^\n]+\n)+</state>\n")
    parts.append(r"(?:<error>[^\n]*</error>\n)?")
    parts.append(r"<reward>-?[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?</reward>\n<done>(?:yes|no)</done>")
    return "".join(parts)


def initial_answer_text(observation: Observation) -> str:
    """The answer to :meth:`TemplateConfig.initial_messages` for a known first page."""
    return f"<state>\n{observation.state}\n</state>"


def history_of(steps: Sequence[Step]) -> tuple[tuple[Observation, Action], ...]:
    """The ``ExperienceQuery.history`` of the steps an episode took so far."""
    return tuple((step.observation, step.action) for step in steps)
