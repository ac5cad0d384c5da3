"""Fixtures of the simulator's tests."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from sim_helpers import TINY, TOY_TEMPLATE, fill_toy_store, open_store

from dreamgym.simulator import SFTExample, SimTrainConfig, build_sft_examples, train_experience_model


@pytest.fixture(scope="session")
def tiny_sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny experience model trained from scratch on the toy store by the real SFT pipeline (seconds)."""
    root = tmp_path_factory.mktemp("tiny-sim")

    async def examples() -> list[SFTExample]:
        async with open_store(root / "store") as store:
            await fill_toy_store(store)
            return await build_sft_examples(store, TOY_TEMPLATE)

    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=4, batch_size=8, learning_rate=3e-3, max_length=1024)
    return train_experience_model(anyio.run(examples), root / "model", config, template=TOY_TEMPLATE)
