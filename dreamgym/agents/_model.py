"""The policy's torch work: scoring candidate replies after shared prefixes, sampling a reply, drawing one token.

All of it runs in a worker thread under ``torch.inference_mode``, every
tensor made on the model's device (:func:`~dreamgym.core.devices.model_device`);
a token is drawn where the policy's seeded generator is (the CPU). A sampled
token's recorded log-probability is the one it was drawn with,
``log_softmax(logits / T)`` at the sampling temperature ``T``: the quantity
TRL recomputes when ``GRPOConfig.temperature`` is that ``T``. A greedy draw
(``T = 0``) records ``log_softmax(logits)``. Tokens appended without being
drawn are flagged 0 in the returned mask.

Caches of weights-derived values (the prompt head's KV, the last logits of
recent prompts) are keyed by an
explicit :class:`WeightsVersion` that every weight change bumps, never by a
tensor implementation detail: optimizers such as torch's fused AdamW update
parameters in place without bumping ``tensor._version``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dreamgym.core.devices import model_device
from dreamgym.core.memo import RecentValues

if TYPE_CHECKING:
    import torch

__all__ = [
    "LogitsMemo",
    "PromptHead",
    "WeightsVersion",
    "add_index_tokens",
    "choice_logprobs",
    "draw_tokens",
    "generate_reply",
    "model_digest",
    "score_candidates",
]


def model_digest(model: Any) -> str:
    """A sha256 over a model's parameters and buffers (names, dtypes, shapes and bytes)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def add_index_tokens(model: Any, tokenizer: Any) -> int:
    """Make each of :data:`~dreamgym.agents.INDEX_TOKENS` one token of ``tokenizer`` and grow ``model``'s
    embeddings to match; returns how many were added (0 when they are there already).

    The new embeddings start at the mean of the old ones: an ``index`` policy
    made this way picks near chance until it is trained on the labels.
    """
    from dreamgym.agents._prompt import INDEX_TOKENS

    added = int(tokenizer.add_tokens(list(INDEX_TOKENS), special_tokens=True))
    if added:
        model.resize_token_embeddings(len(tokenizer))
    return added


class WeightsVersion:
    """An explicit count of a model's weight changes, shared by everything that caches what the weights give.

    Whoever changes the weights bumps it: the trainer after each optimizer
    step, after restoring a checkpoint or loading adapters; a policy when its
    model is replaced.
    """

    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> None:
        self.value += 1


class PromptHead:
    """The ids every prompt of a policy starts with (its system turn), with their KV cache.

    The cache is made on first use and made again whenever the model or the
    :class:`WeightsVersion` it was made under has changed, so a policy trained
    in place never scores against stale keys and values.
    """

    def __init__(self, ids: Sequence[int], weights: WeightsVersion | None = None) -> None:
        self.ids = tuple(ids)
        self.weights = weights or WeightsVersion()
        self._cache: Any = None
        self._key: tuple[int, int] = (0, -1)

    def starts(self, prefixes: Sequence[Sequence[int]]) -> bool:
        """Whether every prefix starts with the head and goes on past it."""
        size = len(self.ids)
        return size > 0 and all(len(p) > size and tuple(p[:size]) == self.ids for p in prefixes)

    def cache(self, model: Any) -> Any:
        """A fresh copy of the head's KV cache (batch 1) for ``model``'s current weights."""
        import torch
        from transformers import DynamicCache

        key = (id(model), self.weights.value)
        if self._cache is None or key != self._key:
            cache = DynamicCache(config=model.config)
            ids = torch.tensor([list(self.ids)], device=model_device(model))
            model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            self._cache, self._key = cache, key
        return copy.deepcopy(self._cache)


class LogitsMemo:
    """The next-token logits after the last ``size`` distinct prompts, kept while the weights stay as they are.

    A prompt seen again is not run again: the eight episodes of a GRPO group
    start from one page, and a policy that has learnt a task takes the same
    first steps in most of them (over three updates of the demo's training, counted once,
    277 turns were 91 distinct prompts, and at two browser contexts most
    arrive in batches of one, where :func:`_prefill` cannot share them). Emptied whenever the model
    or its :class:`WeightsVersion` changes, as :class:`PromptHead` is.
    """

    def __init__(self, size: int, weights: WeightsVersion | None = None) -> None:
        self.size = size
        self.weights = weights or WeightsVersion()
        self.runs = 0
        """Prompts run through the model."""
        self.hits = 0
        """Prompts answered from the memo (or from an equal prompt earlier in the same batch)."""
        self._rows: RecentValues[torch.Tensor] = RecentValues(size)
        self._key: tuple[int, int] = (0, -1)

    def rows(
        self, model: Any, prefixes: Sequence[Sequence[int]], run: Callable[[list[Sequence[int]]], torch.Tensor]
    ) -> list[torch.Tensor]:
        """The last logits after each prefix, in order; ``run`` computes those of the prefixes the memo lacks."""
        key = (id(model), self.weights.value)
        if key != self._key:
            self._rows.clear()
            self._key = key
        names = [hashlib.blake2b(repr(list(prefix)).encode(), digest_size=16).digest() for prefix in prefixes]
        found, ran = self._rows.fetch(names, prefixes, lambda missing: [row.clone() for row in run(missing)])
        self.runs += ran
        self.hits += len(names) - ran
        return found


def score_candidates(
    model: Any,
    prefixes: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    max_pass_tokens: int,
    head: PromptHead | None = None,
) -> list[list[list[float]]]:
    """Per-token log-probabilities of each candidate continuation of each prefix.

    The prefixes run once, together (what they share once, the rest
    left-padded), into one KV cache. Then only the candidates' tokens run:
    each prefix's candidates packed into its row behind it, each seeing the
    prefix and its own earlier tokens (a custom 4-D attention mask, which
    the ``sdpa`` and ``eager`` attention implementations take), in passes of
    at most ``max_pass_tokens`` rows x tokens, the cache cropped back to the
    prefixes after each. A candidate's first token is scored from its
    prefix's last logits.

    Args:
        model: A transformers causal LM.
        prefixes: Token ids of each prefix (non-empty).
        candidates: For each prefix, the token ids of its candidates (each non-empty).
        pad_id: The id that pads rows (masked out, so its value does not matter).
        max_pass_tokens: Cap on rows x candidate tokens of one pass (its logits
            take that times the vocabulary size in floats).
        head: The prompts' common start, whose cache is reused when every prefix begins with it.

    Returns:
        ``out[p][c][j]``: log p(token j of candidate c | prefix p, the tokens before j).
    """
    import torch

    with torch.inference_mode():
        cache, last, mask, lengths = _prefill(model, prefixes, pad_id, head)
        first = torch.log_softmax(last.float(), dim=-1)
        out = [[[float(first[p, ids[0]])] for ids in group] for p, group in enumerate(candidates)]
        for chosen in _passes(candidates, max_pass_tokens):
            packed = [[candidates[p][c] for c in picked] for p, picked in enumerate(chosen)]
            scores = _score_packed(model, packed, cache, mask, lengths, pad_id)
            for p, picked in enumerate(chosen):
                for c, found in zip(picked, scores[p], strict=True):
                    out[p][c].extend(found)
            cache.crop(mask.shape[1] - cache.get_seq_length())  # a negative count: the pass's tokens go
    return out


def _passes(candidates: Sequence[Sequence[Sequence[int]]], budget: int) -> list[list[list[int]]]:
    """Split the candidates (those past their first token) into passes: per pass, per prefix, their indexes.

    Candidates are dealt to the rows in turn, so the rows fill evenly; a pass
    closes when one more would take rows x its widest row past ``budget``.
    """
    rows = len(candidates)
    passes: list[list[list[int]]] = []
    current: list[list[int]] = [[] for _ in range(rows)]
    widths = [0] * rows
    for c in range(max(len(group) for group in candidates)):
        for p, group in enumerate(candidates):
            if c >= len(group) or len(group[c]) < 2:
                continue
            size = len(group[c]) - 1
            if any(current) and rows * max(*widths, widths[p] + size) > budget:
                passes.append(current)
                current, widths = [[] for _ in range(rows)], [0] * rows
            current[p].append(c)
            widths[p] += size
    if any(current):
        passes.append(current)
    return passes


def _prefill(
    model: Any, prefixes: Sequence[Sequence[int]], pad_id: int, head: PromptHead | None = None
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the prefixes; returns the cache, last logits, the attention mask and each prefix's length.

    The head's cache is reused when every prefix starts with it; what all
    prefixes share beyond it (a page: a calibrated chooser's two prompts
    differ only from the goal on) runs once; both are copied into every row.
    The rest of each prefix follows, left-padded, so the mask may have holes
    between the shared part and a row's own tokens.
    """
    import torch
    from transformers import DynamicCache

    device = model_device(model)
    start, cache = 0, DynamicCache(config=model.config)
    if head is not None and head.starts(prefixes):
        start, cache = len(head.ids), head.cache(model)
    shared = _shared_length(prefixes, start)
    if shared > start:
        ids = torch.tensor([list(prefixes[0][start:shared])], device=device)
        positions = torch.arange(start, shared, device=device).unsqueeze(0)
        model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1)
    if shared and len(prefixes) > 1:
        cache.batch_repeat_interleave(len(prefixes))
    width = max(len(p) for p in prefixes) - shared
    ids = torch.full((len(prefixes), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prefixes), shared + width), dtype=torch.long, device=device)
    mask[:, :shared] = 1
    positions = torch.zeros((len(prefixes), width), dtype=torch.long, device=device)
    for n, prefix in enumerate(prefixes):
        own = len(prefix) - shared
        ids[n, width - own :] = torch.tensor(list(prefix[shared:]), device=device)
        mask[n, shared + width - own :] = 1
        positions[n, width - own :] = torch.arange(shared, len(prefix), device=device)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
    )
    lengths = torch.tensor([len(p) for p in prefixes], device=device)
    return out.cache, out.logits[:, -1, :], mask, lengths


def _shared_length(prefixes: Sequence[Sequence[int]], start: int, minimum: int = 16) -> int:
    """How far all prefixes agree (from ``start``, each keeping one id of its own); ``start`` when not worth it."""
    if len(prefixes) < 2:
        return start
    first, limit = prefixes[0], min(len(p) for p in prefixes) - 1
    length = start
    while length < limit and all(p[length] == first[length] for p in prefixes):
        length += 1
    return length if length - start >= minimum else start


def _score_packed(
    model: Any,
    candidates: Sequence[Sequence[Sequence[int]]],
    cache: Any,
    prefix_mask: torch.Tensor,
    lengths: torch.Tensor,
    pad_id: int,
) -> list[list[list[float]]]:
    """Log-probabilities of each candidate's tokens after its first, all candidates in one pass.

    A prefix's candidates are packed one after another into its row, each
    token placed at its own position after the prefix and seeing, through a
    custom 4-D mask, the prefix and its own candidate's earlier tokens only.
    """
    import torch

    inputs = [[list(ids[:-1]) for ids in group] for group in candidates]
    width = max(sum(len(x) for x in group) for group in inputs)
    if width == 0:
        return [[[] for _ in group] for group in candidates]
    rows, prefix_width = prefix_mask.shape
    device = model_device(model)
    ids = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
    positions = torch.zeros((rows, width), dtype=torch.long, device=device)
    allowed = torch.zeros((rows, width, prefix_width + width), dtype=torch.bool, device=device)
    allowed[:, :, :prefix_width] = prefix_mask.bool().unsqueeze(1)
    for row, group in enumerate(inputs):
        start = 0
        for tokens in group:
            end = start + len(tokens)
            ids[row, start:end] = torch.tensor(tokens, dtype=torch.long, device=device)
            positions[row, start:end] = lengths[row] + torch.arange(len(tokens), device=device)
            block = torch.ones((len(tokens), len(tokens)), dtype=torch.bool, device=device).tril()
            allowed[row, start:end, prefix_width + start : prefix_width + end] = block
            start = end
    dtype = model.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    mask = mask.unsqueeze(1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
    logprobs = torch.log_softmax(out.logits.float(), dim=-1)
    scores: list[list[list[float]]] = []
    for row, replies in enumerate(candidates):
        start, found = 0, []
        for reply in replies:
            targets = torch.tensor(list(reply[1:]), dtype=torch.long, device=device)
            found.append(logprobs[row, start + torch.arange(len(targets), device=device), targets].tolist())
            start += len(targets)
        scores.append(found)
    return scores


def _sampled(
    logits: torch.Tensor, temperature: float, generator: torch.Generator, among: torch.Tensor | None = None
) -> tuple[int, float]:
    """Draw a token from ``softmax(logits / temperature)`` (the best one at 0); returns it and its log-probability.

    With ``among`` (token ids), only those tokens can be drawn: the softmax is over their logits alone
    (:func:`choice_logprobs`' distribution), and the log-probability returned is in it.
    """
    import torch

    if among is not None:
        logits = torch.full_like(logits, float("-inf")).index_copy(0, among, logits.index_select(0, among))
    if temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    token = int(torch.multinomial(logprobs.exp().to(generator.device), 1, generator=generator))
    return token, float(logprobs[token])


def choice_logprobs(logits: torch.Tensor, targets: torch.Tensor, among: torch.Tensor) -> torch.Tensor:
    """Each target's log-probability under the logits' last dimension, in the softmax over the ``among`` tokens
    alone where the target is one of them (an index policy's choice), and over every token elsewhere.

    ``logits`` is ``(..., vocab)`` (already divided by the temperature), ``targets`` the matching ``(...)`` ids.
    Differentiable: the trainer's loss takes an index policy's choices through it, so what it differentiates is
    what :func:`draw_tokens` drew from with ``among``.
    """
    import torch

    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    over_choices = picked - torch.logsumexp(logits.index_select(-1, among), dim=-1)
    over_all = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(torch.isin(targets, among), over_choices, over_all)


def generate_reply(
    model: Any,
    prefix: Sequence[int],
    *,
    eos_id: int,
    temperature: float,
    max_new_tokens: int,
    generator: torch.Generator,
    finished: Callable[[list[int]], bool],
    head: PromptHead | None = None,
) -> tuple[list[int], list[float], list[int]]:
    """Sample a reply after ``prefix`` until ``eos_id``; returns its ids (ending with EOS), their log-probabilities
    and which of them were sampled.

    Each token is drawn from ``softmax(logits / temperature)`` and recorded
    with its log-probability under that distribution. When ``finished(ids)``
    says the reply is complete, or ``max_new_tokens`` ran out, the EOS is
    appended without being drawn (flag 0, log-probability 0.0), so every reply
    ends its turn and only drawn tokens are trained.
    """
    import torch
    from transformers import DynamicCache

    ids: list[int] = []
    logprobs: list[float] = []
    sampled: list[int] = []
    with torch.inference_mode():
        start, cache = 0, DynamicCache(config=model.config)
        if head is not None and head.starts([prefix]):
            start, cache = len(head.ids), head.cache(model)
        device = model_device(model)
        ids_in = torch.tensor([list(prefix[start:])], device=device)
        positions = torch.arange(start, len(prefix), device=device).unsqueeze(0)
        logits = model(input_ids=ids_in, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1).logits
        while True:
            if len(ids) >= max_new_tokens or (ids and finished(ids)):
                ids.append(eos_id)
                logprobs.append(0.0)
                sampled.append(0)
                return ids, logprobs, sampled
            token, logprob = _sampled(logits[0, -1].float(), temperature, generator)
            ids.append(token)
            logprobs.append(logprob)
            sampled.append(1)
            if token == eos_id:
                return ids, logprobs, sampled
            logits = model(input_ids=torch.tensor([[token]], device=device), cache=cache, use_cache=True).logits


def draw_tokens(
    model: Any,
    prefixes: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
    head: PromptHead | None = None,
    memo: LogitsMemo | None = None,
    among: Sequence[int] | None = None,
) -> list[tuple[int, float]]:
    """One token after each prefix, drawn from ``softmax(logits / temperature)``, with its log-probability: over
    the whole vocabulary, or over the ``among`` token ids alone (every other token gets no probability).

    The prefixes run together in one forward pass (shared parts once, the
    head's cache reused), as :func:`score_candidates` runs them; with a
    ``memo``, only those it does not hold. The draws are made in the order
    given, from the generator, either way.
    """
    import torch

    def run(missing: Sequence[Sequence[int]]) -> torch.Tensor:
        return _prefill(model, missing, pad_id, head)[1]

    with torch.inference_mode():
        last = list(run(prefixes)) if memo is None else memo.rows(model, prefixes, run)
        allowed = None if among is None else torch.tensor(sorted(among), dtype=torch.long, device=last[0].device)
        return [_sampled(row.float(), temperature, generator, allowed) for row in last]
