"""The action space: WebArena's id-based actions, defined once.

Each action is a function below whose docstring is what prompts show
(:func:`describe_actions` lists them), and which builds the
:class:`~dreamgym.core.types.Action` record. Action text has the form::

    name [arg] [arg] ... ["label"]

where ``label`` is an optional JSON string naming the targeted element
(``click [e5] "Yes"``); choosers see it, environments ignore it. Free-text
arguments (typed text, a URL, an answer) may contain ``]``: the parser reads
them up to the last ``]``.

:func:`parse_action` is strict: the whole text must be exactly one action, and
anything else raises :class:`~dreamgym.core.errors.ActionParseError`.
:func:`try_parse_action` never raises: unparseable text becomes an
``invalid`` action that environments answer with ``last_action_error``.
Action strings are parsed, never executed.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dreamgym.core.errors import ActionParseError
from dreamgym.core.state import ID_PATTERN, Element, State, flatten
from dreamgym.core.types import Action

__all__ = [
    "ACTIONS",
    "ELEMENT_ACTIONS",
    "ActionSpec",
    "action_error",
    "candidate_actions",
    "click",
    "close_tab",
    "describe_actions",
    "go_back",
    "go_forward",
    "goto",
    "hover",
    "invalid_action",
    "missing_element_error",
    "new_tab",
    "parse_action",
    "press",
    "quoted_spans",
    "scroll",
    "select",
    "stop",
    "tab_focus",
    "try_parse_action",
    "type_text",
]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action's definition, read from its builder function."""

    name: str
    params: tuple[str, ...]
    description: str
    examples: tuple[str, ...]
    pattern: re.Pattern[str]
    """Matches the bracketed arguments (the text after the name)."""
    builder: Callable[..., Action]

    def signature(self) -> str:
        return " ".join([self.name, *(f"[{p}]" for p in self.params)])


ACTIONS: dict[str, ActionSpec] = {}
"""Every action by name, in the order prompts list them."""

_ELEMENT = rf" \[({ID_PATTERN})\]"
_FREE = r" \[(.*)\]"


def _action(*arg_patterns: str, name: str | None = None) -> Callable[[Callable[..., Action]], Callable[..., Action]]:
    """Register a builder; each pattern matches one ``" [arg]"`` (optional ones say so themselves)."""

    def register(builder: Callable[..., Action]) -> Callable[..., Action]:
        doc = inspect.getdoc(builder) or ""
        description, _, example_block = doc.partition("Examples:")
        params = tuple(inspect.signature(builder).parameters)
        spec = ActionSpec(
            name=name or builder.__name__,
            params=params,
            description=" ".join(description.split()),
            examples=tuple(line.strip() for line in example_block.strip().splitlines() if line.strip()),
            pattern=re.compile("".join(arg_patterns)),
            builder=builder,
        )
        ACTIONS[spec.name] = spec
        return builder

    return register


# Builders. Their docstrings are the prompt text: keep them short and exact.


@_action(_ELEMENT)
def click(element: str) -> Action:
    """Click the element with this id.

    Examples:
        click [e12]
    """
    return Action(name="click", args=(element,))


# Lazy text, so that a trailing [0] or [1] is read as the flag; text may hold "]".
@_action(_ELEMENT, r" \[(.*?)\]", r"(?: \[([01])\])?", name="type")
def type_text(element: str, text: str, press_enter_after: str = "1") -> Action:
    """Type text into the field with this id, replacing its content; then press Enter unless press_enter_after is 0.

    Examples:
        type [e7] [blue shoes] [1]
        type [e3] [lyda] [0]
    """
    if press_enter_after not in ("0", "1"):
        raise ActionParseError(f"press_enter_after must be 0 or 1, not {press_enter_after!r}")
    return Action(name="type", args=(element, text, press_enter_after))


@_action(_ELEMENT)
def hover(element: str) -> Action:
    """Move the mouse over the element with this id.

    Examples:
        hover [e4]
    """
    return Action(name="hover", args=(element,))


@_action(r" \[([^\]]+)\]")
def press(key_comb: str) -> Action:
    """Press a key or key combination (Playwright key names joined by +).

    Examples:
        press [Enter]
        press [Control+a]
    """
    return Action(name="press", args=(key_comb,))


@_action(r" \[(up|down)\]")
def scroll(direction: str) -> Action:
    """Scroll the page up or down.

    Examples:
        scroll [down]
    """
    return Action(name="scroll", args=(direction,))


@_action(_ELEMENT, _FREE)
def select(element: str, option: str) -> Action:
    """Choose the option with this text in the select box with this id.

    Examples:
        select [e9] [Blue]
    """
    return Action(name="select", args=(element, option))


@_action()
def new_tab() -> Action:
    """Open a new, empty tab and switch to it.

    Examples:
        new_tab
    """
    return Action(name="new_tab")


@_action(r" \[(\d+)\]")
def tab_focus(tab_index: str) -> Action:
    """Switch to the tab with this index (0 is the first).

    Examples:
        tab_focus [1]
    """
    return Action(name="tab_focus", args=(tab_index,))


@_action()
def close_tab() -> Action:
    """Close the current tab.

    Examples:
        close_tab
    """
    return Action(name="close_tab")


@_action(_FREE)
def goto(url: str) -> Action:
    """Go to this URL in the current tab.

    Examples:
        goto [http://127.0.0.1:8000/index.html]
    """
    return Action(name="goto", args=(url,))


@_action()
def go_back() -> Action:
    """Go back to the previous page.

    Examples:
        go_back
    """
    return Action(name="go_back")


@_action()
def go_forward() -> Action:
    """Go forward to the next page (after go_back).

    Examples:
        go_forward
    """
    return Action(name="go_forward")


@_action(r"(?: \[(.*)\])?")
def stop(answer: str = "") -> Action:
    """End the episode; give the answer if the task asks a question, else leave the brackets empty.

    Examples:
        stop [42]
        stop []
    """
    return Action(name="stop", args=(answer,))


_LABEL = re.compile(r' ("(?:[^"\\]|\\.)*")$')
_NAME = re.compile(r"[a-z_]+")


def parse_action(text: str) -> Action:
    """Parse exactly one action; surrounding whitespace is ignored.

    Raises:
        ActionParseError: The text is not one action; the message says why.

    Example:
        >>> str(parse_action('click [e5] "Yes"'))
        'click [e5] "Yes"'
    """
    body = text.strip()
    name_match = _NAME.match(body)
    if name_match is None:
        raise ActionParseError(f"{_short(text)} does not start with an action name; {_known()}")
    spec = ACTIONS.get(name_match.group())
    if spec is None:
        raise ActionParseError(f"unknown action {name_match.group()!r}; {_known()}")
    rest, label = body[name_match.end() :], ""
    if (label_match := _LABEL.search(rest)) is not None:
        label = json.loads(label_match.group(1))
        rest = rest[: label_match.start()]
    args = spec.pattern.fullmatch(rest)
    if args is None:
        raise ActionParseError(f"{_short(text)} does not match {spec.signature()!r}, e.g. {spec.examples[0]!r}")
    action = spec.builder(*(arg for arg in args.groups() if arg is not None))  # absent optionals take defaults
    return Action(name=action.name, args=action.args, label=label, raw=text)


def try_parse_action(text: str) -> Action:
    """Like :func:`parse_action`, but unparseable text becomes an invalid action."""
    try:
        return parse_action(text)
    except ActionParseError as exc:
        return invalid_action(text, str(exc))


def invalid_action(raw: str, error: str) -> Action:
    """The record of text that is not an action; environments report ``error``."""
    return Action(name="invalid", raw=raw, error=error)


ELEMENT_ACTIONS = frozenset(["click", "type", "hover", "select"])
"""Actions whose first argument is the id of an element of the current state."""


def missing_element_error(element: str) -> str:
    """The ``last_action_error`` both sides report for an id the page does not have."""
    return f"there is no element [{element}] on the page; use the ids of the latest observation"


def action_error(action: Action, state: State) -> str:
    """Why ``action`` cannot be carried out on ``state`` before touching any page, or ``""``.

    Catches what needs no page: unparseable text and ids the state does not
    hold. The simulator answers these by rule, as the real side would.
    """
    if action.is_invalid:
        return action.error or f"not an action: {action.raw!r}"
    if action.name in ELEMENT_ACTIONS and state.find(action.args[0]) is None:
        return missing_element_error(action.args[0])
    return ""


def describe_actions(names: Iterable[str] | None = None) -> str:
    """The action list for a prompt, generated from the definitions above."""
    chosen = [ACTIONS[n] for n in names] if names is not None else list(ACTIONS.values())
    lines = []
    for spec in chosen:
        lines.append(f"{spec.signature()}: {spec.description}")
        lines.extend(f"    e.g. {example}" for example in spec.examples)
    return "\n".join(lines)


def _known() -> str:
    return "expected one of: " + ", ".join(ACTIONS)


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


# --------------------------------------------------------------------------- candidates

CLICKABLE_ROLES = frozenset(
    [
        "button",
        "link",
        "checkbox",
        "radio",
        "switch",
        "tab",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "option",
        "treeitem",
        "gridcell",
        "columnheader",
    ]
)
TEXT_ROLES = frozenset(["textbox", "searchbox", "combobox", "spinbutton"])
SELECT_ROLES = frozenset(["combobox", "listbox"])

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|(?<![\w])\'([^\']+)\'(?![\w])')


def quoted_spans(instruction: str) -> tuple[str, ...]:
    """The quoted spans of an instruction, in order, without repeats.

    Double quotes, curly quotes, and single quotes that stand at word
    boundaries (so ``don't`` is not a quote) all count.
    """
    spans: list[str] = []
    for match in _QUOTED.finditer(instruction):
        span = next(group for group in match.groups() if group is not None).strip()
        if span and span not in spans:
            spans.append(span)
    return tuple(spans)


def candidate_actions(
    state: State,
    instruction: str,
    *,
    include_scroll: bool = True,
    press_enter_after: Sequence[str] = ("0",),
) -> tuple[Action, ...]:
    """The valid actions of a state, for policies that choose instead of generate.

    - ``click`` for elements with a clickable role or ``cursor=pointer``;
    - ``type`` into text fields, one per quoted span of the instruction and
      per ``press_enter_after`` value (no quoted span, no ``type``);
    - ``select`` for each option of a select box that is not already selected;
    - ``scroll [down]`` and ``scroll [up]`` when ``include_scroll``.

    Candidates carry the element's name as label (``click [e5] "Yes"``), which
    is what lets a small model choose well. Only elements with an id count.
    """
    spans = quoted_spans(instruction)
    actions: list[Action] = []
    for flat in flatten(state):
        element = flat.element
        if element.id:
            actions.extend(_element_candidates(element, spans, press_enter_after))
    if include_scroll:
        actions.extend([scroll("down"), scroll("up")])
    unique = dict.fromkeys(actions)
    return tuple(unique)


def _element_candidates(element: Element, spans: Sequence[str], enter: Sequence[str]) -> Iterable[Action]:
    label = element.name or element.text
    role = element.role
    if role in CLICKABLE_ROLES or "cursor=pointer" in element.props:
        yield _labelled(click(element.id), label)
    if role in TEXT_ROLES:
        for span in spans:
            for flag in enter:
                yield _labelled(type_text(element.id, span, flag), label)
    if role in SELECT_ROLES:
        for child in flatten(State(element.children)):
            option = child.element
            if option.role == "option" and option.name and "selected" not in option.props:
                yield _labelled(select(element.id, option.name), label)


def _labelled(action: Action, label: str) -> Action:
    return Action(name=action.name, args=action.args, label=label)
