"""Capture: a Playwright ARIA snapshot (``mode="ai"``) rendered into ``core``'s state format.

This is the sim-to-real consistency mapping, so it is a pure function of the
snapshot text and the episode's :class:`RefMap`, tested on recorded snapshots.

Playwright's snapshot is YAML: one ``- role "name" [attr] [ref=eN]: text``
per element, children indented below; whole keys are single-quoted when they
hold ``": "``, and values double-quoted when YAML needs it. ``[ref=eN]``
handles come from a per-document counter, so a re-rendered element gets a new
number; :class:`RefMap` maps each ref, in order of first appearance in the
episode, to an episode-local id (``e1``, ``e2``, ...) and back, so the same
task and seed give the same observation.

Pruning: ``generic`` containers with no name, text or attributes are replaced
by their children; ``/url`` and other ``/``-properties are dropped; the
``[active]`` attribute becomes the observation's ``focused_id`` instead of a
prop (focus would otherwise flicker through the state). The rendered state is
capped at ``max_chars``: first the longest run of similar siblings (table
rows, list items) is windowed at the page's scroll position, so the page's
tail, pagination and controls stay and scrolling reaches every row; then, if
it still does not fit, whole lines are cut from the end. The observation's
``cut_note`` says what was left out and how to reach it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from dreamgym.bridge._window import window_longest_run
from dreamgym.core.errors import StateFormatError
from dreamgym.core.state import ROLE_PATTERN, Element, State, render_state

__all__ = ["CapturedState", "RefMap", "render_snapshot"]

_LINE = re.compile(r"(?P<indent> *)- (?P<body>.*)")
_ROLE = re.compile(ROLE_PATTERN)
_ATTR = re.compile(r" \[(?P<attr>[^\]]+)\]")
_json = json.JSONDecoder()


@dataclass
class RefMap:
    """Playwright refs ↔ episode-local element ids, in order of first appearance."""

    to_local: dict[str, str] = field(default_factory=dict)
    to_ref: dict[str, str] = field(default_factory=dict)

    def local(self, ref: str) -> str:
        existing = self.to_local.get(ref)
        if existing is not None:
            return existing
        local = f"e{len(self.to_local) + 1}"
        self.to_local[ref] = local
        self.to_ref[local] = ref
        return local

    def ref(self, local: str) -> str | None:
        return self.to_ref.get(local)


@dataclass(frozen=True, slots=True)
class CapturedState:
    text: str
    """The state, rendered (and cut to the cap)."""
    focused_id: str
    cut_note: str


@dataclass
class _Node:
    role: str
    name: str = ""
    ref: str = ""
    props: list[str] = field(default_factory=list)
    text: str = ""
    active: bool = False
    children: list[_Node] = field(default_factory=list)


def render_snapshot(
    snapshot: str, refs: RefMap, *, max_chars: int = 20_000, position: float | None = 0.0
) -> CapturedState:
    """Render a ``mode="ai"`` snapshot into the abstract state format.

    Over ``max_chars``, the longest run of similar siblings is windowed at
    ``position`` (the page's scroll position, 0..1; see
    :mod:`dreamgym.bridge._window`), then whole lines are cut from the end if
    it still does not fit. ``position=None`` skips the windowing.

    Raises:
        StateFormatError: A line is not an ARIA snapshot line.
    """
    roots = _parse(snapshot)
    focused: list[str] = []
    elements = tuple(e for node in roots for e in _convert(node, refs, focused))  # every id, shown or not
    notes = []
    if position is not None:
        elements, windowed = window_longest_run(elements, max_chars=max_chars, position=position)
        notes.append(windowed)
    lines = render_state(State(elements)).split("\n") if elements else []
    text, cut = _cap(lines, max_chars)
    notes.append(cut)
    return CapturedState(text=text, focused_id=focused[0] if focused else "", cut_note="; ".join(filter(None, notes)))


def _parse(snapshot: str) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for number, raw in enumerate(snapshot.split("\n"), start=1):
        if not raw.strip():
            continue
        match = _LINE.fullmatch(raw)
        if match is None:
            raise StateFormatError(f"snapshot line {number} is not '- role ...': {raw!r}")
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        node = _parse_body(match["body"], number)
        if node is None:  # a "/url:"-style property of the parent: dropped
            continue
        (parent.children if parent else roots).append(node)
        stack.append((indent, node))
    return roots


def _parse_body(body: str, number: int) -> _Node | None:
    if body.startswith("/"):
        return None
    key, value = _split_key(body)
    role_match = _ROLE.match(key)
    if role_match is None:
        raise StateFormatError(f"snapshot line {number} has no role: {body!r}")
    node = _Node(role=role_match.group())
    pos = role_match.end()
    if key.startswith(' "', pos):
        try:
            node.name, pos = _json.raw_decode(key, pos + 1)
        except json.JSONDecodeError as exc:
            raise StateFormatError(f"snapshot line {number} has a malformed name: {body!r}") from exc
    while (attr := _ATTR.match(key, pos)) is not None:
        pos = attr.end()
        value_of = attr["attr"]
        if value_of.startswith("ref="):
            node.ref = value_of[4:]
        elif value_of == "active":
            node.active = True
        else:
            node.props.append(value_of)
    node.text = _clean(_scalar(value)) if value else ""
    return node


def _split_key(body: str) -> tuple[str, str]:
    """Split ``key: value`` where the key may be a single-quoted YAML scalar."""
    if body.startswith("'"):
        end = 1
        while True:
            end = body.index("'", end)
            if body.startswith("''", end):
                end += 2
                continue
            break
        key, rest = body[1:end].replace("''", "'"), body[end + 1 :]
    else:
        key, rest = _unquoted_key(body)
    if rest.startswith(":"):
        return key, rest[1:].strip()
    return key, ""


def _unquoted_key(body: str) -> tuple[str, str]:
    """An unquoted key ends at the first ':' outside a double-quoted name."""
    in_string = escaped = False
    for i, char in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == ":" and (i + 1 == len(body) or body[i + 1] == " "):
            return body[:i], body[i:]
    return body, ""


def _scalar(value: str) -> str:
    if value.startswith('"'):
        try:
            decoded, _ = _json.raw_decode(value)
            return str(decoded)
        except json.JSONDecodeError:
            return value
    if value.startswith("'") and value.endswith("'") and len(value) >= 2:
        return value[1:-1].replace("''", "'")
    return value


def _clean(text: str) -> str:
    return " ".join(text.split())


def _convert(node: _Node, refs: RefMap, focused: list[str]) -> list[Element]:
    if node.role == "generic" and not (node.name or node.text or node.props):
        # An anonymous wrapper: its children stand in its place, and it takes no id.
        return [e for child in node.children for e in _convert(child, refs, focused)]
    local = refs.local(node.ref) if node.ref else ""  # before the children: ids in reading order
    if node.active and local:
        focused.append(local)
    children = tuple(e for child in node.children for e in _convert(child, refs, focused))
    return [
        Element(
            role=node.role,
            name=_clean(node.name),
            id=local,
            props=tuple(node.props),
            text=node.text,
            children=children,
        )
    ]


def _cap(lines: list[str], max_chars: int) -> tuple[str, str]:
    total = sum(len(line) + 1 for line in lines)
    if total <= max_chars:
        return "\n".join(lines), ""
    kept, size = [], 0
    for line in lines:
        if size + len(line) + 1 > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept), f"cut {len(lines) - len(kept)} of {len(lines)} lines to stay under {max_chars} characters"
