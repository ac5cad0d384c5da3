"""The runtime's one store-writer task: finished episodes reach the store through a bounded stream.

Rollouts put :class:`Commit` items on a bounded memory stream (a full stream
makes them wait: backpressure); one task takes whatever is waiting, up to a
batch, and writes it: each item's task records first, then its steps and
episode summaries in one transaction, so an episode is stored whole or not at all. The items of a
round are written concurrently and the store's own group commit gathers them
into few transactions. A :meth:`StoreWriter.barrier` returns once everything
put before it is committed.

Cancelled, the writer keeps committing what arrives for ``drain_timeout_s``
(shielded), so cancelled episodes' finished steps still land.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from dreamgym.core.errors import DreamgymError
from dreamgym.core.protocols import ReplayStore
from dreamgym.core.types import Episode, Step, Task

__all__ = ["Commit", "StoreWriter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Commit:
    """Records to store together: tasks, then steps, then the episodes they belong to."""

    steps: tuple[Step, ...] = ()
    episodes: tuple[Episode, ...] = ()
    tasks: tuple[Task, ...] = ()


@dataclass(frozen=True, slots=True)
class _Barrier:
    reached: anyio.Event


class StoreWriter:
    """Run :meth:`run` in one task; :meth:`put` and :meth:`barrier` from any task of the same loop."""

    def __init__(self, store: ReplayStore, *, buffer: int, batch: int, drain_timeout_s: float) -> None:
        self.store = store
        self._batch = batch
        self._drain_timeout_s = drain_timeout_s
        self._send, self._receive = anyio.create_memory_object_stream[Commit | _Barrier](buffer)
        self._finished = anyio.Event()
        self.committed_steps = 0
        self.failures = 0
        """Items (or parts of them) the store refused; each is logged."""
        self.first_error = ""
        """Why the store refused the first of them (our own errors' one line, else the exception's type too)."""

    async def put(self, item: Commit) -> None:
        """Queue ``item``, waiting while the buffer is full.

        Raises:
            anyio.ClosedResourceError: The writer is closed.
            anyio.BrokenResourceError: The writer task has ended.
        """
        await self._send.send(item)

    async def barrier(self) -> None:
        """Wait until every item put before this call is written (or has failed)."""
        reached = anyio.Event()
        await self._send.send(_Barrier(reached))
        await reached.wait()

    async def run(self) -> None:
        """Write items until the stream is closed (see the module docstring for cancellation)."""
        try:
            try:
                await self._serve()
            except anyio.get_cancelled_exc_class():
                with anyio.move_on_after(self._drain_timeout_s, shield=True) as scope:
                    await self._serve()
                if scope.cancelled_caught:
                    log.error("the store writer gave up draining after %s s", self._drain_timeout_s)
                raise
        finally:
            self._receive.close()
            self._finished.set()

    async def aclose(self) -> None:
        """Refuse new items, write the queued ones, and wait for the writer task to end."""
        self._send.close()
        await self._finished.wait()

    async def _serve(self) -> None:
        async for first in self._receive:
            batch = [first]
            while len(batch) < self._batch:
                try:
                    batch.append(self._receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            with anyio.CancelScope(shield=True):  # a round in flight always finishes
                await self._write(batch)

    async def _write(self, batch: list[Commit | _Barrier]) -> None:
        async with anyio.create_task_group() as tg:
            for item in batch:
                if isinstance(item, Commit):
                    tg.start_soon(self._write_item, item)
        for item in batch:
            if isinstance(item, _Barrier):
                item.reached.set()

    async def _write_item(self, item: Commit) -> None:
        try:
            for task in item.tasks:
                await self.store.put_task(task)
            if item.steps or item.episodes:
                await self.store.append(item.steps, episodes=item.episodes)  # together or not at all
                self.committed_steps += len(item.steps)
        except DreamgymError as exc:  # our own errors are one line that says what to do: no traceback
            self._refused(str(exc))
            log.error("the store refused %d steps and %d episodes: %s", len(item.steps), len(item.episodes), exc)
        except Exception as exc:
            self._refused(f"{type(exc).__name__}: {exc}")
            log.exception("the store refused %d steps and %d episodes", len(item.steps), len(item.episodes))

    def _refused(self, why: str) -> None:
        self.failures += 1
        self.first_error = self.first_error or why
