"""Fixtures of the trainer's tests: a tiny chat policy that reads the toy form page."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import warm_index_labels
from runtime_helpers import NAMES, TASK, goal, page

from dreamgym.agents import add_index_tokens, render_observation, system_message
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer

TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip


@pytest.fixture(scope="session")
def toy_chat() -> tuple[Any, Any]:
    """A randomly initialised tiny Llama and a BPE tokenizer with a chat template and the index policy's
    label tokens (seconds)."""
    pages = [page(seed, typed) for seed in range(len(NAMES)) for typed in ("", NAMES[seed])]
    texts = [system_message("index"), system_message("tagged"), TASK.instruction, *(goal(seed) for seed in range(4))]
    texts += [render_observation(p) for p in pages]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    model = scratch_model(tokenizer, TINY, seed=0)
    add_index_tokens(model, tokenizer)
    warm_index_labels(model, tokenizer, TASK, pages)
    return model, tokenizer
