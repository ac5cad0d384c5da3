"""The experience model's plain supervised loop: what it trains on, how it batches, and that it learns like TRL's."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import toy_form
from helpers import Recorder
from sim_helpers import EMBEDDER, TINY, TOY_TEMPLATE, fill_toy_store, open_store

from dreamgym.core.progress import listening
from dreamgym.replay import LmdbReplayStore, StoreConfig
from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries
from dreamgym.simulator._loop import IGNORE, _collate, fit, length_grouped_batches, tokenize_example
from dreamgym.simulator._sft import (
    SFTExample,
    SimTrainConfig,
    _conversation,
    build_sft_examples,
    read_metadata,
    scratch_model,
    train_experience_model,
    train_tokenizer,
)

pytestmark = pytest.mark.anyio


async def _examples(tmp_path: Path, seeds: int = 6) -> list[SFTExample]:
    """Four examples per seed (two episodes of two steps)."""
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(seeds))
        return await build_sft_examples(store, TOY_TEMPLATE)


async def test_the_loss_covers_the_answer_and_its_end_and_nothing_of_the_prompt(tmp_path: Path) -> None:
    example = (await _examples(tmp_path))[0]
    tokenizer = train_tokenizer([m.content for m in example.messages] + [example.completion], 400)
    row = tokenize_example(tokenizer, *_conversation(example))
    batch = _collate([row], tokenizer.pad_token_id, "cpu")
    trained = [int(t) for t in batch["labels"][0] if int(t) != IGNORE]
    prompt = tokenizer.apply_chat_template(_conversation(example)[0], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(row.input_ids[: row.prompt_length]) == prompt
    assert tokenizer.decode(trained).startswith(example.completion + "<|end|>")
    assert len(trained) == len(row) - row.prompt_length


def test_grouped_batches_visit_every_example_once_with_little_padding() -> None:
    rng = random.Random(0)
    lengths = [rng.randrange(50, 1500) for _ in range(997)]
    grouped = length_grouped_batches(lengths, 8, random.Random(1))
    plain = length_grouped_batches(lengths, 8, random.Random(1), grouped=False)
    assert sorted(i for batch in grouped for i in batch) == list(range(997))
    assert sorted(i for batch in plain for i in batch) == list(range(997))

    def padding(batches: list[list[int]]) -> float:
        return 1 - sum(lengths[i] for b in batches for i in b) / sum(
            max(lengths[i] for i in b) * len(b) for b in batches
        )

    assert padding(grouped) < 0.05
    assert padding(plain) > 0.2


async def test_fit_lowers_the_answer_loss_of_a_scratch_model(tmp_path: Path) -> None:
    examples = await _examples(tmp_path)
    texts = [m.content for e in examples for m in e.messages] + [e.completion for e in examples]
    tokenizer = train_tokenizer(texts, 400)
    rows = [tokenize_example(tokenizer, *_conversation(e)) for e in examples]
    model = scratch_model(tokenizer, TINY)
    first = fit(model, rows, pad_id=tokenizer.pad_token_id, epochs=1, batch_size=4, learning_rate=3e-3, max_steps=1)
    later = fit(model, rows, pad_id=tokenizer.pad_token_id, epochs=6, batch_size=4, learning_rate=3e-3)
    assert later.last_loss < first.last_loss / 2
    assert later.tokens == 6 * sum(len(r) for r in rows)  # each epoch feeds every example once
    assert not model.training


@pytest.mark.parametrize("loop", ["plain", "trl"])
async def test_both_loops_write_a_loadable_model_with_their_figures(tmp_path: Path, loop: str) -> None:
    examples = await _examples(tmp_path, seeds=3)
    config = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, max_length=1024, loop=loop)
    out = train_experience_model(examples, tmp_path / loop, config, template=TOY_TEMPLATE)
    meta = read_metadata(out)
    assert meta["config"]["loop"] == loop
    assert meta["train_steps"] == 3  # 12 examples, batches of 4, one epoch
    assert meta["tokens_per_second"] > 0
    assert (out / "config.json").exists()


class _ForgetfulStore(LmdbReplayStore):
    """A store that claims no stored embeddings, so example building embeds every query itself."""

    async def embedded(self, seqs: Sequence[int]) -> dict[int, Any]:
        return {}


async def test_examples_from_the_stores_own_embeddings_equal_those_embedded_afresh(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(6))
        reused = await build_sft_examples(store, TOY_TEMPLATE)
        assert len(await store.embedded(list(range(1, 100)))) == len(reused)  # every real step has its vector
    async with _ForgetfulStore(tmp_path / "store", embedder=EMBEDDER) as store:
        fresh = await build_sft_examples(store, TOY_TEMPLATE)
    assert reused == fresh


async def test_building_and_training_an_experience_model_report_each_phase_to_its_end(tmp_path: Path) -> None:
    recorder = Recorder()
    with listening(recorder):
        async with open_store(tmp_path / "store", config=StoreConfig(auto_index=False)) as store:
            await store.put_task(toy_form.TASK)
            for steps in toy_form.episodes(range(3)):
                await store.append(steps)
            await store.flush()
            examples = await build_sft_examples(store, TOY_TEMPLATE)
            config = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, max_length=1024)
            out = train_experience_model(examples, tmp_path / "model", config, template=TOY_TEMPLATE)
            model = load_experience_model(out, store=store)
            queries = await teacher_forced_queries(list(toy_form.episode(7, "Gus")), store=store, neighbours=2)
            await predict_steps(model, queries, what="predict the toy steps")
    finished = recorder.finished()
    assert finished["embed and index steps"] == 12
    assert finished["build SFT examples (retrieval, prompts)"] == 12
    assert finished["train the experience model (12 examples)"] == 3
    assert finished["predict the toy steps"] == 2
    assert recorder.totals == {what: done for what, done in finished.items()}
