"""dreamgym environments through TRL's ``environment_factory``: the tools, the outcome, one GRPO step on MiniWoB++."""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from gymnasium.error import ClosedEnvironmentError
from runtime_helpers import NAMES, TASK, ToyFormEnv

from dreamgym.adapters import (
    TOOL_NAMES,
    TRL_PROMPT,
    TRLEnvironmentFactory,
    TRLWebEnvironment,
    WebEnv,
    miniwob_env,
    trl_dataset,
    trl_miniwob_factory,
    trl_simulated_miniwob_factory,
)
from dreamgym.core import ACTIONS, ConfigError, Environment

CLICK_BUTTON = "miniwob/click-button"
SEED = 1
"""The click-button page of seed 1 holds one button, [e4] "Ok", and texts such as [e3]."""


@asynccontextmanager
async def open_toy_form() -> AsyncIterator[Environment]:
    yield ToyFormEnv()


def toy_environment(max_steps: int = 5) -> TRLWebEnvironment:
    return TRLWebEnvironment(WebEnv(open_toy_form, [TASK], max_steps=max_steps))


@pytest.fixture
def toy() -> Iterator[TRLWebEnvironment]:
    environment = toy_environment()
    yield environment
    environment.web_env.close()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """On a busy machine torch's thread pool spins, and a tiny model's step takes a hundred times longer."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------- the tools


def test_there_is_one_tool_per_action_builder_named_after_it() -> None:
    assert set(TOOL_NAMES) == {spec.builder.__name__ for spec in ACTIONS.values()}


def test_the_tools_are_the_public_methods_trl_finds(toy: TRLWebEnvironment) -> None:
    # What GRPOTrainer lists as an environment's tools: its public functions other than reset and get_reward.
    found = [
        name
        for name, _ in inspect.getmembers(TRLWebEnvironment, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]
    assert found == list(TOOL_NAMES)
    assert [tool.__name__ for tool in toy.tools] == found


def test_every_tool_has_a_json_schema_for_the_chat_template(toy: TRLWebEnvironment) -> None:
    from transformers.utils import get_json_schema

    schemas = {tool.__name__: get_json_schema(tool)["function"] for tool in toy.tools}
    assert schemas["click"]["parameters"]["required"] == ["element"]
    assert schemas["scroll"]["parameters"]["properties"]["direction"]["enum"] == ["up", "down"]
    assert schemas["type_text"]["parameters"]["properties"]["press_enter_after"]["type"] == "boolean"


# --------------------------------------------------------------------------- episodes (the toy form)


def test_reset_returns_the_goal_and_the_first_page(toy: TRLWebEnvironment) -> None:
    text = toy.reset(task=TASK.task_id, seed=2, prompt=[{"role": "user", "content": "ignored"}])
    assert text.startswith(f'Goal: Enter "{NAMES[2]}" and press Submit.\n')
    assert '[e3] button "Submit"' in text


def test_a_tool_call_acts_in_the_environment_and_returns_the_new_page(toy: TRLWebEnvironment) -> None:
    toy.reset(task=TASK.task_id, seed=0)
    page = toy.type_text("e2", "Bo", press_enter_after=False)
    assert "[e2] textbox: Bo" in page
    assert [str(action) for action in toy.actions] == ["type [e2] [Bo] [0]"]
    assert toy.get_reward() == 0.0


def test_the_reward_is_the_outcome_once_the_task_ends(toy: TRLWebEnvironment) -> None:
    toy.reset(task=TASK.task_id, seed=0)
    toy.type_text("e2", NAMES[0], press_enter_after=False)
    assert toy.click("e3") == "The episode is over: the task ended with reward 1."
    assert toy.done
    assert toy.get_reward() == 1.0


def test_a_wrong_answer_ends_with_its_own_reward(toy: TRLWebEnvironment) -> None:
    toy.reset(task=TASK.task_id, seed=0)
    toy.type_text("e2", "nobody", press_enter_after=False)
    toy.click("e3")
    assert toy.get_reward() == 0.0


def test_a_step_limit_cut_scores_zero() -> None:
    environment = toy_environment(max_steps=1)
    try:
        environment.reset(task=TASK.task_id, seed=0)
        assert environment.scroll("down") == "The episode is over: it was cut (step_limit) with reward 0."
        assert environment.done
        assert environment.get_reward() == 0.0
    finally:
        environment.web_env.close()


def test_tools_after_the_end_take_no_action(toy: TRLWebEnvironment) -> None:
    toy.reset(task=TASK.task_id, seed=0)
    toy.click("e3")
    assert toy.click("e3") == "The episode is already over; no action was taken."
    assert len(toy.actions) == 1


def test_reset_starts_a_fresh_episode(toy: TRLWebEnvironment) -> None:
    toy.reset(task=TASK.task_id, seed=0)
    toy.type_text("e2", NAMES[0], press_enter_after=False)
    toy.click("e3")
    toy.reset(task=TASK.task_id, seed=1)
    assert toy.actions == ()
    assert not toy.done
    assert toy.get_reward() == 0.0


def test_reset_rejects_a_task_the_environment_does_not_hold(toy: TRLWebEnvironment) -> None:
    with pytest.raises(ConfigError, match="no task 'toy/other'"):
        toy.reset(task="toy/other", seed=0)


def test_the_factory_makes_one_environment_per_call_and_closes_them_all() -> None:
    factory = TRLEnvironmentFactory(lambda: WebEnv(open_toy_form, [TASK]), [TASK.task_id])
    with factory:
        first, second = factory(), factory()
        assert first.web_env is not second.web_env
        assert factory.environments == (first, second)
    assert factory.environments == ()
    with pytest.raises(ClosedEnvironmentError):
        first.reset(task=TASK.task_id, seed=0)


def test_the_dataset_has_a_row_per_task_and_seed() -> None:
    dataset = trl_dataset(["toy/form", "toy/other"], range(2))
    assert dataset.column_names == ["prompt", "task", "seed"]
    assert dataset["task"] == ["toy/form", "toy/form", "toy/other", "toy/other"]
    assert dataset["seed"] == [0, 1, 0, 1]
    assert dataset[0]["prompt"] == [{"role": "user", "content": TRL_PROMPT}]


def test_the_dataset_needs_tasks_and_seeds() -> None:
    with pytest.raises(ConfigError, match="at least one task id and one seed"):
        trl_dataset([], range(2))


# --------------------------------------------------------------------------- real MiniWoB++ and its simulator


@pytest.fixture(scope="module")
def real() -> Iterator[TRLWebEnvironment]:
    environment = TRLWebEnvironment(miniwob_env("click-button", max_steps=5))
    yield environment
    environment.web_env.close()


def test_clicking_the_named_button_in_chromium_scores_one(real: TRLWebEnvironment) -> None:
    page = real.reset(task=CLICK_BUTTON, seed=SEED)
    assert '[e4] button "Ok"' in page
    assert real.click("e4") == "The episode is over: the task ended with reward 1."
    assert real.get_reward() == 1.0


def test_an_argument_the_grammar_rejects_comes_back_as_last_action_error(real: TRLWebEnvironment) -> None:
    real.reset(task=CLICK_BUTTON, seed=SEED)
    page = real.click("[e4]")  # brackets belong to the text grammar, not to a tool's argument
    assert page.startswith("URL: ")
    assert "Error of the last action: 'click [[e4]]' does not match" in page
    assert real.actions[0].is_invalid
    assert not real.done


def test_an_id_the_page_lacks_comes_back_as_last_action_error(real: TRLWebEnvironment) -> None:
    real.reset(task=CLICK_BUTTON, seed=SEED)
    assert "Error of the last action: there is no element [e99]" in real.click("e99")


@pytest.mark.usefixtures("one_torch_thread")
def test_the_simulated_factory_answers_the_tools_with_its_model(tiny_models: tuple[Path, Path]) -> None:
    _, sim_dir = tiny_models
    with trl_simulated_miniwob_factory("click-button", model=sim_dir, store=sim_dir.parent / "store") as factory:
        environment = factory()
        assert factory.task_ids == (CLICK_BUTTON,)
        assert environment.reset(task=CLICK_BUTTON, seed=0).startswith("Goal: ")
        environment.click("e3")
        assert [str(action) for action in environment.actions] == ["click [e3]"]
        assert environment.get_reward() in (0.0, 1.0)


# --------------------------------------------------------------------------- one GRPO step


def tool_call(element: str) -> str:
    """A completion calling ``click`` on ``element``, as the Qwen 2.5 chat template writes a tool call."""
    return f'<tool_call>\n{{"name": "click", "arguments": {{"element": "{element}"}}}}\n</tool_call><|im_end|>'


def chat_tokenizer(texts: Sequence[str]) -> Any:
    """A byte-level BPE tokenizer over ``texts`` with TRL's copy of the Qwen 2.5 chat template.

    TRL parses tool calls from the chat templates it knows (``add_response_schema``),
    Qwen 2.5's among them. The pre-tokenizer splits nothing, so BPE merges whole
    phrases: the prompt, 13 tool schemas and a page, is about 40 tokens, which
    keeps every forward pass of the test cheap.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    return tokenizer


def tool_calling_model(tokenizer: Any, prompts: Sequence[str], completions: Sequence[str], *, steps: int) -> Any:
    """A tiny scratch Llama taught, by a few supervised steps, to answer every prompt with each completion equally."""
    import torch

    from dreamgym.simulator._sft import ScratchModelConfig, scratch_model

    config = ScratchModelConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate_size=128,
        max_positions=512,
    )
    model = scratch_model(tokenizer, config, seed=0)
    rows = [
        (
            tokenizer(prompt, add_special_tokens=False)["input_ids"],
            tokenizer(completion, add_special_tokens=False)["input_ids"],
        )
        for prompt in prompts
        for completion in completions
    ]
    width = max(len(prompt) + len(completion) for prompt, completion in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (prompt, completion) in enumerate(rows):
        end = len(prompt) + len(completion)
        input_ids[row, :end] = torch.tensor(prompt + completion)
        labels[row, len(prompt) : end] = torch.tensor(completion)  # only the answer is taught
        attention_mask[row, :end] = 1
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("one_torch_thread")
def test_grpo_trains_one_step_on_tool_calls_that_reach_miniwob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    factory = trl_miniwob_factory(["click-button"], max_steps=1)  # one action: a miss is cut, with outcome 0

    # The prompt TRL will render: the dataset's message, the first page reset returns, the tools' schemas.
    probe = factory()
    page = probe.reset(task=CLICK_BUTTON, seed=SEED)
    tools = probe.tools
    factory.close()
    assert '[e4] button "Ok"' in page
    assert "[e3] generic" in page
    # Each environment serves MiniWoB++ from its own port, which the page's URL shows: teach the model on many.
    ports = random.Random(0).sample(range(30000, 60000), 8)
    pages = [re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", page) for port in ports]
    completions = [tool_call("e4"), tool_call("e3")]  # the button (outcome 1) and a text (outcome 0), half each
    template = chat_tokenizer(["x"])
    prompts = [
        template.apply_chat_template(
            [{"role": "user", "content": TRL_PROMPT + text}], tools=tools, tokenize=False, add_generation_prompt=True
        )
        for text in pages
    ]
    tokenizer = chat_tokenizer(prompts[:1] * 2 + completions * 2)
    model = tool_calling_model(tokenizer, prompts, completions, steps=60)
    before = [parameter.detach().clone() for parameter in model.parameters()]

    config = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        max_completion_length=128,
        max_tool_calling_iterations=1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        use_cpu=True,
        seed=0,
    )
    with factory:
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=tokenizer,
            train_dataset=trl_dataset(factory.task_ids, [SEED]),
            environment_factory=factory,
        )
        trainer.train()
        environments = factory.environments
        outcomes = [environment.get_reward() for environment in environments]
        clicks = [[str(action) for action in environment.actions] for environment in environments]
    logged = trainer.state.log_history[0]

    assert len(environments) == 4  # one per rollout; the one TRL probed is reused
    assert logged["tools/call_frequency"] > 0
    assert sum(map(len, clicks)) > 0  # the model's own text, parsed by TRL, reached the browser
    assert all(actions in (["click [e4]"], ["click [e3]"], []) for actions in clicks)
    assert outcomes == [1.0 if actions == ["click [e4]"] else 0.0 for actions in clicks]
    assert logged["rewards/TRLWebEnvironment/mean"] == pytest.approx(sum(outcomes) / len(outcomes))
    assert logged["frac_reward_zero_std"] == 0.0  # the group's outcomes differ, so the step has a gradient
    assert any(not torch.equal(old, new) for old, new in zip(before, model.parameters(), strict=True))
