"""Retrieval queries embedded in batches, for the places that ask many at once (SFT data, fidelity)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dreamgym.core.protocols import ReplayStore

__all__ = ["embed_queries"]


async def embed_queries(store: ReplayStore, texts: Sequence[str], *, batch: int = 256) -> Any:
    """Query vectors for ``store.nearest`` (row ``i`` for ``texts[i]``), embedded in batches by the store's embedder.

    A store without an ``embedder`` attribute gets the texts back, which
    ``nearest`` then embeds one at a time.
    """
    import numpy as np

    embedder = getattr(store, "embedder", None)
    if embedder is None:
        return list(texts)
    parts = [await embedder.embed(list(texts[i : i + batch])) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)
