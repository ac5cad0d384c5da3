"""An in-process transformers causal LM that batches concurrent requests.

Concurrent :meth:`LocalBackend.complete` calls are gathered into one batch:
the first caller to find the model idle becomes the batch's leader, waits
``batch_window_s`` for others to join, and runs one generation loop for up to
``max_batch`` prompts in a worker thread; the others wait for their rows.
The loop is dreamgym's own (prefill, then one token per step with a KV cache),
so that each row samples with its own seeded generator, stops at its own stop
strings, and leaves the batch when done.

Shared prompt prefix: the prompts of one template begin alike (the system
message). When the prompts of a batch share at least ``min_prefix_tokens``
tokens, the prefix is run once (batch 1), kept in a small LRU of KV caches,
and copied into the batch; only the differing suffixes are prefilled.

Determinism: greedy decoding is deterministic for a given batch; sampling is
reproducible for a given batch and seeds. Across *different* batch
compositions the float sums differ in the last bits, so an uncached batched
run on a CPU is not promised to be bit-identical to another. The experience
model's call cache (in the replay store) is what makes replays byte-identical.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from dreamgym.core.batching import ThreadBatcher
from dreamgym.core.devices import check_device, check_dtype, model_device, place_given, place_loaded
from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.models import resolve_model
from dreamgym.core.protocols import ChatMessage, Completion, Sampling
from dreamgym.simulator.backends._copy import CopyGuard

if TYPE_CHECKING:
    import torch

__all__ = ["LocalBackend", "weights_digest"]

log = logging.getLogger(__name__)

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


def weights_digest(path: str | Path) -> str:
    """A sha256 over a model directory's weight and tokenizer files (names and bytes)."""
    root = Path(path)
    digest = hashlib.sha256()
    files = sorted(
        p for p in root.iterdir() if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name == "tokenizer.json")
    )
    if not files:
        raise ConfigError(f"{root} holds no weights (*.safetensors, *.bin or *.gguf); is it a model directory?")
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    text: str = ""
    finish_reason: str = ""
    completion_tokens: int = 0
    steered: int = 0
    """Tokens whose choice the answer guard took from the model (``Completion.steered``)."""
    error: BaseException | None = None
    done: bool = False


@dataclass
class _Row:
    request: _Request
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    position: int = 0
    text: str = ""
    """The answer so far, where it is kept to a diff that applies (``Sampling.copy_lines``)."""
    lines: tuple[str, ...] = ()
    """The page's lines, in order, that the answer's diff applies to (empty: decoded unconstrained)."""


class LocalBackend:
    """A causal LM in this process, behind the :class:`~dreamgym.core.protocols.TextBackend` protocol.

    Args:
        model: A transformers causal LM (eval mode is set here).
        tokenizer: Its tokenizer, with a chat template.
        name: What ``backend_id`` calls the model.
        digest: A hash of the weights (see :func:`weights_digest`); part of ``backend_id``.
        max_batch: Most prompts per generation loop.
        batch_window_s: How long a batch's leader waits for others to join.
        limiter: Shared cap on in-process torch work (so the policy, the
            simulator and the embedder do not oversubscribe the cores); one
            slot by default.
        prefix_cache: Reuse the KV cache of a shared prompt prefix.
        min_prefix_tokens: Shortest shared prefix worth reusing.
        device: Where the model runs: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``; ``"auto"`` leaves
            a given model where it is (:meth:`load` puts it on CUDA where torch sees a GPU, else the CPU).
        dtype: The model's weights: ``"float32"``, ``"bfloat16"`` or ``"float16"``; ``"auto"`` leaves a
            given model's as they are (:meth:`load` keeps the checkpoint's, float32 on the CPU).

    Example:
        >>> backend = LocalBackend.load("~/.cache/dreamgym/sim-miniwob")
        >>> answer = await backend.complete(messages, Sampling(max_new_tokens=64))
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        digest: str,
        max_batch: int = 8,
        batch_window_s: float = 0.005,
        limiter: anyio.CapacityLimiter | None = None,
        prefix_cache: bool = True,
        min_prefix_tokens: int = 32,
        device: str = "auto",
        dtype: str = "auto",
    ) -> None:
        if max_batch < 1:
            raise ConfigError("LocalBackend.max_batch must be >= 1")
        check_device(device, "LocalBackend.device")
        check_dtype(dtype, "LocalBackend.dtype")
        self.model = place_given(model, device, dtype).eval()
        self.tokenizer = tokenizer
        self.backend_id = f"local:{name}@{digest[:16]}"
        self.prefix_cache = prefix_cache
        self.min_prefix_tokens = min_prefix_tokens
        self._batcher = ThreadBatcher(self._run_batch, max_batch=max_batch, window_s=batch_window_s, limiter=limiter)
        self._prefixes: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._eos = _eos_ids(model, tokenizer)
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._eos)
        self.prefix_hits = 0
        self._guard: CopyGuard | None = None
        self._guard_built = False

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> LocalBackend:
        """Load a model directory: a plain checkpoint, or a PEFT adapter over a local base; ``kwargs`` go to
        the constructor, and its ``device`` and ``dtype`` place the model, ``"auto"`` resolved.

        Raises:
            ConfigError: The directory holds no model.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        root = resolve_model(path, what="experience model")
        digest = weights_digest(root)
        if (root / "adapter_config.json").exists():
            from peft import PeftConfig, PeftModel

            named = PeftConfig.from_pretrained(str(root)).base_model_name_or_path
            if not named:
                raise ConfigError(f"the adapter at {root} names no base model")
            base = str(resolve_model(named, what=f"the base model of the adapter at {root}"))
            digest = hashlib.sha256((weights_digest(base) + digest).encode()).hexdigest()
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(root)).merge_and_unload()
        else:
            model = AutoModelForCausalLM.from_pretrained(str(root))
        tokenizer = AutoTokenizer.from_pretrained(str(root))
        kwargs.setdefault("name", root.name if Path(path).expanduser().is_dir() else str(path))
        model = place_loaded(model, kwargs.get("device", "auto"), kwargs.get("dtype", "auto"))
        return cls(model, tokenizer, digest=digest, **kwargs)

    def encode(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The prompt's token ids under the tokenizer's chat template."""
        text = self.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=True, tokenize=False
        )
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        """Answer one chat prompt, batched with whatever else is asked meanwhile."""
        request = _Request(prompt_ids=self.encode(messages), sampling=sampling)
        await self._batcher.submit(request)
        if request.error is not None:
            raise BackendError(f"{self.backend_id} failed to generate: {request.error}") from request.error
        return Completion(
            text=request.text,
            finish_reason=request.finish_reason,
            prompt_tokens=len(request.prompt_ids),
            completion_tokens=request.completion_tokens,
            steered=request.steered,
        )

    @property
    def batches(self) -> int:
        """Generation loops run so far (a batching gauge for tests and benchmarks)."""
        return self._batcher.batches

    def _run_batch(self, batch: list[_Request]) -> None:
        try:
            for request, (ids, finish) in zip(batch, self.generate_ids(batch), strict=True):
                request.text = self._decode(ids, request.sampling.stop)
                request.finish_reason = finish
                request.completion_tokens = len(ids)
        except Exception as exc:  # a failed batch fails each of its requests, not the caller's task group
            for request in batch:
                request.error = exc
        for request in batch:
            request.done = True

    def _decode(self, ids: list[int], stop: Sequence[str]) -> str:
        text: str = self.tokenizer.decode(ids, skip_special_tokens=True)
        return _cut_at_stop(text, stop)

    # ------------------------------------------------------------------ the generation loop

    def generate_ids(self, requests: Sequence[_Request]) -> list[tuple[list[int], str]]:
        """Generate for a batch of requests in this thread; returns (token ids, finish reason) per row."""
        import torch

        rows = [_Row(request=r, generator=_generator(r.sampling), lines=self._copy_lines(r.sampling)) for r in requests]
        with torch.inference_mode():
            cache, logits, mask = self._prefill(rows)
            active = list(range(len(rows)))
            finished: dict[int, str] = {}
            while active:
                tokens = [self._sample(rows[i], logits[n]) for n, i in enumerate(active)]
                still = []
                for n, i in enumerate(active):
                    reason = self._advance(rows[i], tokens[n])
                    if reason:
                        finished[i] = reason
                    else:
                        still.append(n)
                if not still:
                    break
                if len(still) < len(active):
                    cache.batch_select_indices(torch.tensor(still, device=mask.device))
                active = [active[n] for n in still]
                logits = self._decode_step(rows, active, cache, mask)
        return [(row.tokens, finished[i]) for i, row in enumerate(rows)]

    def _prefill(self, rows: list[_Row]) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Run the prompts; returns the KV cache, the next-token logits and the prompt mask."""
        import torch
        from transformers import DynamicCache

        prompts = [row.request.prompt_ids for row in rows]
        prefix_len, cache = self._shared_prefix(prompts)
        suffixes = [p[prefix_len:] for p in prompts]
        width = max(len(s) for s in suffixes)
        device = model_device(self.model)
        ids = torch.full((len(rows), width), self._pad, dtype=torch.long, device=device)
        mask = torch.zeros((len(rows), prefix_len + width), dtype=torch.long, device=device)
        mask[:, :prefix_len] = 1
        positions = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for n, suffix in enumerate(suffixes):
            if suffix:
                ids[n, width - len(suffix) :] = torch.tensor(suffix, device=device)
                positions[n, width - len(suffix) :] = torch.arange(prefix_len, prefix_len + len(suffix), device=device)
            mask[n, prefix_len + width - len(suffix) :] = 1
            rows[n].position = prefix_len + len(suffix)
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
        )
        return out.cache, out.logits[:, -1, :], mask

    def _shared_prefix(self, prompts: list[list[int]]) -> tuple[int, Any]:
        """Length of the reusable shared prefix and a batch-sized copy of its KV cache (or ``(0, None)``)."""
        if not self.prefix_cache:
            return 0, None
        # Every row keeps at least one token of its own, whose logits start the answer.
        limit = min(len(p) for p in prompts) - 1
        length = _common_prefix_length(prompts, limit)
        usable = (key for key in self._prefixes if len(key) <= length and _starts_all(prompts, key))
        best = max(usable, key=len, default=())
        if len(best) < self.min_prefix_tokens:
            if length < self.min_prefix_tokens:
                return 0, None
            best = tuple(prompts[0][:length])
            self._prefixes[best] = self._run_prefix(best)
            while len(self._prefixes) > 4:
                self._prefixes.popitem(last=False)
        else:
            self.prefix_hits += 1
            self._prefixes.move_to_end(best)
        cache = copy.deepcopy(self._prefixes[best])
        if len(prompts) > 1:
            cache.batch_repeat_interleave(len(prompts))
        return len(best), cache

    def _run_prefix(self, prefix: tuple[int, ...]) -> Any:
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([prefix], device=model_device(self.model))
        self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        return cache

    def _decode_step(self, rows: list[_Row], active: list[int], cache: Any, prompt_mask: torch.Tensor) -> torch.Tensor:
        import torch

        device = prompt_mask.device  # the model's
        ids = torch.tensor([[rows[i].tokens[-1]] for i in active], device=device)
        positions = torch.tensor([[rows[i].position] for i in active], device=device)
        for i in active:
            rows[i].position += 1
        length = cache.get_seq_length() + 1
        # The prompt mask (padding holes included), then ones for every generated token.
        base = prompt_mask[active]
        grown = torch.ones((len(active), length - base.shape[1]), dtype=torch.long, device=device)
        mask = torch.cat([base, grown], dim=1)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        logits: torch.Tensor = out.logits[:, -1, :]
        return logits

    def _copy_lines(self, sampling: Sampling) -> tuple[str, ...]:
        """The page lines this row's diff applies to (``Sampling.copy_lines``), where the tokenizer allows it."""
        if not sampling.copy_lines:
            return ()
        if not self._guard_built:  # once: every token's text (about a second for a 49k vocabulary)
            self._guard, self._guard_built = CopyGuard.for_tokenizer(self.tokenizer), True
        return tuple(sampling.copy_lines) if self._guard is not None else ()

    def _sample(self, row: _Row, logits: torch.Tensor) -> int:
        import torch

        sampling = row.request.sampling
        if row.lines and self._guard is not None:
            constraint = self._guard.constraint(row.text, row.lines)
            if constraint is not None:
                ids, only = constraint
                size = logits.shape[-1]  # a tokenizer may name more tokens than the model scores
                index = torch.tensor([t for t in ids if t < size], dtype=torch.long, device=logits.device)
                favourite = int(torch.argmax(logits))
                if only:
                    logits = torch.full_like(logits, float("-inf")).index_copy(0, index, logits[index])
                else:
                    logits = logits.index_fill(0, index, float("-inf"))
                if bool(torch.isneginf(logits[favourite])) and not self._guard.copying(row.text, row.lines):
                    ending = self._guard.fallback(row.text, row.lines)
                    if ending:  # the line ends where the model ran it on into another's text
                        keep = torch.tensor([t for t in ending if t < size], dtype=torch.long, device=logits.device)
                        logits = torch.full_like(logits, float("-inf")).index_copy(0, keep, logits[keep])
                    else:  # the model's own choice overruled, not a misspelt copy corrected nor a line cut
                        row.request.steered += 1
                        if log.isEnabledFor(logging.DEBUG):
                            log.debug("steered after %r: the model chose %r", row.text[-120:],
                                      self.tokenizer.decode([favourite]))  # fmt: skip
        if sampling.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
        if sampling.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < sampling.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        if row.generator is not None:  # drawn where the row's seeded generator is (the CPU)
            probs = probs.to(row.generator.device)
        return int(torch.multinomial(probs, 1, generator=row.generator))

    def _advance(self, row: _Row, token: int) -> str:
        """Append ``token``; returns the finish reason when the row is done, else ``""``."""
        if token in self._eos:
            return "stop"
        row.tokens.append(token)
        if row.lines and self._guard is not None:
            row.text += self._guard.texts[token] if token < len(self._guard.texts) else ""
            if self._guard.finished(row.text):  # its </done> written: the answer is whole
                return "stop"
        stop = row.request.sampling.stop
        if stop and any(s in self.tokenizer.decode(row.tokens[-32:], skip_special_tokens=True) for s in stop):
            return "stop"
        if len(row.tokens) >= row.request.sampling.max_new_tokens:
            return "length"
        return ""

    async def aclose(self) -> None:
        self._prefixes.clear()


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(value)
    if not ids:
        raise ConfigError("the tokenizer and model name no end-of-sequence token; set tokenizer.eos_token")
    return frozenset(ids)


def _generator(sampling: Sampling) -> torch.Generator | None:
    import torch

    if sampling.temperature == 0:
        return None
    generator = torch.Generator()
    if sampling.seed is None:
        generator.seed()
    else:
        generator.manual_seed(sampling.seed)
    return generator


def _common_prefix_length(prompts: list[list[int]], limit: int) -> int:
    first = prompts[0]
    length = max(limit, 0)
    for other in prompts[1:]:
        length = min(length, len(other))
        for n in range(length):
            if other[n] != first[n]:
                length = n
                break
    return length


def _starts_all(prompts: list[list[int]], prefix: tuple[int, ...]) -> bool:
    size = len(prefix)
    return all(tuple(p[:size]) == prefix for p in prompts)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = min((text.find(s) for s in stop if s in text), default=-1)
    return text if cut < 0 else text[:cut]
