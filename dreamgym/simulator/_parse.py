"""A tolerant parser of the experience model's answers (see ``_templates``).

Tolerated: tags in any case, surrounding prose, Markdown code fences, a last
tag left unclosed, an answer that starts inside its page (``</diff>`` or
``</state>`` closes what came before any tag: ``</diff>`` first is an empty
diff, as a small model trained from scratch sometimes writes one), ``+line``
without the space, rewards written ``1.0`` or
``+1``, ``done`` as yes/no/true/false/1/0, and diff removal or context lines
that name a line the page does not have. Such a line that starts with an
element id the page has (``-   [e3] textbox: 9x`` where the page has
``  [e3] textbox``) means that element's line, ids being the page's handles:
it is replaced by the page's own line, and the additions of that id are
indented as the page indents it (``ParsedAnswer.anchored_lines``). Any other
such line carries no change to make, so it is dropped
(``ParsedAnswer.dropped_lines``). Where the diff still does not apply, the
additions that replace or follow such a dropped line (up to the next line
the page has) go with it: they say what changes but not where. This is what
the small models write for a ``select``: the selection moved between the
options of a list retrieved from a neighbour's page
(``-   option "Theodora"`` / ``+   option "Theodora" [selected]`` on a list
without Theodora), which placed at the top of the page broke it; read so,
the page stands unchanged and the simulator's ``select`` rule (``_rules``)
marks the option the action named. The experience model counts answers
repaired either way as ``repaired_answers``; the rest of the prediction
stands. Not tolerated (a
:class:`~dreamgym.core.errors.ModelOutputError` naming what is wrong, which the
experience model answers by retrying): a missing reward, done flag or page, a
diff that does not apply, a page that is not in the state format, an answer
longer than ``MAX_ANSWER_CHARS``.

``salvage=True`` (the experience model's last resort, once every attempt has
failed) also takes a diff that does not apply: its lines are kept in order
while each keeps the page valid, the others are dropped and counted, so the
page keeps the changes that can be placed and the answer's reward and end
stand. A salvaged answer is a worse prediction than a clean one; the model
counts them (``salvaged_answers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dreamgym.core.errors import ModelOutputError, StateFormatError
from dreamgym.core.state import ID_PATTERN, State, apply_diff, parse_state

__all__ = ["MAX_ANSWER_CHARS", "ParsedAnswer", "parse_answer", "parse_initial_answer"]

MAX_ANSWER_CHARS = 200_000
"""Longer answers are refused unread (a runaway generation, not a page)."""

_OPEN = re.compile(r"<(think|diff|state|error|reward|done)>", re.IGNORECASE)
_PAGE_CLOSE = re.compile(r"</(diff|state)>", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*$", re.MULTILINE)
_YES = {"yes", "y", "true", "1", "ended", "end", "done"}
_NO = {"no", "n", "false", "0", "continues", "continue", "not done"}
_LEADING_ID = re.compile(rf" *\[({ID_PATTERN})\] ")
_NO_CHANGE = {"", "(none)", "none", "(no change)", "no change", "unchanged"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedAnswer:
    """What an answer says: the next page, reward, end and reasoning."""

    state: State
    reward: float
    done: bool
    reasoning: str = ""
    error: str = ""
    """The action's failure on the page, when the model says it failed."""
    dropped_lines: int = 0
    """Diff lines dropped because they named page lines that do not exist (a repaired answer)."""
    anchored_lines: int = 0
    """Diff lines that named a page line wrongly but by an id the page has, read as that line (a repaired
    answer)."""


def parse_answer(text: str, current: State | str, *, salvage: bool = False) -> ParsedAnswer:
    """Read an answer to the step prompt; ``current`` is the page before the action.

    Args:
        salvage: Keep the diff's lines that can be placed when the whole diff does
            not apply, instead of raising (see the module).

    Raises:
        ModelOutputError: The answer lacks a part or a part is malformed.
    """
    fields = _fields(text)
    dropped = anchored = 0
    if "diff" in fields:
        state, dropped, anchored = _apply(current, fields["diff"], salvage=salvage)
    elif "state" in fields:
        state = _parse_page(fields["state"])
    else:
        raise ModelOutputError("the answer has neither <diff> nor <state>; the next page is missing")
    return ParsedAnswer(
        state=state,
        reward=_reward(fields),
        done=_done(fields),
        reasoning=fields.get("think", ""),
        error=" ".join(fields.get("error", "").split()),
        dropped_lines=dropped,
        anchored_lines=anchored,
    )


def parse_initial_answer(text: str) -> State:
    """Read an answer to the initial-page prompt.

    Raises:
        ModelOutputError: There is no ``<state>``, or it is not in the state format.
    """
    fields = _fields(text)
    if "state" not in fields:
        raise ModelOutputError("the answer has no <state>; the first page is missing")
    return _parse_page(fields["state"])


def _fields(text: str) -> dict[str, str]:
    if len(text) > MAX_ANSWER_CHARS:
        raise ModelOutputError(f"the answer is {len(text)} characters, over the {MAX_ANSWER_CHARS} accepted")
    text = _FENCE.sub("", text)
    fields: dict[str, str] = {}
    opens = list(_OPEN.finditer(text))
    for n, match in enumerate(opens):
        tag = match.group(1).lower()
        if tag in fields:
            continue  # the first occurrence counts; later ones are the model repeating itself
        end_of_body = opens[n + 1].start() if n + 1 < len(opens) else len(text)
        body = text[match.end() : end_of_body]
        close = re.search(rf"</{tag}>", body, re.IGNORECASE)
        fields[tag] = (body[: close.start()] if close else body).strip("\n").rstrip()
    head = text[: opens[0].start()] if opens else text
    unopened = _PAGE_CLOSE.search(head)  # the page's opening tag left out: the answer started inside it
    if unopened and "diff" not in fields and "state" not in fields:
        fields[unopened.group(1).lower()] = head[: unopened.start()].strip("\n").rstrip()
    return fields


def _apply(current: State | str, diff: str, *, salvage: bool = False) -> tuple[State, int, int]:
    """The page the diff makes, how many of its lines were dropped and how many read by their element id."""
    lines = [_fix_prefix(line) for line in diff.split("\n") if line.strip()]
    base = current if isinstance(current, State) else parse_state(current)
    if " ".join(lines).strip().lower() in _NO_CHANGE:
        return base, 0, 0
    try:
        return apply_diff(base, "\n".join(lines), strict=False), 0, 0
    except StateFormatError:  # a diff that does not apply, or one that breaks the page
        pass
    page = base.render().split("\n")
    kept, anchored = _repair(page, lines)
    try:
        return apply_diff(base, "\n".join(kept), strict=False), len(lines) - len(kept), anchored
    except StateFormatError as exc:
        error = exc
    placeable, _ = _repair(page, lines, drop_orphans=True)  # the same lines read by id: dropping adds none
    if placeable != kept:  # the additions that replaced (or followed) absent lines, dropped with them
        try:
            return apply_diff(base, "\n".join(placeable), strict=False), len(lines) - len(placeable), anchored
        except StateFormatError:
            pass
    if not salvage:
        raise ModelOutputError(f"the <diff> does not apply to the current page: {error}") from error
    placed: list[str] = []
    for line in kept:
        try:
            apply_diff(base, "\n".join([*placed, line]), strict=False)
        except StateFormatError:
            continue
        placed.append(line)
    if not placed:  # nothing of it stands: not an unchanged page with the answer's reward
        raise ModelOutputError("none of the <diff>'s lines can be placed on the current page")
    return apply_diff(base, "\n".join(placed), strict=False), len(lines) - len(placed), anchored


def _repair(page: list[str], lines: list[str], *, drop_orphans: bool = False) -> tuple[list[str], int]:
    """The diff with its removal and context lines that the page lacks read by element id, or dropped; and how
    many were read by id. An addition of a re-read id takes the page's indentation of that element.

    ``drop_orphans`` also drops the additions whose nearest earlier removal or context line was dropped: they
    replace, or follow, a line the page does not have, so they have no place on it."""
    present = set(page)
    by_id = {match.group(1): line for line in page if (match := _LEADING_ID.match(line))}
    kept: list[str] = []
    indents: dict[str, str] = {}
    anchored = 0
    orphaned = False
    for line in lines:
        body = line[2:]
        match = _LEADING_ID.match(body)
        if line.startswith("+ "):
            if drop_orphans and orphaned:
                continue
            if match and match.group(1) in indents:
                line = "+ " + indents[match.group(1)] + body.lstrip(" ")
            kept.append(line)
            continue
        orphaned = False
        if body in present:
            kept.append(line)
        elif match and match.group(1) in by_id:
            own = by_id[match.group(1)]
            indents[match.group(1)] = own[: len(own) - len(own.lstrip(" "))]
            kept.append(line[:2] + own)
            anchored += 1
        else:  # a line the page does not have carries no change to make
            orphaned = True
    return kept, anchored


def _fix_prefix(line: str) -> str:
    if line[:1] in "+-" and line[1:2] not in (" ", ""):
        return f"{line[0]} {line[1:]}"
    return line


def _parse_page(text: str) -> State:
    try:
        return parse_state(text)
    except StateFormatError as exc:
        raise ModelOutputError(f"the page in <state> is not in the state format: {exc}") from exc


def _reward(fields: dict[str, str]) -> float:
    if "reward" not in fields:
        raise ModelOutputError("the answer has no <reward>")
    match = _NUMBER.search(fields["reward"])
    if match is None:
        raise ModelOutputError(f"<reward> is not a number: {fields['reward'][:40]!r}")
    return float(match.group())


def _done(fields: dict[str, str]) -> bool:
    if "done" not in fields:
        raise ModelOutputError("the answer has no <done>")
    word = fields["done"].strip().strip(".").lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    raise ModelOutputError(f"<done> must be yes or no, not {fields['done'][:40]!r}")
