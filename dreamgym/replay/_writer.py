"""The store's single writer: concurrent write requests become group commits.

Each round takes every request waiting (up to ``max_records`` records) and
applies them all in one write transaction that begins and commits inside one
worker-thread call. A request's ``await submit(...)`` returns after that
commit, or raises why nothing was committed. Closing stops new requests and
drains the queued ones before the writer exits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import lmdb
from anyio.streams.memory import MemoryObjectReceiveStream

from dreamgym.core.errors import StoreClosedError
from dreamgym.replay._lmdb import LmdbEnv


class SeqAlloc:
    """Hands out sequence numbers inside one transaction attempt."""

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self) -> int:
        seq, self.next = self.next, self.next + 1
        return seq


Apply = Callable[[lmdb.Transaction, SeqAlloc], Any]
"""Writes one request's records; may run again if the transaction is retried."""


@dataclass
class _Request:
    apply: Apply
    count: int
    done: anyio.Event
    result: Any = None
    error: BaseException | None = None


class GroupCommitWriter:
    """Run :meth:`run` in a task; call :meth:`submit` from any task of the same loop."""

    def __init__(self, env: LmdbEnv, *, next_seq: int, max_records: int, buffer: int) -> None:
        self._env = env
        self._next_seq = next_seq
        self._max_records = max_records
        self._send, self._receive = anyio.create_memory_object_stream[_Request](buffer)
        self._finished = anyio.Event()

    @property
    def next_seq(self) -> int:
        """The sequence number the next committed record gets (every one below it is committed)."""
        return self._next_seq

    async def submit(self, apply: Apply, count: int) -> Any:
        """Queue a request and wait for its commit; returns what ``apply`` returned.

        Raises:
            StoreClosedError: The writer is closed.
            StoreError: The commit failed; nothing of this round was committed.
        """
        request = _Request(apply, count, anyio.Event())
        try:
            await self._send.send(request)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise StoreClosedError(f"the store at {self._env.path} is closed") from exc
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    async def run(self) -> None:
        try:
            await self._serve(self._receive)
        finally:
            self._finished.set()

    async def _serve(self, receive: MemoryObjectReceiveStream[_Request]) -> None:
        async with receive:
            async for first in receive:
                batch, count = [first], first.count
                while count < self._max_records:
                    try:
                        request = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    batch.append(request)
                    count += request.count
                await self._commit(batch)

    async def _commit(self, batch: list[_Request]) -> None:
        def run(txn: lmdb.Transaction) -> tuple[int, list[Any]]:
            alloc = SeqAlloc(self._next_seq)
            results = [request.apply(txn, alloc) for request in batch]
            return alloc.next, results

        try:
            with anyio.CancelScope(shield=True):  # a commit in flight always finishes and reports
                self._next_seq, results = await anyio.to_thread.run_sync(self._env.write, run)
        except Exception as exc:  # every waiting request learns why; nothing was committed
            for request in batch:
                request.error = exc
        else:
            for request, result in zip(batch, results, strict=True):
                request.result = result
        for request in batch:
            request.done.set()

    async def aclose(self) -> None:
        """Refuse new requests, commit the queued ones, and wait for the writer to finish."""
        await self._send.aclose()
        await self._finished.wait()
