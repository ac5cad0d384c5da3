"""Cutting a long page so that it stays navigable: the longest run of similar siblings is windowed.

A page over the state's character cap used to lose its end: a 200-row table
took the "Next page" link and the last rows with it, and no action brought
them back (the ARIA snapshot ignores the viewport). Now the cap cuts where
pages are long: the longest run of consecutive siblings of one role (table
rows, list items, links in a result list) keeps a window of them, and the
page's head, tail, pagination and controls stay. Where the window sits
follows the page's vertical scroll position (0 at the top, 1 at the bottom),
so ``scroll [down]`` moves it on to the run's later members. The note says
which members are shown and how to reach the rest. A pure function of the
elements, the cap and the position: the same page scrolled the same way gives
the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dreamgym.core.state import Element

__all__ = ["window_longest_run"]

MIN_RUN = 4
"""Runs shorter than this are left whole: a window of two rows helps nobody."""


def _size(element: Element, depth: int) -> int:
    """Characters of the element's rendered lines (with their indentation and newlines)."""
    own = 2 * depth + len(element.line()) + 1
    return own + sum(_size(child, depth + 1) for child in element.children)


def _runs(siblings: Sequence[Element]) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive siblings with one role, end exclusive."""
    runs, start = [], 0
    for n in range(1, len(siblings) + 1):
        if n == len(siblings) or siblings[n].role != siblings[start].role:
            runs.append((start, n))
            start = n
    return runs


def _longest(elements: Sequence[Element], depth: int, path: tuple[int, ...]) -> tuple[int, tuple[int, ...], int, int]:
    """(characters, path to the parent, start, end) of the largest run of at least MIN_RUN siblings."""
    best = (0, path, 0, 0)
    for start, end in _runs(elements):
        if end - start >= MIN_RUN:
            size = sum(_size(e, depth) for e in elements[start:end])
            if size > best[0]:
                best = (size, path, start, end)
    for n, element in enumerate(elements):
        found = _longest(element.children, depth + 1, (*path, n))
        if found[0] > best[0]:
            best = found
    return best


def window_longest_run(
    elements: tuple[Element, ...], *, max_chars: int, position: float
) -> tuple[tuple[Element, ...], str]:
    """The elements with their longest run windowed to fit ``max_chars`` (if it can), and a note.

    ``position`` (0..1) places the window along the run. Returns the elements
    unchanged and ``""`` when they fit, or when no run is long enough to cut.
    """
    total = sum(_size(e, 0) for e in elements)
    if total <= max_chars:
        return elements, ""
    size, path, start, end = _longest(elements, 0, ())
    if not size:
        return elements, ""
    siblings = _at(elements, path)
    depth = len(path)
    sizes = [_size(e, depth) for e in siblings[start:end]]
    budget = max_chars - (total - size)
    count = len(sizes)
    fit = max(1, min(_fitting(sizes, budget), _fitting(sizes[::-1], budget)))  # from either end
    first = round(min(1.0, max(0.0, position)) * (count - fit))
    last, used = first, 0
    while last < count and (last == first or used + sizes[last] <= budget):
        used += sizes[last]
        last += 1
    while first > 0 and used + sizes[first - 1] <= budget:  # room left at the end: show earlier ones too
        first -= 1
        used += sizes[first]
    shown = siblings[start + first : start + last]
    kept = (*siblings[:start], *shown, *siblings[end:])
    role = siblings[start].role
    hidden = count - len(shown)
    where = []
    if first:
        where.append(f"{first} before them (scroll up)")
    if last < count:
        where.append(f"{count - last} after them (scroll down)")
    note = (f"showing {role} {first + 1}-{last} of the {count} in a row; {hidden} hidden: "
            + " and ".join(where))  # fmt: skip
    return _replaced(elements, path, kept), note


def _fitting(sizes: Sequence[int], budget: int) -> int:
    """How many of ``sizes``, from the first, fit in ``budget``."""
    used = 0
    for n, size in enumerate(sizes):
        used += size
        if used > budget:
            return n
    return len(sizes)


def _at(elements: tuple[Element, ...], path: tuple[int, ...]) -> tuple[Element, ...]:
    for n in path:
        elements = elements[n].children
    return elements


def _replaced(
    elements: tuple[Element, ...], path: tuple[int, ...], children: tuple[Element, ...]
) -> tuple[Element, ...]:
    if not path:
        return children
    head, rest = path[0], path[1:]
    changed = replace(elements[head], children=_replaced(elements[head].children, rest, children))
    return (*elements[:head], changed, *elements[head + 1 :])
