"""Settings of the replay store."""

from __future__ import annotations

from dataclasses import dataclass, field

from dreamgym.core.errors import ConfigError
from dreamgym.core.types import SOURCES, Source
from dreamgym.replay._ann import AnnSettings

__all__ = ["AnnSettings", "StoreConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """How a :class:`~dreamgym.replay.LmdbReplayStore` stores and indexes."""

    map_size: int = 1 << 36
    """Initial LMDB map size in bytes. The file is sparse, so a large map costs
    only address space; a full map is grown (doubled) automatically."""
    sync: bool = True
    """fsync at every commit. With ``True`` a returned commit survives power
    loss; with ``False`` it survives a process crash but a power loss may lose
    the last commits (and LMDB may then need the file restored)."""
    index_sources: tuple[Source, ...] = ("real",)
    """Which steps get embedded and indexed. Synthetic steps are left out by
    default: the embedder is far slower than ingest."""
    auto_index: bool = True
    """Embed and index in the background after each commit. With ``False``
    nothing is embedded until :meth:`flush` (bulk ingest, benchmarks)."""
    embed_batch_size: int = 256
    """Steps read and embedded per indexing round."""
    exact_threshold: int = 20_000
    """Candidate sets up to this size are searched exactly; the usearch index
    is built only once the store holds more vectors than this."""
    ann: AnnSettings = field(default_factory=AnnSettings)
    """usearch HNSW settings."""
    index_save_every: int = 10_000
    """Save the index file after this many new vectors (and at flush/close)."""
    max_commit_records: int = 20_000
    """Most records one group commit gathers from waiting writers."""
    request_buffer: int = 256
    """Write requests that may wait for the writer before ``append`` blocks."""

    def __post_init__(self) -> None:
        if self.map_size < 1 << 16:
            raise ConfigError(f"map_size must be at least 64 KiB, got {self.map_size}")
        for source in self.index_sources:
            if source not in SOURCES:
                raise ConfigError(f"index_sources may hold 'real' and 'synthetic', not {source!r}")
        for name in ("embed_batch_size", "index_save_every", "max_commit_records", "request_buffer"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.exact_threshold < 0:
            raise ConfigError(f"exact_threshold must be >= 0, got {self.exact_threshold}")
