"""``RecentValues``: the values of the last ``size`` distinct keys, each computed once while it is kept.

The in-process models are asked the same thing many times in a row: a GRPO
group's eight episodes start from one page, and a shadowed real step's
retrieval query is the text the store's indexer embeds for that step. The
embedder (:class:`~dreamgym.replay.MiniLMEmbedder`) and the ``index`` policy
(:class:`~dreamgym.agents._model.LogitsMemo`) keep what they computed here,
each under its own key (a hash of the text, of the prompt's ids) and its own
lock or thread. Not thread-safe by itself.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["RecentValues"]

I = TypeVar("I")  # noqa: E741 - the item a value is computed from
V = TypeVar("V")


class RecentValues(Generic[V]):
    """The values of the last ``size`` distinct keys, least recently asked for first out (0 keeps none past a
    call)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()

    def fetch(
        self, keys: Sequence[Hashable], items: Sequence[I], run: Callable[[list[I]], Sequence[V]]
    ) -> tuple[list[V], int]:
        """The value of each key, in order, and how many ``run`` computed: it gets the item of each key not
        kept (the first item of a key given twice), once, and returns their values in that order. The keys of
        this call become the most recent, whatever ``size`` is."""
        missing: dict[Hashable, I] = {}
        for key, item in zip(keys, items, strict=True):
            if key not in self._values and key not in missing:
                missing[key] = item
        if missing:
            for key, value in zip(missing, run(list(missing.values())), strict=True):
                self._values[key] = value
        found = [self._values[key] for key in keys]
        for key in keys:
            self._values.move_to_end(key)
        while len(self._values) > self.size:
            self._values.popitem(last=False)
        return found, len(missing)

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
