"""Tiny real models for MiniWoB++ jobs in the tests: a chat policy and an experience model, built in seconds."""

from __future__ import annotations

from pathlib import Path

import anyio

from dreamgym.agents import render_observation, system_message
from dreamgym.core import Observation
from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import SimTrainConfig, TemplateConfig, build_sft_examples, train_experience_model
from dreamgym.simulator._sft import ScratchModelConfig, scratch_model, train_tokenizer

TASK = "click-button"
TINY = ScratchModelConfig(vocab_size=600, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip
TEMPLATE = TemplateConfig(history=1, neighbours=2)


def tiny_policy(path: Path) -> Path:
    """A randomly initialised tiny Llama with a chat-template tokenizer, saved the way LocalPolicy.load reads it."""
    page = Observation(
        state='[e1] RootWebArea "Click Test"\n  [e2] button "ONE"\n  [e3] button "TWO"', goal="Click ONE"
    )
    texts = [system_message("action"), render_observation(page), 'click [e2] "ONE"', "Click on the button."]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    scratch_model(tokenizer, TINY, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


async def tiny_experience_model(root: Path) -> Path:
    """A tiny experience model trained from scratch by the real SFT pipeline on real click-button episodes."""
    async with LmdbReplayStore(root / "store", embedder=HashingEmbedder(64)) as store:
        await collect_miniwob(store, CollectPlan(tasks=(TASK,), seeds=(0, 1), explorers=1, max_steps=3))
        await store.flush()
        examples = await build_sft_examples(store, TEMPLATE)
    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, learning_rate=3e-3, max_length=4096)
    return await anyio.to_thread.run_sync(
        lambda: train_experience_model(examples, root / "sim", config, template=TEMPLATE)
    )
