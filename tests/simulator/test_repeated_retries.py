"""Retries a server answers without sampling, stop strings a server keeps, and what ``check_server`` reports,
against the project's own OpenAI-compatible test server (scripted: it can act as servers that differ)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import toy_form
from helpers import dreamgym
from openai_server import ServerState, openai_server
from sim_helpers import TOY_TEMPLATE, ScriptedBackend
from test_sim_cli import make_stores

from dreamgym.core import ChatMessage, ExperienceQuery, ModelOutputError, Sampling
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel
from dreamgym.simulator.backends import REPEATS_BEFORE_WARNING, OpenAIBackend, RetryWatch, check_server

pytestmark = [pytest.mark.timeout(60)]

WATCH_LOG = "dreamgym.simulator.backends._retries"
PROMPT = [ChatMessage(role="user", content="click [e5]")]


@pytest.fixture
def server() -> Iterator[tuple[str, ServerState]]:
    with openai_server() as (url, state):
        yield url, state


def query() -> ExperienceQuery:
    step = next(iter(toy_form.episodes(range(1))))[0]
    return ExperienceQuery(task=toy_form.TASK, history=(), observation=step.observation, action=step.action, seed=1)


def model_on(backend: Any) -> LLMExperienceModel:
    return LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE, salvage=False))


async def predict(model: LLMExperienceModel, times: int) -> None:
    for _ in range(times):
        with pytest.raises(ModelOutputError):
            await model.predict(query())


@pytest.mark.anyio
async def test_a_sampled_retry_answered_with_the_text_before_it_is_counted(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.chat_reply = lambda body: "no answer here"
    model = model_on(OpenAIBackend(model="sim", base_url=url, backoff_s=0.01))
    await predict(model, 1)
    await model.backend.aclose()
    assert model.stats.repeated_retries == 2


@pytest.mark.anyio
async def test_repeats_are_warned_about_once_in_one_line_naming_the_server(
    server: tuple[str, ServerState], caplog: pytest.LogCaptureFixture
) -> None:
    url, state = server
    state.chat_reply = lambda body: "no answer here"
    model = model_on(OpenAIBackend(model="sim", base_url=url, backoff_s=0.01))
    with caplog.at_level(logging.WARNING, logger=WATCH_LOG):
        await predict(model, 3)
    await model.backend.aclose()
    [warning] = [r.getMessage() for r in caplog.records if r.name == WATCH_LOG]
    assert url in warning
    assert "\n" not in warning


@pytest.mark.anyio
async def test_retries_that_differ_are_not_counted(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.chat_reply = lambda body: f"no answer at temperature {body['temperature']} seed {body.get('seed')}"
    model = model_on(OpenAIBackend(model="sim", base_url=url, backoff_s=0.01))
    await predict(model, 2)
    await model.backend.aclose()
    assert model.stats.repeated_retries == 0


@pytest.mark.anyio
async def test_an_in_process_backend_that_repeats_itself_is_counted_but_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = model_on(ScriptedBackend(["no answer here"]))
    with caplog.at_level(logging.WARNING, logger=WATCH_LOG):
        await predict(model, 3)
    assert model.stats.repeated_retries == 6
    assert not [r for r in caplog.records if r.name == WATCH_LOG]


def test_the_watch_waits_until_repeats_outnumber_the_retries_that_differed() -> None:
    watch = RetryWatch(backend_id="openai:sim@h", base_url="http://h/v1")
    for n in range(REPEATS_BEFORE_WARNING):
        watch.answered(previous="a", text=f"b{n}", temperature=0.7)
        watch.answered(previous="a", text="a", temperature=0.7)
    assert watch.warned is False


def test_a_greedy_retry_is_not_a_repeat() -> None:
    watch = RetryWatch(backend_id="openai:sim@h", base_url="http://h/v1")
    assert watch.answered(previous="a", text="a", temperature=0.0) is False


@pytest.mark.anyio
async def test_an_answer_is_cut_at_the_stop_string_a_server_keeps(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.chat_reply = lambda body: "<action>click</action> and more"
    backend = OpenAIBackend(model="sim", base_url=url)
    completion = await backend.complete(PROMPT, Sampling(max_new_tokens=8, stop=("</action>",)))
    assert completion.text == "<action>click"
    await backend.aclose()


def _faithful(body: dict[str, Any]) -> str:
    """A server that samples by seed, stops before stop strings and keeps to SGLang's regex field."""
    if "regex" in body:
        return "yes"
    if body["temperature"] > 0:
        return f"a sampled answer drawn with seed {body['seed']}"
    text = "a greedy answer, long enough to stop in"
    for stop in body.get("stop", []):
        text = text.split(stop)[0]
    return text


@pytest.mark.anyio
async def test_check_server_finds_a_server_that_samples_honours_seed_stop_and_a_structured_field(
    server: tuple[str, ServerState],
) -> None:
    url, state = server
    state.chat_reply = _faithful
    backend = OpenAIBackend(model="sim", base_url=url)
    found = await check_server(backend, [PROMPT], structured=("sglang", "vllm"))
    await backend.aclose()
    assert found.samples is True
    assert found.seed is True
    assert found.stop == "honoured"
    assert found.structured == {"sglang": "honoured", "vllm": "ignored"}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--parity", "3"), "--parity checks a served model"),
        (("--parity", "-1", "--sim-url", "http://127.0.0.1:9/v1", "--model", "m"), "--parity N takes"),
        (("--sim-url", "http://127.0.0.1:9/v1", "--model", "m", "--sim-attempts", "0"), "--sim-attempts must be"),
    ],
)
def test_bad_parity_and_attempts_flags_are_one_line_exit_2(tmp_path: Any, argv: tuple[str, ...], says: str) -> None:
    result = dreamgym("sim", "eval", str(tmp_path), "--steps", str(tmp_path), *argv, check=False)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr.strip().splitlines()[-1]


def test_sim_eval_and_validate_show_the_retries_a_server_answered_without_sampling(tmp_path: Any) -> None:
    train, held = make_stores(tmp_path)
    state = ServerState(chat_reply=lambda body: "no answer here")
    with openai_server(state) as (url, _):
        served = ("--model", "served-sim", "--sim-url", url, "--limit", "2")
        rows = dreamgym("sim", "eval", str(train), "--steps", str(held), *served, "--json").stdout.splitlines()
        validated = dreamgym("validate", "--store", str(held), "--retrieval", str(train), *served, "--out",
                             str(tmp_path / "report"))  # fmt: skip
    model = next(row for row in map(json.loads, rows) if row["name"] == "model")
    assert model["repeated_retries"] == 2 * model["n"]
    assert f"repeated the attempt before them: {2 * model['n']}: the server at {url}" in validated.stderr


def test_validate_live_takes_the_served_policys_budget_and_timeout_as_flags(tmp_path: Any) -> None:
    result = dreamgym("validate", "--live", "--tasks", "click-test", "--store", str(tmp_path / "store"), "--policy",
                      "chat", "--policy-model", "m", "--openai-url", "http://127.0.0.1:9/v1", "--policy-timeout", "0",
                      "--out", str(tmp_path / "out"), check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--policy-timeout above 0" in result.stderr.strip().splitlines()[-1]
