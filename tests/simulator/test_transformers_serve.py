"""The experience model served by a real server nobody here wrote (``transformers serve``), beside it in process.

One server for the module (``tests/transformers_server.py``), on a tiny model trained by the real SFT
pipeline (the session's ``tiny_sim_dir``), which it loads by its path. The project's own test server
(``tests/openai_server.py``) stays for the faults this one cannot be made to produce.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from helpers import dreamgym
from sim_helpers import TOY_TEMPLATE, open_store
from test_sim_cli import make_stores
from tiny_models import tiny_policy
from transformers_server import transformers_serve

from dreamgym.core import ChatMessage, ExperienceQuery, ModelOutputError, Sampling, TextBackend
from dreamgym.core.types import Step, decode_record
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, teacher_forced_queries
from dreamgym.simulator.backends import LocalBackend, OpenAIBackend, check_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GREEDY = Sampling(max_new_tokens=48)
SAMPLE_WHEN_ASKED = {"generation_config": json.dumps({"do_sample": True, "top_k": 0})}
"""What tells ``transformers serve`` to sample at a temperature above 0 (a request's own generation config)."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with transformers_serve(tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_stores(tmp_path_factory.mktemp("stores"))


@pytest.fixture(scope="module")
def queries(stores: tuple[Path, Path]) -> list[ExperienceQuery]:
    """The experience model's queries for the first held-out toy steps, with retrieval from the training store."""
    train, held = stores

    async def build() -> list[ExperienceQuery]:
        async with open_store(train, readonly=True) as store, open_store(held, readonly=True) as real:
            steps = [decode_record(data, Step) for _, data in real.iter_records("steps")]
            found = await teacher_forced_queries(steps, store=store, neighbours=TOY_TEMPLATE.neighbours)
        return [query for _, query in found[:4]]

    return anyio.run(build)


@pytest.fixture(scope="module")
def prompts(queries: list[ExperienceQuery]) -> list[list[ChatMessage]]:
    return [TOY_TEMPLATE.messages(query) for query in queries]


def backend(served: str, model: Path, extra_body: dict[str, str] | None = None) -> OpenAIBackend:
    return OpenAIBackend(model=str(model), base_url=served, timeout_s=120.0, backoff_s=0.01, extra_body=extra_body)


async def answers(backend: TextBackend, prompts: list[list[ChatMessage]], sampling: Sampling) -> list[str]:
    return [(await backend.complete(p, sampling)).text for p in prompts]


@pytest.mark.anyio
async def test_greedy_answers_of_transformers_serve_equal_the_in_process_backends(
    served: str, tiny_sim_dir: Path, prompts: list[list[ChatMessage]]
) -> None:
    remote = backend(served, tiny_sim_dir)
    local = LocalBackend.load(tiny_sim_dir)
    assert await answers(remote, prompts, GREEDY) == await answers(local, prompts, GREEDY)
    await remote.aclose()


async def _predict_all(model: LLMExperienceModel, queries: list[ExperienceQuery]) -> None:
    for query in queries:
        with contextlib.suppress(ModelOutputError):  # a few tokens make no whole answer: every prediction retries
            await model.predict(query)


def cut_short(model_backend: OpenAIBackend) -> LLMExperienceModel:
    """An experience model whose answers are cut after 3 tokens: malformed, so each prediction retries twice."""
    config = ExperienceModelConfig(template=TOY_TEMPLATE, sampling=Sampling(max_new_tokens=3), salvage=False)
    return LLMExperienceModel(model_backend, config=config)


@pytest.mark.anyio
async def test_retries_transformers_serve_answers_without_sampling_are_counted(
    served: str, tiny_sim_dir: Path, queries: list[ExperienceQuery]
) -> None:
    model = cut_short(backend(served, tiny_sim_dir))
    await _predict_all(model, queries)
    assert model.stats.repeated_retries == 2 * len(queries)
    await model.backend.aclose()


@pytest.mark.anyio
async def test_retries_transformers_serve_answers_without_sampling_are_warned_about_once_naming_the_fix(
    served: str, tiny_sim_dir: Path, queries: list[ExperienceQuery], caplog: pytest.LogCaptureFixture
) -> None:
    model = cut_short(backend(served, tiny_sim_dir))
    with caplog.at_level(logging.WARNING, logger="dreamgym.simulator.backends._retries"):
        await _predict_all(model, queries)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "dreamgym.simulator.backends._retries"]
    assert served in warning
    assert '"do_sample": true' in warning
    assert "--sim-attempts 1" in warning
    await model.backend.aclose()


@pytest.mark.anyio
async def test_retries_sample_once_transformers_serve_is_told_to(
    served: str, tiny_sim_dir: Path, queries: list[ExperienceQuery]
) -> None:
    model = cut_short(backend(served, tiny_sim_dir, extra_body=SAMPLE_WHEN_ASKED))
    await _predict_all(model, queries)
    assert model.retries.differed > model.retries.repeated
    await model.backend.aclose()


@pytest.mark.anyio
async def test_check_server_finds_what_transformers_serve_honours(
    served: str, tiny_sim_dir: Path, prompts: list[list[ChatMessage]]
) -> None:
    found = await check_server(backend(served, tiny_sim_dir), prompts, local=LocalBackend.load(tiny_sim_dir))
    assert found.identical == len(prompts)
    assert found.samples is False
    assert found.seed is None
    assert found.stop == "kept"
    assert all(result.startswith("rejected: HTTP 422") for result in found.structured.values()), found.structured


@pytest.mark.anyio
async def test_check_server_finds_transformers_serve_samples_and_honours_seed_when_told_to(
    served: str, tiny_sim_dir: Path, prompts: list[list[ChatMessage]]
) -> None:
    found = await check_server(backend(served, tiny_sim_dir, extra_body=SAMPLE_WHEN_ASKED), prompts, structured=())
    assert found.samples is True
    assert found.seed is True


def _figures(lines: str) -> dict[str, dict[str, object]]:
    rows = {row["name"]: row for row in map(json.loads, lines.splitlines())}
    for row in rows.values():
        row.pop("seconds_per_step")
    return rows


def test_sim_eval_through_transformers_serve_ends_with_the_in_process_figures_when_retries_are_off(
    served: str, tiny_sim_dir: Path, stores: tuple[Path, Path], tmp_path: Path
) -> None:
    train, held = stores
    common = ("sim", "eval", str(train), "--steps", str(held), "--sim-attempts", "1", "--limit", "2", "--json")
    in_process = dreamgym(*common, "--model", str(tiny_sim_dir)).stdout
    through = dreamgym(*common, "--model", str(tiny_sim_dir), "--sim-url", served).stdout
    assert _figures(through) == _figures(in_process)


def test_sim_eval_parity_prints_one_table_of_what_the_server_honours(
    served: str, tiny_sim_dir: Path, stores: tuple[Path, Path]
) -> None:
    train, held = stores
    out = dreamgym("sim", "eval", str(train), "--steps", str(held), "--model", str(tiny_sim_dir), "--sim-url",
                   served, "--sim-max-new-tokens", "32", "--parity", "3").stdout  # fmt: skip
    for row in ("greedy answers as in process", "3/3 (100%)", "samples at temperature > 0", "do_sample", "kept"):
        assert row in out, out


@pytest.fixture(scope="module")
def miniwob_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real click-test episode (Chromium), for rollouts to start from and retrieve."""
    store = tmp_path_factory.mktemp("miniwob") / "store"
    dreamgym("collect", "--store", str(store), "--tasks", "click-test", "--seeds", "0", "--embedder", "hashing-64")
    return store


def test_rollout_through_transformers_serve_ends_with_the_in_process_figures_when_retries_are_off(
    served: str, tiny_sim_dir: Path, miniwob_store: Path
) -> None:
    common = ("rollout", "--store", str(miniwob_store), "--tasks", "click-test", "--seeds", "0", "--policy",
              "random", "--max-steps", "2", "--sim-attempts", "1", "--sim-model", str(tiny_sim_dir))  # fmt: skip
    in_process = dreamgym(*common, check=False)
    through = dreamgym(*common, "--sim-url", served, check=False)
    # the toy model cannot write a click-test page: both end the episode alike (model_output), and say so alike
    assert (through.returncode, through.stdout) == (in_process.returncode, in_process.stdout)
    assert _outcome(through.stderr) == _outcome(in_process.stderr)
    assert "rollout/sim_repeated_retries" in through.stderr


def _outcome(stderr: str) -> list[str]:
    """The runtime's counters (but its rates and times) and the closing line."""
    kept = [line for line in stderr.splitlines() if "rollout/" in line and "_per_s" not in line]
    return [*kept, stderr.strip().splitlines()[-1]]


def test_the_chat_policy_plays_an_episode_through_transformers_serve(
    served: str, miniwob_store: Path, tmp_path: Path
) -> None:
    policy = tiny_policy(tmp_path / "policy")
    out = dreamgym("collect", "--store", str(tmp_path / "store"), "--tasks", "click-test", "--seeds", "0",
                   "--embedder", "hashing-64", "--policy", "chat", "--openai-url", served, "--policy-model",
                   str(policy), "--max-steps", "2", "--max-new-tokens", "12", "--timeout", "60").stdout  # fmt: skip
    assert "1 episodes; real: 0/1 episodes succeeded, 2 steps" in out
