"""``ThreadBatcher``: concurrent async requests gathered into batches that run in a worker thread.

The in-process models (the simulator's ``LocalBackend``, the agents'
``LocalPolicy``) answer many concurrent callers with one forward pass. The
first caller to find the batcher idle leads: it waits ``window_s`` for others
to join, takes up to ``max_batch`` waiting requests (oldest first), and runs
``run_batch`` on them in a worker thread under the shared ``limiter``; the
others wait. A caller whose request did not fit leads the next batch. No
background task is needed, so a batcher lives as long as its owner.

``run_batch`` must mark every request of its batch ``done`` (and set the
request's own error field rather than raise: one failed batch fails its
requests, not the callers' task groups). A caller cancelled while waiting is
removed; a batch already running finishes in its thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import anyio

from dreamgym.core.errors import ConfigError

__all__ = ["Batchable", "ThreadBatcher"]


class Batchable(Protocol):
    done: bool


R = TypeVar("R", bound=Batchable)


class ThreadBatcher(Generic[R]):
    """Gathers concurrent requests into batches for ``run_batch`` (see the module docstring).

    Example:
        >>> batcher = ThreadBatcher(model.run_batch, max_batch=8, window_s=0.01)
        >>> await batcher.submit(request)   # returns once request.done
    """

    def __init__(
        self,
        run_batch: Callable[[list[R]], None],
        *,
        max_batch: int,
        window_s: float,
        limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        if max_batch < 1 or window_s < 0:
            raise ConfigError("a batcher needs max_batch >= 1 and window_s >= 0")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.window_s = window_s
        self.limiter = limiter or anyio.CapacityLimiter(1)
        self.batches = 0
        """Batches run so far (a gauge for tests and benchmarks)."""
        self._pending: list[R] = []
        self._busy = False
        self._condition = anyio.Condition()

    @property
    def waiting(self) -> int:
        return len(self._pending)

    async def submit(self, request: R) -> None:
        """Queue ``request`` and return once a batch has handled it."""
        async with self._condition:
            self._pending.append(request)
        try:
            while not request.done:
                async with self._condition:
                    while not request.done and self._busy:
                        await self._condition.wait()
                    if request.done:
                        break
                    self._busy = True
                await self._lead()
        finally:
            if not request.done and request in self._pending:
                self._pending.remove(request)

    async def _lead(self) -> None:
        try:
            await anyio.sleep(self.window_s)
            batch = self._pending[: self.max_batch]
            del self._pending[: len(batch)]
            if batch:
                self.batches += 1
                await anyio.to_thread.run_sync(self.run_batch, batch, limiter=self.limiter)
        finally:
            with anyio.CancelScope(shield=True):
                async with self._condition:
                    self._busy = False
                    self._condition.notify_all()
