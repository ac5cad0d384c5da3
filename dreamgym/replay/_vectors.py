"""The embedded transitions in memory: vectors plus what filters need, and exact search.

Each stored vector carries the step's source, task, site, episode and seed,
so a filtered query builds its candidate set from numpy masks without
decoding a single step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from dreamgym.core.types import Source

SOURCE_CODE = {"real": 0, "synthetic": 1}
_NO_SEED = np.iinfo(np.int64).min


class VectorEntry(msgspec.Struct, frozen=True, array_like=True):
    """The value stored under a step's key in the ``vectors`` database."""

    source: int
    task_id: str
    site: str
    episode_id: str
    seed: int | None
    vector: bytes


vector_encoder = msgspec.msgpack.Encoder()
vector_decoder = msgspec.msgpack.Decoder(VectorEntry)


@dataclass
class _Codes:
    """Strings to small integer codes, for vectorised filtering."""

    ids: dict[str, int] = field(default_factory=dict)

    def code(self, value: str) -> int:
        return self.ids.setdefault(value, len(self.ids))

    def find(self, value: str) -> int:
        return self.ids.get(value, -1)


class VectorTable:
    """Append-only table of (seq, vector, filter columns), rows in increasing seq."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.upto = 0
        """Highest sequence number whose vector (if any) has been added."""
        self._pending: list[tuple[int, VectorEntry, npt.NDArray[np.float32]]] = []
        self._seqs = np.zeros(0, dtype=np.uint64)
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._columns = {name: np.zeros(0, dtype=np.int64) for name in ("source", "task", "site", "episode", "seed")}
        self._tasks, self._sites, self._episodes = _Codes(), _Codes(), _Codes()

    def __len__(self) -> int:
        return len(self._seqs) + len(self._pending)

    def add(self, seq: int, entry: VectorEntry, vector: npt.NDArray[np.float32] | None = None) -> None:
        if vector is None:
            vector = np.frombuffer(entry.vector, dtype=np.float32)
        self._pending.append((seq, entry, vector))
        self.upto = max(self.upto, seq)

    def _consolidate(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._seqs = np.concatenate([self._seqs, np.fromiter((p[0] for p in pending), np.uint64, len(pending))])
        self._matrix = np.concatenate([self._matrix, np.stack([p[2] for p in pending])])
        new = {
            "source": [e.source for _, e, _ in pending],
            "task": [self._tasks.code(e.task_id) for _, e, _ in pending],
            "site": [self._sites.code(e.site) for _, e, _ in pending],
            "episode": [self._episodes.code(e.episode_id) for _, e, _ in pending],
            "seed": [_NO_SEED if e.seed is None else e.seed for _, e, _ in pending],
        }
        for name, values in new.items():
            self._columns[name] = np.concatenate([self._columns[name], np.asarray(values, dtype=np.int64)])

    def seqs_after(self, seq: int) -> npt.NDArray[np.bool_]:
        self._consolidate()
        return self._seqs > seq

    def mask(
        self,
        *,
        source: Source | None = None,
        task_id: str | None = None,
        site: str | None = None,
        exclude_episodes: Sequence[str] = (),
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> npt.NDArray[np.bool_] | None:
        """Rows that pass the filters, or ``None`` when no filter is set."""
        self._consolidate()
        if source is None and task_id is None and site is None and not exclude_episodes and not exclude_task_seeds:
            return None
        cols = self._columns
        keep = np.ones(len(self._seqs), dtype=bool)
        if source is not None:
            keep &= cols["source"] == SOURCE_CODE[source]
        if task_id is not None:
            keep &= cols["task"] == self._tasks.find(task_id)
        if site is not None:
            keep &= cols["site"] == self._sites.find(site)
        if exclude_episodes:
            codes = [self._episodes.find(e) for e in exclude_episodes]
            keep &= ~np.isin(cols["episode"], codes)
        for task, seed in exclude_task_seeds:
            # A None seed holds the whole task out (every seed), as SFT and SimulatorConfig document it.
            same_task = cols["task"] == self._tasks.find(task)
            keep &= ~same_task if seed is None else ~(same_task & (cols["seed"] == seed))
        return keep

    def rows_of(self, seqs: npt.NDArray[Any]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Row positions of sequence numbers, and which of them are in the table at all."""
        self._consolidate()
        seqs = np.asarray(seqs, dtype=np.uint64)
        rows = np.searchsorted(self._seqs, seqs)
        present = rows < len(self._seqs)
        present[present] = self._seqs[rows[present]] == seqs[present]
        return np.where(present, rows, 0), present

    def exact(
        self, query: npt.NDArray[np.float32], k: int, rows: npt.NDArray[np.bool_] | None = None
    ) -> tuple[list[int], list[float]]:
        """Top-k by cosine similarity (vectors are normalised) among ``rows``."""
        self._consolidate()
        if rows is None:
            matrix, seqs = self._matrix, self._seqs
        else:
            matrix, seqs = self._matrix[rows], self._seqs[rows]
        if len(seqs) == 0 or k <= 0:
            return [], []
        scores = matrix @ query
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((seqs[top], -scores[top]))]
        return [int(s) for s in seqs[top]], [float(x) for x in scores[top]]

    def passes(self, seqs: npt.NDArray[Any], rows: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_]:
        """Which of these sequence numbers are in the table and pass a mask from :meth:`mask`."""
        positions, present = self.rows_of(seqs)
        if rows is None:
            return present
        return present & rows[positions]

    def matrix_after(self, seq: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        after = self.seqs_after(seq)
        return self._seqs[after], self._matrix[after]
