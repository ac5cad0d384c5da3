"""Every tensor the torch paths make follows its model's device; the device and dtype settings and their checks.

The placement tests run a tiny model on the CPU with torch's default device
set to ``meta``: a tensor made without the model's device lands on ``meta``
and fails the moment it meets the CPU weights, as one made on the CPU would
beside a model on a GPU.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch
from runtime_helpers import NAMES, TASK, Counts, ToyBackend, ToyFormEnv, open_store, page, simulator, solved

from dreamgym.agents import LocalPolicy, LocalPolicyConfig
from dreamgym.core import ChatMessage, ConfigError, Sampling, Step
from dreamgym.core.devices import (
    check_device,
    cpu_has_bfloat16,
    mixed_precision,
    model_device,
    place_given,
    place_loaded,
    resolve_device,
    trainer_flags,
)
from dreamgym.runtime import RuntimeConfig
from dreamgym.simulator import LocalBackend, ScratchModelConfig, SimTrainConfig
from dreamgym.simulator._loop import fit, tokenize_example
from dreamgym.trainer import Sides, TrainConfig, Trainer, WarmStartConfig, demonstrations, tiny_index_policy, warm_start

SMALL = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128)


@contextmanager
def default_device(device: str) -> Iterator[None]:
    """Torch's default device set to ``device`` in this thread, and put back after."""
    previous = torch.get_default_device()
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None if previous.type == "cpu" else previous)


def batches_on_meta(owner: Any) -> None:
    """Run ``owner``'s batches (in their worker thread, where torch's default device is its own) on ``meta``."""
    run: Callable[[list[Any]], None] = owner._batcher.run_batch

    def on_meta(batch: list[Any]) -> None:
        with default_device("meta"):
            run(batch)

    owner._batcher.run_batch = on_meta


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """A tiny index policy's model and tokenizer (with a chat template and the label tokens), on the CPU."""
    pages = [(TASK, p) for seed in range(4) for p in (page(seed), page(seed, NAMES[seed]))]
    return tiny_index_policy(pages, SMALL)


# ---------------------------------------------------------------------- placement


@pytest.mark.parametrize("mode", ["index", "choose", "generate"])
def test_the_policy_decides_on_its_models_device(tiny: tuple[Any, Any], mode: str) -> None:
    model, tokenizer = tiny
    config = LocalPolicyConfig(mode=mode, seed=0, max_new_tokens=6, max_pass_tokens=16)  # type: ignore[arg-type]
    policy = LocalPolicy(model, tokenizer, config=config)
    batches_on_meta(policy)

    async def two_turns() -> None:
        first = await policy.act(TASK, [], page(0))
        step = Step(source="real", task_id=TASK.task_id, episode_id="e", step_index=0, observation=page(0),
                    action=first.action, next_observation=page(0, "Ana"), policy_tokens=first.tokens)  # fmt: skip
        async with anyio.create_task_group() as group:  # a batch of two, sharing the system turn's cache
            group.start_soon(policy.act, TASK, [step], page(0, "Ana"))
            group.start_soon(policy.act, TASK, [], page(1))

    anyio.run(two_turns)
    assert policy.batches >= 2


def test_the_local_backend_generates_on_its_models_device(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    backend = LocalBackend(model, tokenizer, name="tiny", digest="0" * 64, batch_window_s=0.05, min_prefix_tokens=4)
    batches_on_meta(backend)
    system = ChatMessage(role="system", content="You predict what a web page shows after an agent acts.")
    prompts = [[system, ChatMessage(role="user", content=f"click [e{n}]" + " x" * n)] for n in range(3)]

    async def batch() -> list[str]:
        out = [""] * len(prompts)

        async def one(n: int) -> None:  # rows end at different lengths: the batch narrows as they do
            sampling = Sampling(temperature=1.0, top_p=0.9, seed=n, max_new_tokens=2 + 3 * n)
            out[n] = (await backend.complete(prompts[n], sampling)).text

        async with anyio.create_task_group() as group:
            for n in range(len(prompts)):
                group.start_soon(one, n)
        return out

    anyio.run(batch)
    anyio.run(batch)  # the shared prefix's cache, reused
    greedy = anyio.run(backend.complete, prompts[0], Sampling(max_new_tokens=3))
    assert backend.prefix_hits >= 1 and greedy.completion_tokens <= 3


def test_a_warm_start_trains_on_its_models_device(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=0.0))
    examples, _ = demonstrations(policy, [solved(seed) for seed in range(2)], [TASK])
    with default_device("meta"):
        result = warm_start(policy, examples, WarmStartConfig(epochs=2, batch_size=2, lm_weight=1.0))
        warm_start(policy, examples, WarmStartConfig(epochs=1, batch_size=4))
    assert result.updates == 4 and 0.0 <= result.accuracy <= 1.0


def test_the_plain_sft_loop_trains_on_its_models_device(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    rows = [
        tokenize_example(tokenizer, [{"role": "user", "content": f"click [e{n}]"}],
                         [{"role": "assistant", "content": "ok " * n}])
        for n in range(1, 5)
    ]  # fmt: skip
    with default_device("meta"):
        result = fit(model, rows, pad_id=tokenizer.pad_token_id, epochs=1, batch_size=2, learning_rate=1e-3)
    assert result.steps == 2 and result.loss == result.loss  # not NaN


def test_a_grpo_update_plays_its_episodes_on_the_models_device(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    """One update through TRL, the policy's batches on ``meta``: TRL moves the model where it trains (CUDA
    where there is one) and the rollouts follow it. (TRL's own step cannot run under a ``meta`` default:
    torch's DataLoader and PEFT's new adapters make their tensors on the default device.)"""
    model, tokenizer = tiny

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(tmp_path / "store") as store:
            backend = ToyBackend()
            yield Sides(store=store, real_env=lambda: ToyFormEnv(Counts()), synthetic_env=lambda: simulator(backend),
                        runtime_config=RuntimeConfig(max_steps=2, real_concurrency=1))  # fmt: skip

    policy = LocalPolicy(copy.deepcopy(model), tokenizer, config=LocalPolicyConfig(mode="index", seed=0))
    batches_on_meta(policy)
    config = TrainConfig(mode="synthetic", updates=1, group_size=2, groups_per_update=1, output_dir=tmp_path / "run",
                         report_to=())  # fmt: skip
    trainer = Trainer(config, policy=policy, tasks=[TASK], open_sides=open_sides, train_seeds=[0, 1])
    result = trainer.train()
    assert result.state.update == 1 and result.state.synthetic_steps > 0
    assert model_device(trainer.grpo.model).type == ("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------- the settings


def test_every_torch_config_checks_its_device_and_dtype() -> None:
    out = Path("unused")
    makers: list[Callable[..., Any]] = [
        LocalPolicyConfig,
        SimTrainConfig,
        lambda **kw: TrainConfig(mode="synthetic", updates=1, output_dir=out, **kw),
    ]
    for make in makers:
        assert (make().device, make().dtype) == ("auto", "auto")
        assert (make(device="cpu", dtype="bfloat16").device, make(dtype="float16").dtype) == ("cpu", "float16")
        with pytest.raises(ConfigError, match=r"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', not 'tpu'"):
            make(device="tpu")
        with pytest.raises(ConfigError, match=r"dtype must be one of 'auto', 'float32', 'bfloat16', 'float16'"):
            make(dtype="float8")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=1"):  # TRL trains on the first GPU it sees
        TrainConfig(mode="synthetic", updates=1, output_dir=out, device="cuda:1")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=2"):
        SimTrainConfig(loop="trl", device="cuda:2")
    check_device("cuda:0", "TrainConfig.device", trl=True)
    assert LocalPolicyConfig(device="cuda:1").device == SimTrainConfig(device="cuda:1").device == "cuda:1"
    with pytest.raises(ConfigError, match=r"device must be .*, not 'tpu'"):
        LocalBackend(object(), object(), name="x", digest="0", device="tpu")


def test_auto_resolves_to_what_this_machine_has() -> None:
    found = resolve_device("auto")
    assert found.type == ("cuda" if torch.cuda.is_available() else "cpu")
    flags = trainer_flags("cpu", "bfloat16")
    assert flags == {"use_cpu": True, "bf16": False, "fp16": False}  # TRL's mixed precision: on CUDA only
    cpu = torch.device("cpu")
    assert mixed_precision(cpu, "bfloat16") is None and mixed_precision(cpu, "float16", cpu=True) is None
    assert mixed_precision(cpu, "bfloat16", cpu=True) == (torch.bfloat16 if cpu_has_bfloat16() else None)  # own loop
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no CUDA GPU"):
            resolve_device("cuda")
        assert trainer_flags("auto", "float16")["use_cpu"]
    else:
        assert trainer_flags("cuda", "bfloat16") == {"use_cpu": False, "bf16": True, "fp16": False}


def test_a_given_model_moves_only_for_a_setting_that_is_not_auto(tiny: tuple[Any, Any]) -> None:
    model = copy.deepcopy(tiny[0]).to(torch.float64)
    assert place_given(model, "auto", "auto").dtype == torch.float64  # where it is, as it is
    assert place_loaded(copy.deepcopy(model), "cpu", "auto").dtype == torch.float32  # auto on the CPU: float32
    policy = LocalPolicy(model, tiny[1], config=LocalPolicyConfig(mode="index", device="cpu", dtype="bfloat16"))
    assert policy.model.dtype == torch.bfloat16 and policy.model.device.type == "cpu"
    sibling = policy.sibling(temperature=0.0)  # a sibling takes the shared model where it is
    assert sibling.model is policy.model and (sibling.config.device, sibling.config.dtype) == ("auto", "auto")
    assert dataclasses.replace(sibling.config, temperature=1.0, device="cpu", dtype="bfloat16") == policy.config
    decision = anyio.run(policy.act, TASK, [], page(0))
    assert decision.tokens is not None
