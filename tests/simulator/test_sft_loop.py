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

from dreamgym.core.errors import ConfigError
from dreamgym.core.progress import listening
from dreamgym.replay import LmdbReplayStore, StoreConfig
from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries
from dreamgym.simulator._loop import (
    IGNORE,
    TokenizedExample,
    _answer_loss,
    _collate,
    fit,
    length_grouped_batches,
    micro_batches,
    shared_prefix,
    tokenize_example,
)
from dreamgym.simulator._sft import (
    OUTCOME_MARK,
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


async def test_the_weighted_tail_is_the_answers_reward_and_end(tmp_path: Path) -> None:
    example = (await _examples(tmp_path))[0]
    tokenizer = train_tokenizer([m.content for m in example.messages] + [example.completion], 400)
    row = tokenize_example(tokenizer, *_conversation(example), weight_from=OUTCOME_MARK)
    assert row.weighted_from is not None and row.prompt_length < row.weighted_from < len(row)
    tail = tokenizer.decode(row.input_ids[row.weighted_from :])
    assert tail.strip().startswith("<reward>") and tail.rstrip().endswith("<|end|>")
    assert "<diff>" not in tail and tail.count("<done>") == 1
    assert tokenize_example(tokenizer, *_conversation(example)).weighted_from is None  # asked for none
    assert tokenize_example(tokenizer, *_conversation(example), weight_from="<absent>").weighted_from is None
    answer, kept = len(row) - row.prompt_length, len(row) - row.weighted_from
    assert row.weight(1.0) == answer and row.weight(5.0) == answer + 4 * kept


async def test_an_outcome_weight_multiplies_the_tails_loss_and_nothing_else(tmp_path: Path) -> None:
    import torch

    examples = await _examples(tmp_path)
    texts = [m.content for e in examples for m in e.messages] + [e.completion for e in examples]
    tokenizer = train_tokenizer(texts, 400)
    rows = [tokenize_example(tokenizer, *_conversation(e), weight_from=OUTCOME_MARK) for e in examples[:5]]
    model = scratch_model(tokenizer, TINY)
    plain = _collate(rows, tokenizer.pad_token_id, "cpu")
    assert "weights" not in plain and "weights" not in _collate(rows, tokenizer.pad_token_id, "cpu", 1.0)
    heavy = _collate(rows, tokenizer.pad_token_id, "cpu", 5.0)
    with torch.no_grad():
        logits = model(input_ids=plain["input_ids"], attention_mask=plain["attention_mask"]).logits[:, :-1]
        each = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), plain["labels"][:, 1:].reshape(-1), reduction="none"
        ).reshape(len(rows), -1)
        tail = torch.zeros_like(each, dtype=torch.bool)
        for n, row in enumerate(rows):
            tail[n, row.weighted_from - 1 : len(row) - 1] = True  # position p predicts token p + 1
        expected = each.sum() + 4 * each[tail].sum()
        prefix = shared_prefix(rows)
        for keeps, shared in ((True, 0), (False, 0), (True, prefix)):
            weighted = _answer_loss(model, heavy, keeps_logits=keeps, prefix=shared)
            assert torch.allclose(weighted, expected, rtol=1e-5)
            assert torch.allclose(_answer_loss(model, plain, keeps_logits=keeps, prefix=shared), each.sum(), rtol=1e-5)


def test_an_outcome_weight_needs_the_plain_loop_and_a_positive_value() -> None:
    assert SimTrainConfig(outcome_weight=8.0).outcome_weight == 8.0
    with pytest.raises(ConfigError, match="plain loop"):
        SimTrainConfig(outcome_weight=8.0, loop="trl")
    with pytest.raises(ConfigError, match="> 0"):
        SimTrainConfig(outcome_weight=0.0)


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


def test_micro_batches_hold_each_example_once_of_like_length_within_the_budget() -> None:
    rng = random.Random(0)
    lengths = [rng.randrange(50, 1500) for _ in range(400)]
    for batch in length_grouped_batches(lengths, 8, random.Random(1), grouped=False):
        parts = micro_batches(lengths, batch, 2048)
        assert sorted(i for part in parts for i in part) == sorted(batch)
        for part in parts:
            longest = max(lengths[i] for i in part)
            assert len(part) == 1 or len(part) * longest <= 2048
            assert min(lengths[i] for i in part) >= 0.8 * longest
    assert micro_batches([100] * 8, list(range(8)), 4096) == [list(range(8))]  # equal lengths: one micro-batch
    assert micro_batches([5000, 100], [0, 1], 4096) == [[0], [1]]  # over the budget alone: still fed


async def _tiny_rows(tmp_path: Path) -> tuple[Any, list[Any]]:
    examples = await _examples(tmp_path)
    texts = [m.content for e in examples for m in e.messages] + [e.completion for e in examples]
    tokenizer = train_tokenizer(texts, 400)
    return tokenizer, [tokenize_example(tokenizer, *_conversation(e)) for e in examples]


async def test_answer_logits_alone_and_a_prefix_run_once_give_the_loss_of_the_whole_output(tmp_path: Path) -> None:
    import torch

    tokenizer, rows = await _tiny_rows(tmp_path)
    model = scratch_model(tokenizer, TINY)
    inputs = _collate(rows[:5], tokenizer.pad_token_id, "cpu")
    whole = model(**inputs).loss * int((inputs["labels"][:, 1:] != IGNORE).sum())  # transformers' own loss, summed
    answered = _answer_loss(model, inputs, keeps_logits=True)
    assert torch.allclose(answered, _answer_loss(model, inputs, keeps_logits=False), rtol=1e-5)
    assert torch.allclose(answered, whole, rtol=1e-5)
    prefix = shared_prefix(rows)
    assert prefix > 16 and all(row.input_ids[:prefix] == rows[0].input_ids[:prefix] for row in rows)
    for keeps in (True, False):
        assert torch.allclose(_answer_loss(model, inputs, keeps_logits=keeps, prefix=prefix), whole, rtol=1e-5)


def test_the_shared_prefix_stops_before_the_shortest_prompts_last_token() -> None:
    def row(ids: list[int], prompt: int) -> TokenizedExample:
        return TokenizedExample(input_ids=tuple(ids), prompt_length=prompt)

    same = list(range(40))
    assert shared_prefix([row([*same, 1, 2], 41), row([*same, 3], 40)]) == 39  # the prompt's last token stays
    assert shared_prefix([row([*same[:30], 99, *same[31:]], 40), row(same, 40)]) == 30  # they part at 30
    assert shared_prefix([row(same, 12), row(same, 40)]) == 0  # shorter than worth running apart
    assert shared_prefix([row([5, *same], 41), row(same, 40)]) == 0 and shared_prefix([]) == 0


async def test_micro_batched_steps_train_the_weights_the_padded_batches_would(tmp_path: Path) -> None:
    """Six optimizer steps of ``fit`` (micro-batches, answer logits) against the same steps taken the plain way:
    each random batch padded and fed whole, transformers' own loss."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    tokenizer, rows = await _tiny_rows(tmp_path)
    lengths = [len(r) for r in rows]
    assert len(set(lengths)) > 4  # batches of unlike lengths: fit splits them
    start = scratch_model(tokenizer, TINY, seed=3)
    fitted = scratch_model(tokenizer, TINY, seed=3)
    reference = scratch_model(tokenizer, TINY, seed=3)
    result = fit(fitted, rows, pad_id=tokenizer.pad_token_id, epochs=2, batch_size=8, learning_rate=3e-3, seed=5,
                 group_by_length=False, micro_batch_tokens=256)  # fmt: skip
    rng = random.Random(5)  # fit's plan: two epochs of random batches from its seed
    plan = [batch for _ in range(2) for batch in length_grouped_batches(lengths, 8, rng, grouped=False)]
    assert result.steps == len(plan) == 6
    assert result.shared_prefix == shared_prefix(rows) > 16  # the template's system message ran once per micro-batch
    assert result.padded_tokens < sum(max(lengths[i] for i in batch) * len(batch) for batch in plan)

    optimizer = torch.optim.AdamW(reference.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = get_cosine_schedule_with_warmup(optimizer, 1, 6)
    reference.train()
    for batch in plan:
        reference(**_collate([rows[i] for i in batch], tokenizer.pad_token_id, "cpu")).loss.backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    moved = 0
    for (name, a), b in zip(fitted.named_parameters(), reference.parameters(), strict=True):
        assert torch.allclose(a, b, atol=2e-5), name
        moved += int(not torch.equal(a, start.get_parameter(name)))
    assert moved > 10  # the steps changed the weights


async def test_a_model_with_a_sliding_window_cache_feeds_the_prefix_with_each_row(tmp_path: Path) -> None:
    """Rows may attend to a prefix run apart only through a plain full-attention cache: a sliding-window model
    (Mistral, a window shorter than the prefix) gets the prefix with each row, and trains as without sharing."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer, rows = await _tiny_rows(tmp_path)
    assert shared_prefix(rows) > 8

    def model() -> Any:
        torch.manual_seed(3)
        return MistralForCausalLM(MistralConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, sliding_window=8, pad_token_id=tokenizer.pad_token_id,
        ))  # fmt: skip

    settings = {"pad_id": tokenizer.pad_token_id, "epochs": 1, "batch_size": 8, "learning_rate": 3e-3, "max_steps": 2}
    shared, whole = model(), model()
    assert fit(shared, rows, **settings).shared_prefix == 0
    assert fit(whole, rows, share_prefix=False, **settings).shared_prefix == 0
    for a, b in zip(shared.parameters(), whole.parameters(), strict=True):
        assert torch.equal(a, b)


async def test_bfloat16_on_the_cpu_runs_the_passes_in_bfloat16_over_float32_weights(tmp_path: Path) -> None:
    """Six real optimizer steps with ``dtype="bfloat16"``: where the CPU has bfloat16 units the layers compute in
    bfloat16 (autocast) and the weights stay float32, moving as the float32 run's do, to bfloat16's precision;
    elsewhere the run is float32's, step for step."""
    import torch

    from dreamgym.core.devices import cpu_has_bfloat16

    tokenizer, rows = await _tiny_rows(tmp_path)
    start, full, mixed = (scratch_model(tokenizer, TINY, seed=3) for _ in range(3))
    seen: list[torch.dtype] = []
    mixed.model.layers[0].mlp.down_proj.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    settings = {"pad_id": tokenizer.pad_token_id, "epochs": 2, "batch_size": 8, "learning_rate": 3e-3, "seed": 5}
    reference = fit(full, rows, **settings)
    result = fit(mixed, rows, dtype="bfloat16", **settings)
    assert reference.precision == "float32"
    assert all(p.dtype == torch.float32 for p in mixed.parameters())
    native = cpu_has_bfloat16()
    assert result.precision == ("bfloat16" if native else "float32")
    passes = seen[1:]  # the first: fit's look, without gradients, at how the model caches the shared prefix
    assert len(passes) >= result.steps and set(passes) == ({torch.bfloat16} if native else {torch.float32})
    for (name, a), b in zip(mixed.named_parameters(), full.parameters(), strict=True):
        before = start.get_parameter(name)
        if native:  # the same direction, not the same bits
            step_a, step_b = (a - before).flatten(), (b - before).flatten()
            if step_b.norm() > 0:
                assert torch.nn.functional.cosine_similarity(step_a, step_b, dim=0) > 0.9, name
        else:
            assert torch.equal(a, b), name
    assert abs(result.loss - reference.loss) < 0.05 * reference.loss


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


async def test_trls_loop_trains_the_same_weights_with_activation_checkpointing_on_or_off(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    examples = await _examples(tmp_path, seeds=3)
    weights = {}
    for on in (True, False):
        config = SimTrainConfig(base="scratch", scratch=TINY, epochs=2, batch_size=4, max_length=1024, loop="trl",
                                activation_checkpointing=on)  # fmt: skip
        out = train_experience_model(examples, tmp_path / str(on), config, template=TOY_TEMPLATE)
        assert read_metadata(out)["activation_checkpointing"] is on  # the model was (not) checkpointing
        weights[on] = load_file(str(out / "model.safetensors"))
    assert weights[True].keys() == weights[False].keys()
    for name, tensor in weights[True].items():  # six steps: recomputing the forward pass changed nothing
        assert torch.equal(tensor, weights[False][name]), name


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
