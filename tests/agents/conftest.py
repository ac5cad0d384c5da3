"""Fixtures of the agents' tests: a tiny chat model built in-process."""

from __future__ import annotations

from typing import Any

import pytest
from agent_pages import BUTTONS, PAGES, TASK

from dreamgym.agents import render_observation, system_message
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer

TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip


@pytest.fixture(scope="session")
def tiny_chat() -> tuple[Any, Any]:
    """A randomly initialised tiny Llama and a BPE tokenizer with a chat template (seconds)."""
    texts = [system_message("action"), system_message("tagged"), TASK.instruction, BUTTONS.goal]
    texts += [render_observation(page) for page in (*PAGES, BUTTONS)]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    return scratch_model(tokenizer, TINY, seed=0), tokenizer
