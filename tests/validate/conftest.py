"""Fixtures of the validation tests: a tiny experience model trained on the toy task by the real SFT pipeline."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from validate_helpers import TEMPLATE, TINY, fill_store, open_store

from dreamgym.simulator import SFTExample, SimTrainConfig, build_sft_examples, train_experience_model


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained from scratch on the toy task (seeds 0-7), next to its store ``../store``."""
    root = tmp_path_factory.mktemp("toy-validate")

    async def examples() -> list[SFTExample]:
        async with open_store(root / "store") as store:
            await fill_store(store, range(8))
            return await build_sft_examples(store, TEMPLATE)

    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=3, batch_size=8, learning_rate=3e-3, max_length=1024)
    extra = {"store": str(root / "store"), "held_out": [["toy/name", 10], ["toy/name", 11]]}
    return train_experience_model(anyio.run(examples), root / "model", config, template=TEMPLATE, extra_metadata=extra)
