"""Helpers of the simulator's tests: a toy store, a scripted text backend, tiny training settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import toy_form

from dreamgym.core import BackendError, ChatMessage, Completion, Sampling
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import TemplateConfig
from dreamgym.simulator._sft import ScratchModelConfig

EMBEDDER = HashingEmbedder(64)
TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=2048)  # fmt: skip


def open_store(path: Path, **kwargs: object) -> LmdbReplayStore:
    return LmdbReplayStore(path, embedder=EMBEDDER, **kwargs)  # type: ignore[arg-type]


async def fill_toy_store(store: LmdbReplayStore, seeds: range = range(8)) -> None:
    await store.put_task(toy_form.TASK)
    for steps in toy_form.episodes(seeds):
        await store.append(steps)
    await store.flush()


class ScriptedBackend:
    """A text backend that answers from a script (the model's neighbour in these tests, not the thing tested)."""

    def __init__(self, answers: Sequence[str] | Callable[[Sequence[ChatMessage]], str], backend_id: str = "scripted"):
        self.backend_id = backend_id
        self._answers = answers if callable(answers) else list(answers)
        self.calls: list[tuple[list[ChatMessage], Sampling]] = []
        self.fail = False

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        self.calls.append((list(messages), sampling))
        if self.fail:
            raise BackendError("scripted backend is down")
        if callable(self._answers):
            return Completion(text=self._answers(messages))
        return Completion(text=self._answers.pop(0) if len(self._answers) > 1 else self._answers[0])

    async def aclose(self) -> None:
        pass


TOY_TEMPLATE = TemplateConfig(history=1, neighbours=2)
