"""The searchable side of a store: stored vectors in memory plus the usearch index file.

Candidate sets up to ``exact_threshold`` are searched exactly over the
in-memory table; larger ones through the usearch index, plus an exact scan of
what the index does not cover yet, merged. The index is built only once the
store holds more than ``exact_threshold`` vectors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dreamgym.replay._ann import AnnIndex
from dreamgym.replay._vectors import VectorEntry, VectorTable
from dreamgym.replay.config import StoreConfig

log = logging.getLogger(__name__)

LoadVectors = Callable[[int], Iterable[tuple[int, VectorEntry]]]
"""Yields the stored ``(seq, entry)`` pairs with ``seq`` above the given one, in order."""


class TransitionIndex:
    """Vectors of embedded steps, searchable with filters.

    In the writer, :meth:`add`, :meth:`grow` and :meth:`save` are called by one
    indexer at a time; :meth:`search` may run concurrently from other threads.
    In a reader, :meth:`search` first picks up what the writer committed.
    """

    def __init__(
        self, path: Path, embedder: str, dim: int, config: StoreConfig, load_vectors: LoadVectors, *, readonly: bool
    ) -> None:
        self.path, self.embedder, self.dim, self.config = path, embedder, dim, config
        self.readonly = readonly
        self._load_vectors = load_vectors
        self._lock = threading.Lock()
        self._table = VectorTable(dim)
        self._ann: AnnIndex | None = None
        self._saved_count = 0

    @property
    def covered_upto(self) -> int:
        """Highest sequence number the usearch index covers (0 without one)."""
        if self._ann is not None:
            return self._ann.covered_upto
        return AnnIndex.saved_coverage(self.path) or 0

    def load(self) -> None:
        """Load the stored vectors, and the saved usearch index if it agrees with them.

        A lagging index is caught up, and a missing or inconsistent one rebuilt,
        by :meth:`grow` later; until then searches scan exactly what it lacks.
        """
        self._extend_table()
        ann = AnnIndex.load(self.path, self.embedder, self.dim, self.config.ann, view=False)
        if ann is not None:
            covered = int(np.count_nonzero(~self._table.seqs_after(ann.covered_upto)))
            if len(ann) != covered:
                log.warning("the index at %s disagrees with LMDB (%d vs %d); rebuilding", self.path, len(ann), covered)
                ann = None
        self._ann = ann
        self._saved_count = len(ann) if ann else 0

    def _extend_table(self) -> None:
        for seq, entry in self._load_vectors(self._table.upto):
            self._table.add(seq, entry)

    def add(self, entries: list[tuple[int, VectorEntry]], vectors: npt.NDArray[np.float32], upto: int) -> None:
        """Add freshly committed vectors (every step up to ``upto`` has been considered)."""
        with self._lock:
            for (seq, entry), vector in zip(entries, vectors, strict=True):
                self._table.add(seq, entry, vector)
            self._table.upto = max(self._table.upto, upto)

    def grow(self) -> None:
        """Add the vectors the usearch index lacks; build it once the store is large enough.

        The add runs outside the search lock: searches meanwhile see the old
        coverage and scan the rest exactly, and a new index is published only
        once it is built.
        """
        with self._lock:
            ann = self._ann
            if ann is None and len(self._table) <= self.config.exact_threshold:
                return
            building = ann is None
            if ann is None:
                ann = AnnIndex(self.dim, self.config.ann)
            seqs, matrix = self._table.matrix_after(ann.covered_upto)
            upto = self._table.upto
        ann.add(seqs, matrix, upto)
        if building:
            with self._lock:
                self._ann = ann

    def save(self, *, force: bool = True) -> None:
        """Save the index if it changed (``force``) or grew by ``index_save_every`` vectors."""
        ann = self._ann
        if ann is None or ann.readonly or len(ann) == self._saved_count:
            return
        if force or len(ann) - self._saved_count >= self.config.index_save_every:
            ann.save(self.path, self.embedder)
            self._saved_count = len(ann)

    def reset(self, embedder: str, dim: int) -> None:
        """Forget every vector and delete the index files (before re-embedding)."""
        with self._lock:
            AnnIndex.remove_files(self.path)
            self.embedder, self.dim = embedder, dim
            self._table = VectorTable(dim)
            self._ann = None
            self._saved_count = 0

    def search(self, vector: npt.NDArray[np.float32], k: int, filters: dict[str, Any]) -> tuple[list[int], list[float]]:
        """Sequence numbers and cosine similarities of the top ``k`` that pass ``filters``."""
        if self.readonly:
            self._refresh()
        with self._lock:
            table, ann = self._table, self._ann
            mask = table.mask(**filters)
            candidates = len(table) if mask is None else int(np.count_nonzero(mask))
            if ann is None or len(ann) == 0 or candidates <= self.config.exact_threshold:
                return table.exact(vector, k, mask)
            return _ann_search(table, ann, vector, k, mask)

    def _refresh(self) -> None:
        """Reader: (re)open the saved index as a read-only view, then load new vectors.

        The view is opened first: the writer commits vectors to LMDB before it
        indexes and saves them, so the table loaded afterwards holds every
        vector the view can return.
        """
        with self._lock:
            on_disk = AnnIndex.saved_coverage(self.path)
            if on_disk is not None and on_disk != (self._ann.covered_upto if self._ann else None):
                ann = AnnIndex.load(self.path, self.embedder, self.dim, self.config.ann, view=True)
                self._ann = ann or self._ann
            self._extend_table()


def _ann_search(
    table: VectorTable, ann: AnnIndex, vector: npt.NDArray[np.float32], k: int, mask: npt.NDArray[np.bool_] | None
) -> tuple[list[int], list[float]]:
    """Approximate search over what the index covers, exact over the rest, merged."""
    count = k
    while True:
        keys, sims = ann.search(vector, min(count, len(ann)))
        keep = table.passes(keys, mask)
        if int(np.count_nonzero(keep)) >= k or count >= len(ann):
            break
        count *= 4
    found = dict(zip(keys[keep][:k].tolist(), sims[keep][:k].tolist(), strict=True))
    after = table.seqs_after(ann.covered_upto)
    rows = after if mask is None else after & mask
    if rows.any():
        # An index being extended may already hold some of these; keep each step once.
        seqs, scores = table.exact(vector, k, rows)
        found.update(zip(seqs, scores, strict=True))
    top = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [int(seq) for seq, _ in top], [float(score) for _, score in top]
