"""The replay store: LMDB records (the source of truth) plus a derived usearch index."""

from dreamgym.replay._shadow import NOT_STORED, UNUSABLE_PREDICTIONS, shadow_predictions
from dreamgym.replay.config import AnnSettings, StoreConfig
from dreamgym.replay.embedders import (
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    default_embedder,
    embedder_from_name,
    transition_text,
)
from dreamgym.replay.export import (
    STEP_COLUMNS,
    episodes_dataset,
    export_jsonl,
    export_parquet,
    import_jsonl,
    steps_dataset,
)
from dreamgym.replay.store import LmdbReplayStore, StoreStats

__all__ = [
    "NOT_STORED",
    "STEP_COLUMNS",
    "UNUSABLE_PREDICTIONS",
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
    "export_parquet",
    "import_jsonl",
    "shadow_predictions",
    "steps_dataset",
    "transition_text",
]
