"""The replay store: LMDB records (the source of truth) plus a derived usearch index."""

from dreamgym.replay.config import AnnSettings, StoreConfig
from dreamgym.replay.embedders import (
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    default_embedder,
    embedder_from_name,
    transition_text,
)
from dreamgym.replay.export import episodes_dataset, export_jsonl, import_jsonl
from dreamgym.replay.store import LmdbReplayStore, StoreStats

__all__ = [
    "AnnSettings",
    "HashingEmbedder",
    "LmdbReplayStore",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "StoreConfig",
    "StoreStats",
    "default_embedder",
    "embedder_from_name",
    "episodes_dataset",
    "export_jsonl",
    "import_jsonl",
    "transition_text",
]
