"""Keeping a diff's removal and context lines to copies of the page's lines, token by token.

The experience model answers a step with a ``<diff>`` against the page (see
``dreamgym.simulator._templates``): ``- `` removes a line of the page, ``  ``
names one that stays, ``+ `` adds one. A small model often garbles the lines
it must copy (``- [e3] checkbox "6] radio "6]`` for ``- [e3] checkbox "6"``),
and such a diff does not apply. :class:`CopyGuard` gives, at each decoding
step, the tokens that keep the answer's current removal or context line a
prefix of one of the page's lines (``Sampling.copy_lines``), ending it only
where a whole line is copied, and that keep an added line of an element the
page has to that element's role and name (``+ [e3] radio "Nb" [checked]``
for the page's ``[e3] radio "Nb"``, never ``+ [e3] radio "ztzy" [checked]``:
its state, value and place may change, what it is may not). Anywhere else
(the reasoning, a new element's line, the reward) every token stays allowed.
The model still chooses which lines, and whether to write one: the guard
takes away only lines the page does not have and elements it renames.

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
from collections.abc import Sequence
from typing import Any

__all__ = ["CopyGuard"]

log = logging.getLogger(__name__)

_PROBE = '<diff>\n-   [e12] checkbox "Bob" [checked]\n+ [e3] textbox "Name: x"\n</diff>\n<reward>1</reward>'
"""Text whose tokens must decode alone as they do in a row for the guard to work."""
_COPY_PREFIXES = ("- ", "  ")
_HEAD = re.compile(r'^\s*\[(e\d+)\] ([^\s":\[]+(?: "(?:[^"\\]|\\.)*")?)')
"""A page line's element id and its head: the role and the name (what an addition of that id must keep)."""
_OPEN_ID = re.compile(r"^\s*\[(e\d+)$")
_ADDED_ID = re.compile(r"^\s*\[(e\d+)")


class CopyGuard:
    """The tokens a diff line may continue with, for one tokenizer."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        """Each token id's text."""
        self._by_text: dict[str, list[int]] = {}
        for token, text in enumerate(self.texts):
            if text:
                self._by_text.setdefault(text, []).append(token)
        self._longest = max((len(text) for text in self._by_text), default=1)
        self._copy_starts = [t for t, text in enumerate(self.texts) if text[:1] in ("-", " ")]
        self._closers = [t for t, text in enumerate(self.texts) if text[:1] == "]"]

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

    def constraint(self, answer: str, lines: frozenset[str]) -> tuple[list[int], bool] | None:
        """What may come next after ``answer`` (the text so far) for a page of ``lines``: ``(ids, True)`` only
        these token ids, ``(ids, False)`` any token but these; ``None`` any token (outside a ``<diff>``, or on a
        line that copies nothing).

        Inside a diff, a line that starts ``- `` or two spaces must go on as a page line does and end (a newline)
        only once it is one; at a line's start, a token that would begin such a line must begin it with a page
        line's text; a line that adds an element the page has must give its role and name as the page does.
        Where no token can (a page line the vocabulary cannot spell), nothing is constrained."""
        lowered = answer.lower()
        opened = lowered.rfind("<diff>")
        if opened < 0 or lowered.rfind("</diff>") > opened or not lines:
            return None
        start = max(answer.rfind("\n") + 1, opened + len("<diff>"))
        line = answer[start:]
        if line[:2] == "+ ":
            return self._addition(line[2:], _heads(lines))
        if line[:2] in _COPY_PREFIXES:
            done = line[2:]
            endings = [page[len(done) :] + "\n" for page in lines if page.startswith(done)]
        elif line in ("-", " "):
            endings = [" " + page + "\n" for page in lines]
        elif line == "":
            endings = [prefix + page + "\n" for prefix in _COPY_PREFIXES for page in lines]
        else:
            return None
        tokens = {token for ending in endings for token in self._starting(ending)}
        if not tokens:
            return None
        if line == "":  # an addition, a closing tag or an empty line may start here too
            return [token for token in self._copy_starts if token not in tokens], False
        return sorted(tokens), True

    def _addition(self, done: str, heads: dict[str, str]) -> tuple[list[int], bool] | None:
        """An added line of an element the page has keeps its role and name (its state, value and position may
        change): ``+ [e3] radio "Nb" [checked]`` for the page's ``[e3] radio "Nb"``, never ``[e3] radio "ztzy"``.
        A new element's line is free."""
        opening = _OPEN_ID.match(done)
        if opening is not None:  # the id may be complete: a token that closes it must go on as the page's line
            head = heads.get(opening.group(1))
            if head is None:
                return None
            allowed = set(self._starting("] " + head))
            return [token for token in self._closers if token not in allowed], False
        added = _ADDED_ID.match(done)
        if added is None or added.group(1) not in heads:
            return None
        tail, needed = done[added.end() :], "] " + heads[added.group(1)]
        if tail.startswith(needed) or not needed.startswith(tail):
            return None  # the head is written (what follows is free), or the line left it before this guard
        tokens = self._starting(needed[len(tail) :])
        return (sorted(tokens), True) if tokens else None

    def _starting(self, ending: str) -> list[int]:
        """The tokens whose text is a prefix of ``ending``."""
        found: list[int] = []
        for size in range(1, min(len(ending), self._longest) + 1):
            found.extend(self._by_text.get(ending[:size], ()))
        return found


@functools.lru_cache(maxsize=8)
def _heads(lines: frozenset[str]) -> dict[str, str]:
    """Each element id of the page's lines with its head after the id (role, then name where it has one)."""
    heads: dict[str, str] = {}
    for line in lines:
        match = _HEAD.match(line)
        if match is not None:
            heads[match.group(1)] = match.group(2)
    return heads
