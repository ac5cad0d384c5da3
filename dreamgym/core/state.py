"""The abstract state format shared by the real and the synthetic side.

A state is a tree of elements rendered one element per line, two spaces of
indentation per nesting level::

    [e1] heading "Sign in" [level=1]
    [e2] form "Login"
      [e3] textbox "Username": lyda
      [e4] checkbox "Remember me" [checked]
      [e5] button "Sign in" [cursor=pointer]
    text: Forgot your password?

Grammar of one line (a ``StateFormatError`` names the line that breaks it)::

    line  := indent ["[" id "] "] role [" " name] {" [" prop "]"} [": " text]
    indent:= "  " * depth          depth <= depth of the line above + 1
    id    := [A-Za-z0-9_.:-]+      episode-local handle actions refer to
    role  := [A-Za-z][A-Za-z0-9_-]*
    name  := a JSON string literal ("..." with JSON escapes)
    prop  := one or more characters other than "]" (e.g. checked, level=2)
    text  := the rest of the line; one line, no leading or trailing spaces

Elements without an id are static content (text, generic containers) that
actions cannot target. ``parse_state(render_state(s)) == s`` for every state.

A *state diff* is a line diff that an experience model can emit instead of a
whole state. Each diff line is a two-character prefix and a state line::

    "  " line   context: found at or after the cursor (consecutive context
                lines are found as a block); the cursor moves past it
    "- " line   removal: must be the line at the cursor; the cursor moves past
    "+ " line   addition: inserted at the cursor

Lines not mentioned are kept. :func:`diff_states` emits the least context
that makes the diff apply unambiguously, and
``apply_diff(a, diff_states(a, b)) == b`` always holds.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dreamgym.core.errors import DiffApplyError, StateFormatError

__all__ = [
    "ID_PATTERN",
    "ROLE_PATTERN",
    "Element",
    "ElementMatch",
    "FlatElement",
    "State",
    "apply_diff",
    "diff_states",
    "flatten",
    "lean_diff",
    "match_elements",
    "parse_state",
    "render_state",
]

ID_PATTERN = r"[A-Za-z0-9_.:-]+"
"""An element id (the grammar's ``id``): actions, diffs and the parser of model answers read ids with it."""
ROLE_PATTERN = r"[A-Za-z][A-Za-z0-9_-]*"
"""An element role (the grammar's ``role``)."""
_ID = re.compile(ID_PATTERN)
_ROLE = re.compile(ROLE_PATTERN)
_HEAD = re.compile(rf"(?P<indent> *)(?:\[(?P<id>{ID_PATTERN})\] )?(?P<role>{ROLE_PATTERN})")
_PROP = re.compile(r" \[(?P<prop>[^\]]+)\]")
_json_string = json.JSONDecoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class Element:
    """One node of a state: a role, an optional name, id, props, text and children."""

    role: str
    name: str = ""
    id: str = ""
    props: tuple[str, ...] = ()
    text: str = ""
    children: tuple[Element, ...] = ()

    def __post_init__(self) -> None:
        if not _ROLE.fullmatch(self.role):
            raise StateFormatError(f"element role {self.role!r} must match {ROLE_PATTERN}")
        if self.id and not _ID.fullmatch(self.id):
            raise StateFormatError(f"element id {self.id!r} must match {ID_PATTERN}")
        for prop in self.props:
            if not prop or "]" in prop or "\n" in prop:
                raise StateFormatError(f"element prop {prop!r} must be non-empty, one line, without ']'")
        if "\n" in self.text or self.text != self.text.strip():
            raise StateFormatError(
                f"element text {self.text!r} must be one line without outer spaces; "
                "collapse whitespace before building the element"
            )

    def line(self) -> str:
        """This element's own line, without indentation."""
        parts = [f"[{self.id}] {self.role}" if self.id else self.role]
        if self.name:
            parts.append(" " + json.dumps(self.name, ensure_ascii=False))
        parts.extend(f" [{prop}]" for prop in self.props)
        if self.text:
            parts.append(": " + self.text)
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class State:
    """A page as a forest of :class:`Element`."""

    elements: tuple[Element, ...] = ()

    def render(self) -> str:
        return render_state(self)

    def find(self, element_id: str) -> Element | None:
        """The element with this id, or ``None``."""
        for flat in flatten(self):
            if flat.element.id == element_id:
                return flat.element
        return None


@dataclass(frozen=True, slots=True)
class FlatElement:
    """An element with its position: document-order index, depth, ancestors' (role, name)."""

    index: int
    depth: int
    element: Element
    ancestry: tuple[tuple[str, str], ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.element.role, self.element.name)


def render_state(state: State) -> str:
    """Render a state to text, one element per line (no trailing newline)."""
    return "\n".join(_render_lines(state.elements, 0))


def _render_lines(elements: Sequence[Element], depth: int) -> Iterator[str]:
    for element in elements:
        yield "  " * depth + element.line()
        yield from _render_lines(element.children, depth + 1)


def parse_state(text: str) -> State:
    """Parse text in the state grammar.

    Blank lines are ignored.

    Raises:
        StateFormatError: A line breaks the grammar; the message names it.
    """
    # Each open level holds (element fields, children list) until it closes.
    stack: list[tuple[dict[str, object], list[Element]]] = []
    roots: list[Element] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        depth, fields = _parse_line(raw, number)
        if depth > len(stack):
            raise StateFormatError(
                f"line {number} is indented {depth} levels under a line at level {len(stack) - 1}: {raw!r}"
            )
        while len(stack) > depth:
            _close(stack, roots)
        stack.append((fields, []))
    while stack:
        _close(stack, roots)
    return State(tuple(roots))


def _close(stack: list[tuple[dict[str, object], list[Element]]], roots: list[Element]) -> None:
    fields, children = stack.pop()
    element = Element(**fields, children=tuple(children))  # type: ignore[arg-type]
    (stack[-1][1] if stack else roots).append(element)


def _parse_line(raw: str, number: int) -> tuple[int, dict[str, object]]:
    head = _HEAD.match(raw)
    if head is None:
        raise StateFormatError(f"line {number} does not start with '[id] role' or 'role': {raw!r}")
    indent = len(head["indent"])
    if indent % 2:
        raise StateFormatError(f"line {number} is indented by an odd number of spaces: {raw!r}")
    fields: dict[str, object] = {"role": head["role"], "id": head["id"] or ""}
    pos = head.end()
    if raw.startswith(' "', pos):
        try:
            fields["name"], pos = _json_string.raw_decode(raw, pos + 1)
        except json.JSONDecodeError as exc:
            raise StateFormatError(f"line {number} has a malformed quoted name: {raw!r}") from exc
    props = []
    while (prop := _PROP.match(raw, pos)) is not None:
        props.append(prop["prop"])
        pos = prop.end()
    fields["props"] = tuple(props)
    if raw.startswith(": ", pos):
        fields["text"] = raw[pos + 2 :].strip()
    elif pos != len(raw):
        raise StateFormatError(f"line {number} has unexpected text at column {pos + 1}: {raw!r}")
    try:
        Element(**fields)  # type: ignore[arg-type]
    except StateFormatError as exc:
        raise StateFormatError(f"line {number}: {exc}") from exc
    return indent // 2, fields


# --------------------------------------------------------------------------- diff


def diff_states(old: State | str, new: State | str) -> str:
    """A line diff that turns ``old`` into ``new`` (see the module docstring).

    Accepts states or their rendered text. Returns ``""`` when they are equal.
    """
    a = _lines(old)
    b = _lines(new)
    out: list[str] = []
    cursor = 0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i1 > cursor:
            out.extend("  " + line for line in _minimal_context(a, cursor, i1))
        out.extend("- " + line for line in a[i1:i2])
        out.extend("+ " + line for line in b[j1:j2])
        cursor = i2
    return "\n".join(out)


def lean_diff(old: State | str, new: State | str) -> str:
    """A shorter diff for models to write: context only where an insertion needs it.

    A removal line locates itself when applied with ``strict=False`` (it is
    searched for from the cursor), so the context lines before a removal are
    dropped. The result is checked: when the lean diff would not rebuild
    ``new`` (a removed line that also occurs earlier), the full diff is returned.
    """
    full = diff_states(old, new)
    lines = full.split("\n") if full else []
    kept: list[str] = []
    for n, line in enumerate(lines):
        if line.startswith("  ") and _next_change(lines, n).startswith("- "):
            continue
        kept.append(line)
    lean = "\n".join(kept)
    if lean == full:
        return full
    try:
        rebuilt = apply_diff(old, lean, strict=False)
    except StateFormatError:
        return full
    target = new if isinstance(new, State) else parse_state(new)
    return lean if rebuilt == target else full


def _next_change(lines: list[str], start: int) -> str:
    for line in lines[start:]:
        if not line.startswith("  "):
            return line
    return ""


def _minimal_context(lines: list[str], cursor: int, end: int) -> list[str]:
    """The shortest tail of ``lines[cursor:end]`` whose first match from ``cursor`` ends at ``end``."""
    for size in range(1, end - cursor + 1):
        block = lines[end - size : end]
        if _find_block(lines, block, cursor) == end - size:
            return block
    return lines[cursor:end]


def _find_block(lines: list[str], block: list[str], start: int) -> int:
    for i in range(start, len(lines) - len(block) + 1):
        if lines[i : i + len(block)] == block:
            return i
    return -1


def apply_diff(state: State | str, diff: str, *, strict: bool = True) -> State:
    """Apply a diff made by :func:`diff_states` (or by a model) to a state.

    Args:
        state: The state before.
        diff: The diff text; ``""`` means unchanged.
        strict: When ``False``, a removal that is not at the cursor is searched
            for further down instead of failing (useful for model output).

    Raises:
        DiffApplyError: A context or removal line is not where the diff says,
            or a diff line lacks a ``"  "``, ``"- "`` or ``"+ "`` prefix.
        StateFormatError: The result is not a valid state.
    """
    old = _lines(state)
    out: list[str] = []
    cursor = 0
    context: list[str] = []
    for number, raw in enumerate(diff.split("\n"), start=1):
        if not raw.strip():
            continue
        prefix, line = raw[:2], raw[2:]
        if prefix not in ("  ", "- ", "+ "):
            raise DiffApplyError(f"diff line {number} must start with '  ', '- ' or '+ ': {raw!r}")
        if prefix == "  ":
            context.append(line)
            continue
        cursor = _take_context(old, out, cursor, context)
        context = []
        if prefix == "+ ":
            out.append(line)
            continue
        if cursor >= len(old) or old[cursor] != line:
            found = -1 if strict else _find_block(old, [line], cursor)
            if found < 0:
                raise DiffApplyError(f"diff line {number} removes a line that is not there: {line!r}")
            out.extend(old[cursor:found])
            cursor = found
        cursor += 1
    cursor = _take_context(old, out, cursor, context)
    out.extend(old[cursor:])
    return parse_state("\n".join(out))


def _take_context(old: list[str], out: list[str], cursor: int, context: list[str]) -> int:
    if not context:
        return cursor
    found = _find_block(old, context, cursor)
    if found < 0:
        raise DiffApplyError(f"diff context not found after line {cursor}: {context[0]!r}")
    end = found + len(context)
    out.extend(old[cursor:end])
    return end


def _lines(state: State | str) -> list[str]:
    text = state.render() if isinstance(state, State) else state
    return [line for line in text.split("\n") if line.strip()]


# --------------------------------------------------------------------------- matching


def flatten(state: State) -> list[FlatElement]:
    """All elements in document order with their depth and ancestry."""
    flat: list[FlatElement] = []

    def walk(elements: Sequence[Element], depth: int, ancestry: tuple[tuple[str, str], ...]) -> None:
        for element in elements:
            flat.append(FlatElement(len(flat), depth, element, ancestry))
            walk(element.children, depth + 1, (*ancestry, (element.role, element.name)))

    walk(state.elements, 0, ())
    return flat


@dataclass(frozen=True, slots=True)
class ElementMatch:
    """Element ``left`` of the first state is element ``right`` of the second.

    Indices are positions in :func:`flatten` order. ``same_ancestry`` tells
    whether the whole chain of ancestors' (role, name) agreed too.
    """

    left: int
    right: int
    same_ancestry: bool


def match_elements(a: State, b: State) -> list[ElementMatch]:
    """Match elements across two states by role, name and ancestry.

    Ids are ignored (a simulator may invent its own). Two elements can match
    only if role and name agree. Among those, pairs whose full ancestry agrees
    are matched first, in document order; the rest are paired by the longest
    shared chain of nearest ancestors, then by document order. Each element
    is matched at most once. Returns matches sorted by ``left``.
    """
    left_by_key: dict[tuple[str, str], list[FlatElement]] = {}
    for flat in flatten(a):
        left_by_key.setdefault(flat.key, []).append(flat)
    right_by_key: dict[tuple[str, str], list[FlatElement]] = {}
    for flat in flatten(b):
        right_by_key.setdefault(flat.key, []).append(flat)
    matches: list[ElementMatch] = []
    for key, lefts in left_by_key.items():
        rights = right_by_key.get(key)
        if rights:
            matches.extend(_match_group(lefts, rights))
    matches.sort(key=lambda m: m.left)
    return matches


def _match_group(lefts: list[FlatElement], rights: list[FlatElement]) -> Iterator[ElementMatch]:
    free = list(rights)
    unmatched: list[FlatElement] = []
    for left in lefts:
        twin = next((r for r in free if r.ancestry == left.ancestry), None)
        if twin is None:
            unmatched.append(left)
        else:
            free.remove(twin)
            yield ElementMatch(left.index, twin.index, True)
    for left in unmatched:
        if not free:
            return
        best = max(free, key=lambda r: (_shared_tail(left.ancestry, r.ancestry), -r.index))
        free.remove(best)
        yield ElementMatch(left.index, best.index, False)


def _shared_tail(x: tuple[tuple[str, str], ...], y: tuple[tuple[str, str], ...]) -> int:
    shared = 0
    for p, q in zip(reversed(x), reversed(y), strict=False):
        if p != q:
            break
        shared += 1
    return shared
