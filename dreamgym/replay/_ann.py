"""The usearch index (cosine) over step vectors: derived data, saved atomically.

Only the writer process owns the index file. It saves the index to a
temporary file and renames it into place, then writes ``index.json`` (also
by rename) with the embedder and the highest sequence number the file covers.
Other processes open a read-only memory-mapped view of that file and scan
exactly whatever came after it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def _load_ray_runtime_first() -> None:
    """Load Ray's native library, where Ray is installed, before usearch's.

    usearch's extension exports the C++ standard library it links statically;
    a Ray started after it aborts the process in its first regular expression
    (``std::regex_error``, "Invalid range in brace expression"). Loading Ray's
    library first (about 20 ms, nothing of Ray's Python is imported) avoids it,
    so rollout workers (``dreamgym.runtime.RayWorkers``) start in a process that
    opened a store.
    """
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("ray")
        if spec is None or spec.origin is None:
            return
        folder = Path(spec.origin).parent
        for library in folder.glob("_raylet*.so"):
            ctypes.CDLL(str(library))
            return
    except (ImportError, OSError, ValueError) as exc:
        log.debug("could not preload Ray's library: %s", exc)


log = logging.getLogger(__name__)
_load_ray_runtime_first()

from usearch.index import Index  # noqa: E402  (after Ray's library: see _load_ray_runtime_first)

INDEX_FILE = "index.usearch"
META_FILE = "index.json"


@dataclass(frozen=True, slots=True)
class AnnSettings:
    connectivity: int = 32
    expansion_add: int = 128
    expansion_search: int = 256


class AnnIndex:
    """A usearch HNSW index plus the highest sequence number it covers."""

    def __init__(self, dim: int, settings: AnnSettings, index: Index | None = None, covered_upto: int = 0) -> None:
        self.dim = dim
        self.settings = settings
        self.index = index if index is not None else self._new()
        self.covered_upto = covered_upto
        self.readonly = False

    def _new(self) -> Index:
        return Index(
            ndim=self.dim,
            metric="cos",
            dtype="f32",
            connectivity=self.settings.connectivity,
            expansion_add=self.settings.expansion_add,
            expansion_search=self.settings.expansion_search,
        )

    def __len__(self) -> int:
        return len(self.index)

    def add(self, seqs: npt.NDArray[np.uint64], vectors: npt.NDArray[np.float32], upto: int) -> None:
        """Add vectors (skipping keys already present) and advance ``covered_upto``."""
        if len(seqs):
            fresh = ~np.asarray(self.index.contains(seqs), dtype=bool).reshape(-1)
            if fresh.any():
                self.index.add(seqs[fresh], vectors[fresh], threads=2)
        self.covered_upto = max(self.covered_upto, upto)

    def search(self, query: npt.NDArray[np.float32], count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[Any]]:
        """Keys and cosine similarities of the approximate top ``count``."""
        if len(self.index) == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32)
        matches = self.index.search(query, count, threads=1)
        return np.asarray(matches.keys, dtype=np.uint64), 1.0 - np.asarray(matches.distances)

    def save(self, directory: Path, embedder: str) -> None:
        """Write the index and its meta atomically (temp file + rename)."""
        target = directory / INDEX_FILE
        tmp = directory / (INDEX_FILE + ".tmp")
        self.index.save(str(tmp))
        os.replace(tmp, target)
        meta = {"embedder": embedder, "dim": self.dim, "covered_upto": self.covered_upto, "count": len(self.index)}
        tmp_meta = directory / (META_FILE + ".tmp")
        tmp_meta.write_text(json.dumps(meta))
        os.replace(tmp_meta, directory / META_FILE)

    @classmethod
    def load(cls, directory: Path, embedder: str, dim: int, settings: AnnSettings, *, view: bool) -> AnnIndex | None:
        """The saved index, or ``None`` if it is missing, unreadable or from another embedder."""
        if not (directory / META_FILE).exists():
            return None
        try:
            meta = json.loads((directory / META_FILE).read_text())
            if meta["embedder"] != embedder or meta["dim"] != dim:
                log.warning("ignoring the index at %s: it was built by %s", directory, meta["embedder"])
                return None
            index = Index.restore(str(directory / INDEX_FILE), view=view)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            log.warning("the index at %s cannot be loaded (%s); it will be rebuilt", directory, exc)
            return None
        if index is None or index.ndim != dim:
            return None
        index.expansion_search = settings.expansion_search  # type: ignore[misc]  # it has a setter
        loaded = cls(dim, settings, index, int(meta["covered_upto"]))
        loaded.readonly = view
        return loaded

    @staticmethod
    def saved_coverage(directory: Path) -> int | None:
        """``covered_upto`` of the saved index, or ``None`` when there is none."""
        try:
            return int(json.loads((directory / META_FILE).read_text())["covered_upto"])
        except (OSError, ValueError, KeyError):
            return None

    @staticmethod
    def remove_files(directory: Path) -> None:
        for name in (INDEX_FILE, META_FILE):
            (directory / name).unlink(missing_ok=True)
