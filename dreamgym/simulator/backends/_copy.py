"""Keeping a diff's removal and context lines to copies of the page's lines, token by token.

The experience model answers a step with a ``<diff>`` against the page (see
``dreamgym.simulator._templates``): ``- `` removes a line of the page, ``  ``
names one that stays, ``+ `` adds one. A small model often garbles the lines
it must copy (``- [e3] checkbox "6] radio "6]`` for ``- [e3] checkbox "6"``),
and such a diff does not apply. :class:`CopyGuard` gives, at each decoding
step, the tokens that keep the answer's current removal or context line a
prefix of one of the page's lines (``Sampling.copy_lines``), ending it only
where a whole line is copied; anywhere else (the reasoning, an addition, the
reward) every token stays allowed. The model still chooses which line, and
whether to write one: the guard takes away only lines the page does not have.

A token's text is taken as its decoding alone, which holds for byte-level BPE
tokenizers (GPT-2's, SmolLM2's, the demo-size model's). A tokenizer whose
tokens decode differently alone than in a row (SentencePiece's leading
spaces) fails the check at construction: :meth:`CopyGuard.for_tokenizer`
then returns ``None`` and the backend decodes unconstrained.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["CopyGuard"]

log = logging.getLogger(__name__)

_PROBE = '<diff>\n-   [e12] checkbox "Bob" [checked]\n+ [e3] textbox "Name: x"\n</diff>\n<reward>1</reward>'
"""Text whose tokens must decode alone as they do in a row for the guard to work."""
_COPY_PREFIXES = ("- ", "  ")


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
        line's text. Where no token can (a page line the vocabulary cannot spell), nothing is constrained."""
        lowered = answer.lower()
        opened = lowered.rfind("<diff>")
        if opened < 0 or lowered.rfind("</diff>") > opened or not lines:
            return None
        start = max(answer.rfind("\n") + 1, opened + len("<diff>"))
        line = answer[start:]
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

    def _starting(self, ending: str) -> list[int]:
        """The tokens whose text is a prefix of ``ending``."""
        found: list[int] = []
        for size in range(1, min(len(ending), self._longest) + 1):
            found.extend(self._by_text.get(ending[:size], ()))
        return found
