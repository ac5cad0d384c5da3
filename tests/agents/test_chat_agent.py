"""ChatAgent through OpenAIBackend against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_pages import PAGES, TASK
from helpers import make_step
from openai_server import ServerState

from dreamgym.agents import ChatAgent, ChatAgentConfig, agent_messages
from dreamgym.core import BackendError, Policy, Sampling, parse_action
from dreamgym.simulator import OpenAIBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
async def backend(server: tuple[str, ServerState]) -> AsyncIterator[OpenAIBackend]:
    backend = OpenAIBackend(model="agent-model", base_url=server[0], timeout_s=5.0, backoff_s=0.01, max_retries=0)
    yield backend
    await backend.aclose()


async def test_a_good_answer_becomes_the_action_with_its_reasoning(
    server: tuple[str, ServerState], backend: OpenAIBackend
) -> None:
    _, state = server
    state.chat_replies = ["<think>The username field comes first.</think><action>type [e2] [lyda] [0]</action>"]
    agent = ChatAgent(backend)
    decision = await agent.act(TASK, [], PAGES[0])
    assert isinstance(agent, Policy)
    assert decision.action == parse_action("type [e2] [lyda] [0]")
    assert decision.reasoning == "The username field comes first."
    assert decision.tokens is None
    [body] = state.requests
    expected = agent_messages(TASK, [], PAGES[0])
    assert body["messages"] == [{"role": m.role, "content": m.content} for m in expected]
    assert body["model"] == "agent-model"


async def test_policy_id_names_the_backend(backend: OpenAIBackend) -> None:
    assert ChatAgent(backend).policy_id == f"chat:{backend.backend_id}"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("I would click the Sign in button.", "no <action>"),
        ("<think>two</think><action>click [e3]</action><action>click [e4]</action>", "exactly one"),
        ("<think>x</think><action>click the sign in button</action>", "does not hold one action"),
    ],
)
async def test_a_malformed_answer_is_an_invalid_action_not_an_exception(
    server: tuple[str, ServerState], backend: OpenAIBackend, answer: str, reason: str
) -> None:
    server[1].chat_replies = [answer]
    decision = await ChatAgent(backend).act(TASK, [], PAGES[0])
    assert decision.action.is_invalid
    assert reason in decision.action.error
    assert decision.reasoning == ("" if "<think>" not in answer else answer.split("<think>")[1].split("</think>")[0])


async def test_the_prompt_shows_the_last_actions_and_the_page_facts(
    server: tuple[str, ServerState], backend: OpenAIBackend
) -> None:
    _, state = server
    state.chat_reply = lambda body: "<action>click [e6]</action>"
    history = [make_step(n, action=f"click [e{n + 1}]") for n in range(4)]
    agent = ChatAgent(backend, ChatAgentConfig(history_actions=2))
    await agent.act(TASK, history, PAGES[2])
    user = state.requests[0]["messages"][1]["content"]
    assert "- click [e3]\n- click [e4]" in user and "click [e2]" not in user
    assert "URL: http://127.0.0.1:8000/home" in user and "Tabs: 0: Home (active) | 1: Help" in user


async def test_a_seeded_agent_sends_a_fresh_reproducible_seed_per_request(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.chat_reply = lambda body: "<action>click [e3]</action>"
    seeds: list[list[Any]] = []
    for _ in range(2):
        backend = OpenAIBackend(model="agent-model", base_url=url, timeout_s=5.0)
        agent = ChatAgent(backend, ChatAgentConfig(sampling=Sampling(temperature=1.0, max_new_tokens=64, seed=7)))
        for _ in range(3):
            await agent.act(TASK, [], PAGES[0])
        await backend.aclose()
        seeds.append([body["seed"] for body in state.requests[-3:]])
    assert seeds[0] == seeds[1]
    assert len(set(seeds[0])) == 3


async def test_a_stop_string_cut_closing_tag_is_put_back(
    server: tuple[str, ServerState], backend: OpenAIBackend
) -> None:
    server[1].chat_replies = ["<think>ok</think><action>click [e3]"]
    config = ChatAgentConfig(sampling=Sampling(max_new_tokens=64, stop=("</action>",)))
    decision = await ChatAgent(backend, config).act(TASK, [], PAGES[0])
    assert decision.action == parse_action("click [e3]")
    assert server[1].requests[0]["stop"] == ["</action>"]


async def test_a_failing_backend_raises_backend_error(server: tuple[str, ServerState], backend: OpenAIBackend) -> None:
    server[1].fail_next = [400]
    with pytest.raises(BackendError):
        await ChatAgent(backend).act(TASK, [], PAGES[0])
