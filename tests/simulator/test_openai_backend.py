"""OpenAIBackend against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from openai_server import ServerState, openai_server

from dreamgym.core import BackendError, ChatMessage, ConfigError, Sampling, TextBackend
from dreamgym.simulator.backends import OpenAIBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PROMPT = [ChatMessage(role="system", content="You predict web pages."), ChatMessage(role="user", content="click [e5]")]
GREEDY = Sampling(max_new_tokens=32)


@pytest.fixture
async def backend(server: tuple[str, ServerState]) -> AsyncIterator[OpenAIBackend]:
    backend = OpenAIBackend(model="sim-model", base_url=server[0], timeout_s=5.0, backoff_s=0.01)
    yield backend
    await backend.aclose()


def make(url: str, **settings: Any) -> OpenAIBackend:
    return OpenAIBackend(model="sim-model", base_url=url, **{"backoff_s": 0.01, "timeout_s": 5.0, **settings})


async def test_an_answer_carries_text_finish_reason_usage_and_sends_the_sampling(
    server: tuple[str, ServerState], backend: OpenAIBackend
) -> None:
    _, state = server
    state.chat_replies = ["[e1] page"]
    sampling = Sampling(temperature=0.7, top_p=0.9, max_new_tokens=64, seed=11, stop=("</state>", "END"))
    completion = await backend.complete(PROMPT, sampling)
    assert isinstance(backend, TextBackend)
    assert (completion.text, completion.finish_reason) == ("[e1] page", "stop")
    assert (completion.prompt_tokens, completion.completion_tokens, completion.cached) == (1, 1, False)
    [body] = state.requests
    assert body["model"] == "sim-model"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 64, 11)
    assert body["stop"] == ["</state>", "END"]
    assert body["messages"] == [{"role": m.role, "content": m.content} for m in PROMPT]


async def test_unset_seed_and_stop_are_not_sent_and_extra_body_is(server: tuple[str, ServerState]) -> None:
    url, state = server
    backend = make(url, extra_body={"top_k": 20})
    await backend.complete(PROMPT, GREEDY)
    await backend.aclose()
    [body] = state.requests
    assert "seed" not in body and "stop" not in body
    assert body["top_k"] == 20


def test_backend_id_names_the_model_and_the_server() -> None:
    backend = OpenAIBackend(model="Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
    assert backend.backend_id == "openai:Qwen/Qwen3-8B@127.0.0.1:8000"


async def test_a_length_finish_maps_to_length(server: tuple[str, ServerState], backend: OpenAIBackend) -> None:
    server[1].finish_reason = "length"
    assert (await backend.complete(PROMPT, GREEDY)).finish_reason == "length"


async def test_a_rate_limit_is_retried(server: tuple[str, ServerState], backend: OpenAIBackend) -> None:
    _, state = server
    state.fail_next = [429]
    state.chat_replies = ["after the limit"]
    assert (await backend.complete(PROMPT, GREEDY)).text == "after the limit"
    assert len(state.requests) == 2


async def test_retry_after_is_honoured(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.fail_next, state.retry_after = [429], "0.3"
    backend = make(url, backoff_s=0.0)
    start = time.perf_counter()
    await backend.complete(PROMPT, GREEDY)
    await backend.aclose()
    assert time.perf_counter() - start >= 0.3
    assert len(state.requests) == 2


async def test_server_errors_are_retried(server: tuple[str, ServerState], backend: OpenAIBackend) -> None:
    _, state = server
    state.fail_next = [500, 502]
    state.chat_replies = ["third time"]
    assert (await backend.complete(PROMPT, GREEDY)).text == "third time"
    assert len(state.requests) == 3


async def test_a_persistent_server_error_fails_after_every_attempt(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.fail_next = [500] * 10
    backend = make(url, max_retries=2)
    with pytest.raises(BackendError, match=r"sim-model.*after 3 attempts.*HTTP 500") as raised:
        await backend.complete(PROMPT, GREEDY)
    await backend.aclose()
    assert url in str(raised.value)
    assert len(state.requests) == 3


@pytest.mark.parametrize(("status", "fix"), [(400, "context"), (401, "api_key"), (404, "model name")])
async def test_a_client_error_fails_at_once_with_a_fix(
    server: tuple[str, ServerState], backend: OpenAIBackend, status: int, fix: str
) -> None:
    _, state = server
    state.fail_next = [status, status]
    with pytest.raises(BackendError, match=rf"HTTP {status}.*{fix}"):
        await backend.complete(PROMPT, GREEDY)
    assert len(state.requests) == 1


async def test_a_hanging_attempt_times_out_and_the_retry_succeeds(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.hang_next = 1
    state.chat_replies = ["second try"]
    backend = make(url, timeout_s=0.5)
    start = time.perf_counter()
    assert (await backend.complete(PROMPT, GREEDY)).text == "second try"
    await backend.aclose()
    assert 0.5 <= time.perf_counter() - start < 3.0
    assert len(state.requests) == 2


async def test_a_server_that_always_hangs_fails_in_bounded_time(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.hang_next = 100
    backend = make(url, timeout_s=0.3, max_retries=2)
    start = time.perf_counter()
    with anyio.fail_after(10), pytest.raises(BackendError, match=r"after 3 attempts.*no answer within 0.3 s"):
        await backend.complete(PROMPT, GREEDY)
    await backend.aclose()
    assert time.perf_counter() - start < 3.0
    assert len(state.requests) == 3


async def test_a_refused_connection_is_retried_then_reported() -> None:
    with openai_server() as (url, _):
        pass  # the port is closed now
    backend = make(url, max_retries=1)
    with pytest.raises(BackendError, match=r"after 2 attempts.*APIConnectionError"):
        await backend.complete(PROMPT, GREEDY)
    await backend.aclose()


async def test_concurrency_is_capped_at_the_server(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.latency_s = 0.2
    backend = make(url, max_concurrency=2)
    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(backend.complete, PROMPT, GREEDY)
    await backend.aclose()
    assert len(state.requests) == 6
    assert state.max_in_flight == 2


async def test_an_answer_without_text_is_an_error(server: tuple[str, ServerState], backend: OpenAIBackend) -> None:
    _, state = server
    state.chat_replies = [None]
    with pytest.raises(BackendError, match="no text"):
        await backend.complete(PROMPT, GREEDY)
    state.no_choices = True
    with pytest.raises(BackendError, match="without choices"):
        await backend.complete(PROMPT, GREEDY)
    assert len(state.requests) == 2


async def test_more_than_four_stop_strings_is_a_config_error(
    server: tuple[str, ServerState], backend: OpenAIBackend
) -> None:
    with pytest.raises(ConfigError, match="at most 4 stop strings"):
        await backend.complete(PROMPT, Sampling(stop=("a", "b", "c", "d", "e")))
    assert server[1].requests == []


async def test_aclose_twice_is_fine_and_later_use_is_an_error(server: tuple[str, ServerState]) -> None:
    backend = make(server[0])
    await backend.aclose()
    await backend.aclose()
    with pytest.raises(BackendError, match="after aclose"):
        await backend.complete(PROMPT, GREEDY)


@pytest.mark.parametrize(
    "settings",
    [{"model": ""}, {"max_concurrency": 0}, {"timeout_s": 0.0}, {"max_retries": -1}, {"backoff_s": -1.0}],
)
def test_bad_settings_are_config_errors(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        OpenAIBackend(**{"model": "m", "base_url": "http://127.0.0.1:1/v1", **settings})


def test_openai_without_a_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIBackend(model="gpt-4o-mini")
