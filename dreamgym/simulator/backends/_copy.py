"""Keeping the experience model's answer to a diff that applies to the page, token by token.

The experience model answers a step with a ``<diff>`` against the page (see
``dreamgym.simulator._templates``), then ``<reward>`` and ``<done>``: ``- ``
removes a line of the page, ``  `` names one that stays, ``+ `` adds one. A
small model often garbles the lines it must copy (``- [e3] checkbox "6] radio
"6]`` for ``- [e3] checkbox "6"``), runs an added line on past its end
(``+ [e3] checkbox "o0MZ" [e3] checkbox "6]``) or writes ``<diff>`` where the
diff should close, and such an answer does not apply. :class:`CopyGuard`
gives, at each decoding step, the tokens that keep the answer one that does
(``Sampling.copy_lines``: the page's lines, in order):

- a removal or context line is a copy of a page line the diff can still reach
  (at or after where its earlier lines left it, a context block's lines
  consecutive, as :func:`~dreamgym.core.state.apply_diff` places them), and
  it ends only where a whole line is copied;
- an added line is a line of the state grammar (``[id] role "name" [prop]
  ...: text``, no prop that looks like an element id), and one of an element
  the page has replaces that element's removed line, once, and keeps its role
  and name (``+ [e3] radio "Nb" [checked]`` for the page's ``[e3] radio
  "Nb"``, never ``+ [e3] radio "ztzy"``: its state, value and place may
  change, what it is may not), its props those of its line, of what an
  action toggles on its role (:data:`ROLE_PROPS`) and :data:`STATE_PROPS`;
- a diff line starts ``- ``, ``  ``, ``+ `` or closes the diff, and after it
  come ``<reward>`` with a number (an ``<error>`` may come first) and
  ``<done>`` with ``yes`` or ``no``; :meth:`CopyGuard.finished` says when the
  answer is whole, so decoding stops there.

Before ``<diff>`` (reasoning) every token stays allowed. The model still
chooses which lines, what an added line says, the reward and the end: the
guard takes away only answers that would not apply. Where it takes away the
model's own favourite token, the local backend counts it
(``Completion.steered``) unless the guard was spelling a page line the
answer had chosen (:meth:`CopyGuard.copying`: a misspelt copy, corrected) or
ends the line there (:meth:`CopyGuard.fallback`: an added line of a page
element run on into another's text). A steered answer applies but is not
what the model meant, and the experience model treats it as a garbled one.

A token's text is taken as its decoding alone, which holds for byte-level BPE
tokenizers (GPT-2's, SmolLM2's, the demo-size model's). A tokenizer whose
tokens decode differently alone than in a row (SentencePiece's leading
spaces) fails the check at construction: :meth:`CopyGuard.for_tokenizer`
then returns ``None`` and the backend decodes unconstrained.
"""

from __future__ import annotations

import functools
import logging
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.core.errors import StateFormatError
from dreamgym.core.state import apply_diff

__all__ = ["CopyGuard"]

log = logging.getLogger(__name__)

_PROBE = '<diff>\n-   [e12] checkbox "Bob" [checked]\n+ [e3] textbox "Name: x"\n</diff>\n<reward>1</reward>'
"""Text whose tokens must decode alone as they do in a row for the guard to work."""
_HEAD = re.compile(r'^\s*\[(e\d+)\] ([^\s":\[]+(?: "(?:[^"\\]|\\.)*")?)')
"""A page line's element id and its head: the role and the name (what an addition of that id must keep)."""
_CHOSEN = re.compile(r"^\s*\[[^\]\s]+\]")
"""A copied line past its element id: which page line it copies is chosen."""
_COPY_PREFIXES = ("- ", "  ")
_ADDED_ID = re.compile(r"^\s*\[(e\d+)")
_CLOSED_ID = re.compile(r"^\s*\[(e\d+)\]")
_ID_CHARS = frozenset(string.ascii_letters + string.digits + "_.:-")
_ROLE_FIRST = frozenset(string.ascii_letters)
_ROLE_CHARS = _ROLE_FIRST | frozenset(string.digits + "_-")
_ESCAPES = frozenset('"\\/bfnrt')
_CLOSE = "</diff>"
State = str | tuple[str, str, str]
"""A state of the answer's grammar: a name, or ``("literal", text, then)``."""
_LINE_START = "line"
"""The grammar's state at the start of a diff line that adds (``+ ``) or closes the diff."""
_AFTER_DIFF: State = ("literal", "\n<", "tag")
"""The grammar's state right after ``</diff>``."""
_ENDS = frozenset({"end", "done"})
"""States that end what the grammar reads: a line (its newline), the answer (``</done>``)."""


def _step(state: State, char: str) -> State | None:
    """The grammar's next state after ``char``, or ``None`` where ``char`` breaks it.

    One added diff line after ``+`` (``plus`` … ``end``: :mod:`dreamgym.core.state`'s line grammar), the diff's
    closing tag and what follows it (``<error>`` at most once, ``<reward>`` a number, ``<done>`` yes or no).
    ``("literal", text, then)`` must read ``text`` and goes on as ``then``."""
    if isinstance(state, tuple):
        _, text, then = state
        if char != text[0]:
            return None
        return ("literal", text[1:], then) if len(text) > 1 else then
    if state == _LINE_START:
        if char == "+":
            return "plus"
        return ("literal", _CLOSE[1:] + "\n<", "tag") if char == "<" else None
    if state == "plus":
        return "indent" if char == " " else None
    if state == "indent":  # an even number of spaces so far
        if char == " ":
            return "odd indent"
        if char == "[":
            return "id?"
        return "role" if char in _ROLE_FIRST else None
    if state == "odd indent":
        return "indent" if char == " " else None
    if state in ("id?", "id"):
        if char in _ID_CHARS:
            return "id"
        return "id]" if char == "]" and state == "id" else None
    if state == "id]":
        return "role?" if char == " " else None
    if state == "role?":
        return "role" if char in _ROLE_FIRST else None
    if state == "role":
        if char in _ROLE_CHARS:
            return "role"
        return {" ": "role ", ":": "colon", "\n": "end"}.get(char)
    if state == "role ":
        return {'"': "name", "[": "prop?"}.get(char)
    if state == "name":  # a JSON string: no control characters, escapes whole
        if char < " ":
            return None
        return {'"': "after", "\\": "escape"}.get(char, "name")
    if state == "escape":
        if char == "u":
            return "hex 4"
        return "name" if char in _ESCAPES else None
    if state.startswith("hex "):
        left = int(state[-1]) - 1
        return None if char not in string.hexdigits else f"hex {left}" if left else "name"
    if state == "after":  # after a name or a prop
        return {" ": "after ", ":": "colon", "\n": "end"}.get(char)
    if state == "after ":
        return "prop?" if char == "[" else None
    if state in ("prop?", "prop", "prop e"):  # a prop is no element id: none starts "e" and a digit
        if char == "\n" or (char == "]" and state == "prop?") or (state == "prop e" and char in string.digits):
            return None
        if char == "]":
            return "after"
        return "prop e" if state == "prop?" and char == "e" else "prop"
    if state == "colon":
        return "text?" if char == " " else None
    if state == "text?":  # the text has no leading spaces and is not empty (a line read back strips them)
        if char == "\n":
            return None
        return "text?" if char == " " else "text"
    if state == "text":
        return "end" if char == "\n" else "text"
    if state == "tag":
        return {"r": ("literal", "eward>", "number?"), "e": ("literal", "rror>", "error")}.get(char)
    if state == "error":
        if char == "\n":
            return None
        return ("literal", "/error>\n<reward>", "number?") if char == "<" else "error"
    if state == "number?":
        if char == "-":
            return "sign"
        return "number" if char in string.digits else None
    if state == "sign":
        return "number" if char in string.digits else None
    if state in ("number", "fraction", "exponent"):  # as ``:g`` writes a number: 1, 0.5, -2, 1e-05
        if char in string.digits:
            return state
        if char == "<":
            return ("literal", "/reward>\n<done>", "yes or no")
        return {("number", "."): "point", ("number", "e"): "e", ("fraction", "e"): "e"}.get((state, char))
    if state == "point":
        return "fraction" if char in string.digits else None
    if state == "e":
        return "e sign" if char in "+-" else None
    if state == "e sign":
        return "exponent" if char in string.digits else None
    if state == "yes or no":
        return {"y": ("literal", "es</done>", "done"), "n": ("literal", "o</done>", "done")}.get(char)
    return None  # "end", "done": nothing follows within what the grammar reads


def _run(state: State | None, text: str) -> State | None:
    """The state after ``text`` (``None`` where it breaks the grammar or goes on past an end)."""
    for char in text:
        if state is None or state in _ENDS:
            return None
        state = _step(state, char)
    return state


class CopyGuard:
    """The tokens an answer may continue with so that its diff applies, for one tokenizer."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        """Each token id's text."""
        self._by_text: dict[str, list[int]] = {}
        self._by_first: dict[str, list[int]] = {}
        for token, text in enumerate(self.texts):
            if text:
                self._by_text.setdefault(text, []).append(token)
                self._by_first.setdefault(text[0], []).append(token)
        self._longest = max((len(text) for text in self._by_text), default=1)
        self._bracketed = [t for t, text in enumerate(self.texts) if "]" in text]
        self._grammar: dict[State, frozenset[int]] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> CopyGuard | None:
        """The guard for ``tokenizer``; ``None`` where its tokens' texts do not add up to the text they encode."""
        size = len(tokenizer)
        texts = [tokenizer.decode([token], skip_special_tokens=True) for token in range(size)]
        ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
        if "".join(texts[token] for token in ids) != _PROBE:
            log.info("the tokenizer's tokens do not decode alone as in a row: diff lines are not kept to the page's")
            return None
        return cls(texts)

    def constraint(self, answer: str, lines: Sequence[str]) -> tuple[list[int], bool] | None:
        """What may come next after ``answer`` (the text so far) for a page of ``lines`` (in the page's order):
        ``(ids, True)`` only these token ids, ``(ids, False)`` any token but these; ``None`` any token (before
        the ``<diff>``, after the answer, or where the answer already left what the guard keeps)."""
        lowered = answer.lower()
        opened = lowered.find("<diff>")
        if opened < 0 or not lines:
            return None
        body = answer[opened + len("<diff>") :]
        closed = body.lower().find(_CLOSE)
        if closed >= 0:
            return self._allowed(_run(_AFTER_DIFF, body[closed + len(_CLOSE) :]))
        if not body.startswith("\n"):
            return None
        *done, line = body[1:].split("\n")
        page = tuple(lines)
        reach = _reachable(page, done)
        if reach is None:
            return None
        if line == "":
            endings = [f"- {kept}\n" for kept in reach.removals] + [f"  {kept}\n" for kept in reach.contexts]
            copies = {token for ending in endings for token in self._starting(ending)}
            starts = self._tokens(_LINE_START)
            if not _applies(page, done):  # the page the diff makes so far breaks the grammar: not closed yet
                starts = frozenset(token for token in starts if self.texts[token][0] != "<")
            return self._as_constraint(copies | starts)
        if line[:1] in ("-", " "):
            pages = reach.removals if line[0] == "-" else reach.contexts
            if line[1:2] not in ("", " "):
                return None
            written = line[2:]
            endings = [f"{line[0]} {page}\n"[len(line) :] for page in pages if page.startswith(written)]
            copies = {token for ending in endings for token in self._starting(ending)}
            return (sorted(copies), True) if copies else None
        state = _run(_LINE_START, line)
        if state is None:
            return None
        allowed = self._tokens(state)
        if state in ("indent", "odd indent"):  # no deeper than one under the line it follows
            spaces = len(line) - 2
            allowed = frozenset(t for t in allowed if spaces + _leading(self.texts[t]) <= 2 * reach.depth)
        head = _addition(line[2:], _heads(page), _ids(done), self) if line.startswith("+ ") else None
        if head is not None:
            ids, only = head
            allowed = allowed & frozenset(ids) if only else allowed - frozenset(ids)
        return self._as_constraint(allowed)

    def copying(self, answer: str, lines: Sequence[str]) -> bool:
        """Whether the next token spells a page line the answer has already chosen: a removal or context line
        past its element id, or the role and name of an added line of an element the page has. Steering there
        corrects a copy (a small model misspells names it has never seen); anywhere else it overrules what
        the model was writing (``Completion.steered`` counts only that)."""
        line = _diff_line(answer)
        if line is None:
            return False
        if line[:2] in _COPY_PREFIXES:
            return _CHOSEN.match(line[2:]) is not None
        head = _page_element_head(line, lines)
        if head is None:
            return False
        tail, needed = head
        return tail.startswith("]") and needed.startswith(tail) and tail != needed

    def fallback(self, answer: str, lines: Sequence[str]) -> list[int] | None:
        """What to write where the model's own choice leaves the form, if not the next best it allows: past the
        role and name (and any props) of an added line of an element the page has, the line's end (a small
        model runs such a line on into another's text; cut there, it says what it meant)."""
        line = _diff_line(answer)
        head = _page_element_head(line, lines) if line is not None else None
        if head is None:
            return None
        tail, needed = head
        written = _PROPS.match(tail[len(needed) :]) if tail.startswith(needed) else None
        if written is None or written.group(2):
            return None
        return self._by_text.get("\n") or None

    def finished(self, answer: str) -> bool:
        """Whether ``answer`` is whole: its ``</done>`` written after a closed diff (nothing more to decode)."""
        opened = answer.lower().find("<diff>")
        if opened < 0:
            return False
        body = answer[opened + len("<diff>") :]
        closed = body.lower().find(_CLOSE)
        return closed >= 0 and _run(_AFTER_DIFF, body[closed + len(_CLOSE) :]) == "done"

    def _allowed(self, state: State | None) -> tuple[list[int], bool] | None:
        if state is None or state in _ENDS:
            return None
        return self._as_constraint(self._tokens(state))

    def _as_constraint(self, allowed: frozenset[int] | set[int]) -> tuple[list[int], bool] | None:
        """``allowed`` as the shorter list: only these, or all but the others."""
        if not allowed:
            return None  # nothing the vocabulary can spell: leave the model be
        if len(allowed) <= len(self.texts) // 2:
            return sorted(allowed), True
        return [token for token in range(len(self.texts)) if token not in allowed], False

    def _tokens(self, state: State) -> frozenset[int]:
        """The tokens whose text the grammar reads from ``state`` (an end only at the token's last character)."""
        found = self._grammar.get(state)
        if found is None:
            firsts = [first for first in self._by_first if _step(state, first) is not None]
            found = frozenset(
                token for first in firsts for token in self._by_first[first] if _run(state, self.texts[token])
            )
            self._grammar[state] = found
        return found

    def _starting(self, ending: str) -> list[int]:
        """The tokens whose text is a prefix of ``ending``."""
        found: list[int] = []
        for size in range(1, min(len(ending), self._longest) + 1):
            found.extend(self._by_text.get(ending[:size], ()))
        return found


@dataclass(frozen=True, slots=True)
class _Reach:
    """Where the diff so far leaves the page (as :func:`~dreamgym.core.state.apply_diff` places its lines)."""

    removals: set[str]
    """The page lines a removal line may copy next (at or after the cursor)."""
    contexts: set[str]
    """The page lines a context line may copy next (one that goes on an open context block, or any after the
    cursor)."""
    depth: int
    """The deepest an added line may be indented: one under the line it follows on the new page."""


def _reachable(page: tuple[str, ...], done: list[str]) -> _Reach | None:
    """Where the diff lines ``done`` leave ``page``; ``None`` where they already do not apply."""
    cursor, block, last = 0, [], -1  # last: the depth of the new page's line the next addition follows
    for raw in done:
        if not raw.strip():
            continue
        prefix, line = raw[:2], raw[2:]
        if prefix == "  ":
            block.append(line)
            continue
        if prefix not in ("- ", "+ "):
            return None
        if block:
            found = _find(page, block, cursor)
            if found < 0:
                return None
            cursor, block, last = found + len(block), [], _depth(block[-1])
        if prefix == "+ ":
            last = _depth(line)
            continue
        found = _find(page, [line], cursor)
        if found < 0:
            return None
        last = _depth(page[found - 1]) if found > cursor else last
        cursor = found + 1
    if not block:
        return _Reach(set(page[cursor:]), set(page[cursor:]), last + 1)
    found = _find(page, block, cursor)
    if found < 0:
        return None
    size = len(block)
    follows = {page[at + size] for at in range(cursor, len(page) - size) if list(page[at : at + size]) == block}
    return _Reach(set(page[found + size :]), follows, _depth(block[-1]) + 1)


def _diff_line(answer: str) -> str | None:
    """The line ``answer`` is writing inside its open ``<diff>`` (``None`` before the diff or after it closed)."""
    opened = answer.lower().find("<diff>")
    if opened < 0 or _CLOSE in answer[opened:].lower():
        return None
    return answer[answer.rfind("\n") + 1 :]


def _page_element_head(line: str, lines: Sequence[str]) -> tuple[str, str] | None:
    """For an added line of an element the page has: what follows its id so far, and the ``"] role name"`` it
    must begin with; ``None`` for any other line."""
    match = _ADDED_ID.match(line[2:]) if line[:2] == "+ " else None
    heads = _heads(tuple(lines))
    if match is None or match.group(1) not in heads:
        return None
    return line[2 + match.end() :], "] " + heads[match.group(1)][0]


def _leading(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def _depth(line: str) -> int:
    return (len(line) - len(line.lstrip(" "))) // 2


def _applies(page: tuple[str, ...], done: list[str]) -> bool:
    """Whether the diff lines ``done`` make a page in the state format (what may close the diff)."""
    try:
        apply_diff("\n".join(page), "\n".join(done), strict=False)
    except StateFormatError:
        return False
    return True


def _find(page: tuple[str, ...], block: list[str], start: int) -> int:
    for at in range(start, len(page) - len(block) + 1):
        if list(page[at : at + len(block)]) == block:
            return at
    return -1


STATE_PROPS = ("disabled", "focused", "required", "invalid", "readonly", "busy", "hidden")
"""Props any element may gain or lose in a step beside those its page line has: states a script changes."""
ROLE_PROPS = {"checkbox": ("checked",), "radio": ("checked",), "switch": ("checked",), "option": ("selected",),
              "button": ("pressed", "expanded"), "combobox": ("expanded",), "link": ("expanded",),
              "menuitem": ("expanded",), "treeitem": ("expanded", "selected"), "tab": ("selected",)}  # fmt: skip
"""Props an element of a role may gain or lose beside :data:`STATE_PROPS`: what an action toggles on it."""
_PROPS = re.compile(r"((?: \[[^\]\n]*\])*)(.*)$", re.DOTALL)


def _ids(done: list[str]) -> tuple[set[str], set[str]]:
    """The element ids the diff lines ``done`` removed and added."""
    removed: set[str] = set()
    added: set[str] = set()
    for raw in done:
        match = _ADDED_ID.match(raw[2:])
        if match is not None and raw[:2] in ("- ", "+ "):
            (removed if raw[0] == "-" else added).add(match.group(1))
    return removed, added


def _closing_taken(
    done: str, heads: dict[str, tuple[str, tuple[str, ...]]], removed: set[str], added: set[str], guard: CopyGuard
) -> set[int]:
    """The tokens that would close the added line's id (begun in ``done`` or not) as one it may not take (an
    element the page keeps, not removed by the diff, or one the diff added already), or as a removed element's
    id followed by anything but its head (``] checkbox "Coffee"``, or the start of it)."""
    taken = set()
    for token in guard._bracketed:
        line = done + guard.texts[token]
        match = _CLOSED_ID.match(line)
        if match is None or match.end() <= len(done):
            continue
        element = match.group(1)
        if element in added or (element in heads and element not in removed):
            taken.add(token)
        elif element in heads:
            rest, needed = line[match.end() - 1 :], "] " + heads[element][0]
            past = rest[len(needed) : len(needed) + 1]
            if not (needed.startswith(rest) or (rest.startswith(needed) and past in (" ", ":", "\n"))):
                taken.add(token)
    return taken


def _addition(
    done: str, heads: dict[str, tuple[str, tuple[str, ...]]], ids: tuple[set[str], set[str]], guard: CopyGuard
) -> tuple[list[int], bool] | None:
    """An added line of an element the page has replaces that element's removed line, once, and keeps its role
    and name (its state props, value and position may change): ``+ [e3] radio "Nb" [checked]`` for the page's
    ``[e3] radio "Nb"``, never ``[e3] radio "ztzy"``, nor a second ``[e3]`` beside a line the page keeps. A new
    element's id comes once; its line is free but for the grammar. A token may close the id too (``[e5]`` or
    ``5]`` is one token where the tokenizer keeps a run of non-space characters whole): none may close it as
    an id the line may not take."""
    removed, added = ids
    if _CHOSEN.match(done) is None:  # the id is not closed yet
        taken = _closing_taken(done, heads, removed, added, guard)
        return (sorted(taken), False) if taken else None
    match = _ADDED_ID.match(done)
    if match is None or match.group(1) not in heads:
        return None
    head, props = heads[match.group(1)]
    tail, needed = done[match.end() :], "] " + head
    if not tail.startswith(needed):
        if not needed.startswith(tail):
            return None  # the line left the head before this guard
        tokens = guard._starting(needed[len(tail) :])
        return (sorted(tokens), True) if tokens else None
    written, rest = _PROPS.match(tail[len(needed) :]).groups()  # type: ignore[union-attr]
    role = head.split(" ", 1)[0]
    toggled = (*props, *ROLE_PROPS.get(role, ()), *STATE_PROPS)
    left = [prop for prop in dict.fromkeys(toggled) if f" [{prop}]" not in written]
    if rest == "":
        endings = [f" [{prop}]" for prop in left] + [": ", "\n"]
    elif rest == " ":
        endings = [f"[{prop}]" for prop in left]
    elif rest.startswith(" [") and "]" not in rest:
        endings = [prop[len(rest) - 2 :] + "]" for prop in left if prop.startswith(rest[2:])]
    else:
        return None  # its text: free but for the grammar
    found = {token for ending in endings for token in guard._starting(ending)}
    return (sorted(found), True) if found else None


@functools.lru_cache(maxsize=8)
def _heads(lines: tuple[str, ...]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each element id of the page's lines with its head after the id (role, then name where it has one) and the
    props its line has."""
    heads: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in lines:
        match = _HEAD.match(line)
        if match is not None:
            props = re.findall(r" \[([^\]]+)\]", line[match.end() :].split(": ", 1)[0])
            heads[match.group(1)] = (match.group(2), tuple(props))
    return heads
