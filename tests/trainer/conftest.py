"""Fixtures of the trainer's tests: a tiny chat policy that reads the toy form page."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_helpers import NAMES, TASK, goal, page

from dreamgym.agents import render_observation, system_message
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer

TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip


@pytest.fixture(scope="session")
def toy_chat() -> tuple[Any, Any]:
    """A randomly initialised tiny Llama and a BPE tokenizer with a chat template (seconds)."""
    pages = [page(seed, typed) for seed in range(len(NAMES)) for typed in ("", NAMES[seed])]
    texts = [system_message("action"), TASK.instruction, *(goal(seed) for seed in range(4))]
    texts += [render_observation(p) for p in pages]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    return scratch_model(tokenizer, TINY, seed=0), tokenizer
