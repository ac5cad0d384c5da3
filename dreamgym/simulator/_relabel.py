"""Training examples with their element ids shuffled, so that a model reads which element an action names.

A page's element ids are labels: ``[e5]`` says nothing about what the element
is, only which one an action means. A small model trained on a few hundred
clicks learns the labels' habits instead: on a list of checkboxes the demo-size
model wrote its diff for ``[e3]`` (the box the seed set clicked most) whatever
box the action named. :func:`relabel_examples` rewrites a share of the examples
with the ids of each example's pages permuted among themselves, the same
permutation in the prompt (page, history, retrieved transitions, action,
focus) and in the answer (the system message, the same for every example, is
left as it is), so the only way to write the answer's lines is to
find the element the action names. The ids stay the site's own (a
permutation, no new labels), so the tokenizer and the prompts at run time see
nothing new.

An id is a token ``[id]`` that starts a state line (after its indent and a
diff's ``-``/``+``/space mark) somewhere in the example; every ``[id]`` token
of such an id is rewritten, an element's props (``[checked]``) are not.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dreamgym.core.protocols import ChatMessage
from dreamgym.core.state import ID_PATTERN, ROLE_PATTERN

if TYPE_CHECKING:
    from dreamgym.simulator._sft import SFTExample

__all__ = ["element_ids", "relabel_examples", "relabeled"]

_LINE_ID = re.compile(rf"^(?:[-+ ] )? *\[(?P<id>{ID_PATTERN})\] {ROLE_PATTERN}", re.MULTILINE)


def element_ids(text: str) -> list[str]:
    """The element ids that start a state line of ``text`` (a page, a diff), in order of first appearance."""
    return list(dict.fromkeys(match.group("id") for match in _LINE_ID.finditer(text)))


def relabeled(example: SFTExample, rng: random.Random) -> SFTExample:
    """``example`` with its element ids permuted among themselves (:mod:`~dreamgym.simulator._relabel`); the same
    example where it names fewer than two."""
    texts = [message.content for message in example.messages if message.role != "system"] + [example.completion]
    ids = element_ids("\n".join(texts))
    if len(ids) < 2:
        return example
    shuffled = ids[:]
    rng.shuffle(shuffled)
    mapping = dict(zip(ids, shuffled, strict=True))
    token = re.compile(r"\[(" + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r")\]")

    def swap(text: str) -> str:
        return token.sub(lambda match: f"[{mapping[match.group(1)]}]", text)

    messages = tuple(
        message if message.role == "system" else ChatMessage(role=message.role, content=swap(message.content))
        for message in example.messages
    )
    return replace(example, messages=messages, completion=swap(example.completion))


def relabel_examples(examples: Sequence[SFTExample], share: float, *, seed: int = 0) -> list[SFTExample]:
    """``examples`` with ``share`` of them (each drawn with that chance, seeded) :func:`relabeled`; the rest as
    they are. The count and order stay, so training costs the same."""
    if share <= 0:
        return list(examples)
    rng = random.Random(f"relabel-{seed}")
    return [relabeled(example, rng) if rng.random() < share else example for example in examples]
