"""Experience-model SFT: examples from real transitions, teacher reasoning, training, loading."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import toy_form
from openai_server import ServerState, openai_server
from sim_helpers import TINY, TOY_TEMPLATE, fill_toy_store, open_store

from dreamgym.core import ConfigError, Sampling
from dreamgym.simulator import (
    ExperienceModelConfig,
    LLMExperienceModel,
    LocalBackend,
    OpenAIBackend,
    SimulatedEnv,
    TemplateConfig,
)
from dreamgym.simulator._sft import (
    SPLITS,
    ScratchModelConfig,
    SimTrainConfig,
    annotate_reasoning,
    build_sft_examples,
    examples_digest,
    read_metadata,
    scratch_model,
    scratch_tokenizer,
    train_experience_model,
    train_tokenizer,
)

pytestmark = pytest.mark.anyio

FAST = SimTrainConfig(base="scratch", scratch=TINY, epochs=1, batch_size=4, max_length=1024, max_steps=3)


async def test_one_example_per_real_step_with_neighbours_outside_its_episode_and_seed(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        await store.append(toy_form.episode(0, "Ana", episode_id="synthetic-0", source="synthetic"))
        examples = await build_sft_examples(store, TOY_TEMPLATE)
    assert len(examples) == 4 * 2 * 2  # real steps only
    for example in examples:
        prompt = example.messages[-1].content
        own_goal = toy_form.goal(example.seed or 0)
        neighbour_goals = re.findall(r"#\d goal: (.*)", prompt)
        assert neighbour_goals and own_goal not in neighbour_goals
    first = next(e for e in examples if e.step_index == 0 and e.episode_id == "toy-0-Ana")
    assert (
        first.completion == "<diff>\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>\n<reward>0</reward>\n<done>no</done>"
    )
    assert {e.action_name for e in examples if e.step_index == 0} == {"type"}  # what balance groups no-ops by
    assert {e.action_name for e in examples if e.step_index == 1} == {"click"}


async def test_with_the_target_alias_every_example_writes_the_actions_element_as_e0(tmp_path: Path) -> None:
    aliased = dataclasses.replace(TOY_TEMPLATE, target_alias=True)
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(3))
        examples = await build_sft_examples(store, aliased)
        plain = await build_sft_examples(store, TOY_TEMPLATE)
    first = next(e for e in examples if e.step_index == 0 and e.episode_id == "toy-0-Ana")
    assert (
        first.completion == "<diff>\n- [e0] textbox\n+ [e0] textbox: Ana\n</diff>\n<reward>0</reward>\n<done>no</done>"
    )
    assert first.messages[-1].content.endswith("Action: type [e0] [Ana] [0]")
    for example, same in zip(examples, plain, strict=True):  # the same steps, the same neighbours, ids swapped
        assert (example.episode_id, example.step_index) == (same.episode_id, same.step_index)
        assert example.messages[-1].content.count("[e0]") > 0 == same.messages[-1].content.count("[e0]")
    out = train_experience_model(examples, tmp_path / "model", FAST, template=aliased)
    assert read_metadata(out)["template_id"].endswith(":alias")


async def test_held_out_pairs_and_episodes_give_no_examples(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        examples = await build_sft_examples(
            store, TOY_TEMPLATE, exclude_task_seeds=[("toy/form", 1)], exclude_episodes=["toy-2-Cyd"]
        )
    assert {(e.seed, e.episode_id) for e in examples}.isdisjoint({(1, "toy-1-Bo"), (2, "toy-2-Cyd")})
    assert all(e.seed != 1 for e in examples) and len(examples) == 10
    assert all(toy_form.goal(1) not in e.messages[-1].content for e in examples)


async def test_reasoning_template_needs_a_teacher(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(1))
        with pytest.raises(ConfigError, match="teacher"):
            await build_sft_examples(store, TemplateConfig(reasoning=True))


def teacher_reply(body: dict[str, Any]) -> str:
    steps = re.findall(r"^Step (\d+): (.*)$", body["messages"][-1]["content"], re.MULTILINE)
    return "\n".join(f"<step {n}>The agent did {action}.</step>" for n, action in steps)


async def test_teacher_annotates_whole_trajectories_in_hindsight(tmp_path: Path) -> None:
    state = ServerState(chat_reply=teacher_reply)
    with openai_server(state) as (url, _):
        teacher = OpenAIBackend(model="teacher", base_url=url)
        async with open_store(tmp_path / "store") as store:
            await fill_toy_store(store, range(2))
            episodes = [await store.episode_steps(e) for e in ("toy-0-Ana", "toy-0-Dee")]
            reasoning = await annotate_reasoning(teacher, episodes)
            examples = await build_sft_examples(
                store, TemplateConfig(reasoning=True, neighbours=1), reasoning=reasoning
            )
        await teacher.aclose()
    assert len(state.requests) == 2  # one call per trajectory
    assert "The episode succeeded." in state.requests[0]["messages"][-1]["content"]
    assert "did not succeed" in state.requests[1]["messages"][-1]["content"]
    assert reasoning[("toy-0-Ana", 1)] == 'The agent did click [e3] "Submit".'
    annotated = next(e for e in examples if (e.episode_id, e.step_index) == ("toy-0-Ana", 0))
    assert annotated.completion.startswith("<think>The agent did type [e2] [Ana] [0].</think>")


async def test_training_from_scratch_writes_a_loadable_model_with_its_recipe(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        examples = await build_sft_examples(store, TOY_TEMPLATE)
    out = train_experience_model(examples, tmp_path / "model", FAST, template=TOY_TEMPLATE,
                                 extra_metadata={"recipe": "test"})  # fmt: skip
    meta = read_metadata(out)
    assert meta["template_id"] == TOY_TEMPLATE.template_id and meta["trained_with_reasoning"] is False
    assert meta["examples"] == 8 and meta["base"] == "scratch" and meta["recipe"] == "test"
    assert meta["examples_digest"] == examples_digest(examples)  # which data trained it
    assert examples_digest(examples[1:]) != meta["examples_digest"] != examples_digest(examples[::-1])
    assert not (out / "_trainer").exists()
    backend = LocalBackend.load(out)
    completion = await backend.complete(TOY_TEMPLATE.messages(_query()), Sampling(max_new_tokens=8))
    assert completion.completion_tokens > 0


async def test_a_model_whose_tokenizer_splits_on_whitespace_trains_loads_and_records_it(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        examples = await build_sft_examples(store, TOY_TEMPLATE)
    config = dataclasses.replace(FAST, scratch=dataclasses.replace(TINY, split="whitespace"))
    out = train_experience_model(examples, tmp_path / "model", config, template=TOY_TEMPLATE)
    assert read_metadata(out)["config"]["scratch"]["split"] == "whitespace"
    backend = LocalBackend.load(out)
    # the loaded tokenizer is the one trained on the examples with that split, and cuts as it does: a piece can
    # join a bracket and the letters after it (GPT-2's rule keeps them apart)
    trained = scratch_tokenizer(examples, config.scratch)
    page = toy_form.page(1).state
    assert backend.tokenizer(page)["input_ids"] == trained(page)["input_ids"]
    assert any(re.fullmatch(r"\[e\d*\]?", piece) for piece in backend.tokenizer.tokenize(page))
    completion = await backend.complete(TOY_TEMPLATE.messages(_query()), Sampling(max_new_tokens=8))
    assert completion.completion_tokens > 0


def test_each_split_loses_nothing_and_whitespace_takes_fewer_tokens_per_page(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    pages = [toy_form.page(i).state for i in range(6)]
    odd = '  [e7] textbox "Ünï ✓"\t\ttab\n\n\n   日本語 x  y \r\n'  # unseen characters and runs of spaces
    lengths = {}
    for split in SPLITS:
        tokenizer = train_tokenizer(pages * 4, 400, split=split)
        tokenizer.save_pretrained(tmp_path / split)
        loaded = AutoTokenizer.from_pretrained(tmp_path / split)
        for text in (*pages, odd):
            ids = tokenizer(text)["input_ids"]
            assert tokenizer.decode(ids) == text and loaded(text)["input_ids"] == ids
        lengths[split] = sum(len(tokenizer(page)["input_ids"]) for page in pages)
    assert lengths["whitespace"] < 0.8 * lengths["punctuation"]


async def test_lora_fine_tuning_of_a_local_base_loads_as_a_local_backend(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        examples = await build_sft_examples(store, TOY_TEMPLATE)
    base = tmp_path / "base"
    tokenizer = train_tokenizer(
        [e.completion for e in examples] + [m.content for e in examples for m in e.messages], 400
    )
    scratch_model(tokenizer, TINY).save_pretrained(base)
    tokenizer.save_pretrained(base)
    config = SimTrainConfig(base=str(base), lora=True, lora_rank=4, epochs=1, batch_size=4, max_steps=2)
    out = train_experience_model(examples, tmp_path / "adapter", config, template=TOY_TEMPLATE)
    assert (out / "adapter_config.json").exists() and read_metadata(out)["lora"] is True
    backend = LocalBackend.load(out)
    assert backend.backend_id.startswith("local:adapter@")
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE, max_attempts=1))
    env = SimulatedEnv(model)
    env.start_from(toy_form.TASK, toy_form.page(0))
    from dreamgym.core import parse_action

    result = await env.step(parse_action("type [e2] [Ana] [0]"))
    assert result.truncated or result.observation.state  # a step either way; never an exception


def test_bad_training_settings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="local model directory"):
        SimTrainConfig(base=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="split must be one of"):
        ScratchModelConfig(split="bytes")
    with pytest.raises(ConfigError, match="split must be one of"):
        train_tokenizer(["a page"], 300, split="words")
    with pytest.raises(ConfigError, match="no SFT examples"):
        train_experience_model([], tmp_path / "m", FAST, template=TOY_TEMPLATE)


def _query() -> Any:
    from dreamgym.core import ExperienceQuery, parse_action

    return ExperienceQuery(task=toy_form.TASK, history=(), observation=toy_form.page(0),
                           action=parse_action("type [e2] [Ana] [0]"))  # fmt: skip
