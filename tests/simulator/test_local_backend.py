"""The in-process transformers backend: batching, shared-prefix reuse, sampling, stops."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from dreamgym.core import ChatMessage, ConfigError, Sampling, TextBackend
from dreamgym.simulator import LocalBackend, weights_digest

pytestmark = pytest.mark.anyio

SYSTEM = "You are the experience model of a web environment: you predict what a web page shows after an agent acts."


def prompt(n: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content=SYSTEM),
        ChatMessage(role="user", content=f'Task: Enter "Name{n}" and press Submit.\nAction: click [e{n}]' + " x" * n),
    ]


@pytest.fixture
def backend(tiny_sim_dir: Path) -> LocalBackend:
    loaded = LocalBackend.load(tiny_sim_dir, max_batch=8, batch_window_s=0.05)
    loaded.model.double()  # float64: batched and single runs then agree to the last token
    return loaded


async def answers(backend: LocalBackend, prompts: list[list[ChatMessage]], sampling: Sampling) -> list[str]:
    out = [""] * len(prompts)

    async def one(n: int) -> None:
        out[n] = (await backend.complete(prompts[n], sampling)).text

    async with anyio.create_task_group() as group:
        for n in range(len(prompts)):
            group.start_soon(one, n)
    return out


async def test_loaded_model_is_a_text_backend_named_by_its_weights(backend: LocalBackend, tiny_sim_dir: Path) -> None:
    assert isinstance(backend, TextBackend)
    assert backend.backend_id == f"local:{tiny_sim_dir.name}@{weights_digest(tiny_sim_dir)[:16]}"
    completion = await backend.complete(prompt(1), Sampling(max_new_tokens=5))
    assert completion.prompt_tokens == len(backend.encode(prompt(1)))
    assert 0 < completion.completion_tokens <= 5


async def test_concurrent_requests_share_one_generate_and_match_single_runs(backend: LocalBackend) -> None:
    prompts = [prompt(n) for n in range(8)]
    sampling = Sampling(max_new_tokens=12)
    backend.prefix_cache = False
    singles = [(await backend.complete(p, sampling)).text for p in prompts]
    before = backend.batches
    batched = await answers(backend, prompts, sampling)
    assert backend.batches - before == 1
    assert batched == singles


async def test_shared_prefix_is_reused_and_changes_nothing(backend: LocalBackend) -> None:
    prompts = [prompt(n) for n in range(4)]
    sampling = Sampling(max_new_tokens=10)
    backend.prefix_cache = False
    plain = await answers(backend, prompts, sampling)
    backend.prefix_cache = True
    backend.min_prefix_tokens = 8
    first = await answers(backend, prompts, sampling)
    second = await answers(backend, prompts[::-1], sampling)
    assert backend.prefix_hits >= 1
    assert first == plain and second == plain[::-1]


async def test_seeded_sampling_is_reproducible_per_request(backend: LocalBackend) -> None:
    hot = Sampling(temperature=1.5, max_new_tokens=16, seed=11)
    alone = (await backend.complete(prompt(2), hot)).text
    together = await answers(backend, [prompt(2), prompt(3), prompt(2)], hot)
    assert together[0] == together[2] == alone
    others = {(await backend.complete(prompt(2), Sampling(temperature=1.5, max_new_tokens=16, seed=s))).text
              for s in range(6)}  # fmt: skip
    assert len(others) > 1


async def test_token_budget_and_stop_strings_end_a_row(backend: LocalBackend) -> None:
    long = await backend.complete(prompt(1), Sampling(max_new_tokens=3))
    assert long.finish_reason in ("length", "stop") and long.completion_tokens <= 3
    full = (await backend.complete(prompt(1), Sampling(max_new_tokens=40))).text
    assert len(full) > 4
    stop = full[2:4]
    cut = await backend.complete(prompt(1), Sampling(max_new_tokens=40, stop=(stop,)))
    assert cut.text == full[: full.find(stop)]
    assert cut.finish_reason == "stop"


async def test_a_cancelled_caller_leaves_the_others_answered(backend: LocalBackend) -> None:
    results: list[str] = []

    async def patient(n: int) -> None:
        results.append((await backend.complete(prompt(n), Sampling(max_new_tokens=6))).text)

    async with anyio.create_task_group() as group:
        with anyio.move_on_after(0.01):  # cancelled while waiting to join a batch
            await backend.complete(prompt(9), Sampling(max_new_tokens=6))
        for n in range(3):
            group.start_soon(patient, n)
    assert len(results) == 3
    assert backend._batcher.waiting == 0


def test_a_directory_without_weights_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no weights"):
        weights_digest(tmp_path)
    with pytest.raises(ConfigError, match="no model directory"):
        LocalBackend.load(tmp_path / "missing")


async def test_more_requests_than_one_batch_holds_are_all_answered(tiny_sim_dir: Path) -> None:
    small = LocalBackend.load(tiny_sim_dir, max_batch=2, batch_window_s=0.02)
    texts = await answers(small, [prompt(n) for n in range(5)], Sampling(max_new_tokens=4))
    assert len(texts) == 5 and small.batches >= 3
