"""The LMDB + usearch replay store: the source of truth for everything dreamgym produces.

Layout of the LMDB environment (a directory) and its named databases::

    steps       seq (uint64, big-endian)        -> Step record (MessagePack + CRC-32, format 2)
    episodes    episode_id                      -> Episode record
    tasks       task_id                         -> Task record
    by_episode  episode_id \\0 seq               -> b""     (per-episode scans)
    by_task     task_id \\0 seq                  -> b"r"|b"s" (per-task scans)
    vectors     seq                             -> VectorEntry (filter columns + float32 vector)
    meta        store_format, embedder, dim, embedded_upto, counters
    cache       experience-model call cache (the simulator's)

Sequence numbers start at 1 and only grow. Writes go through one writer task:
concurrent ``append`` calls are gathered into one group commit (a write
transaction that begins and commits inside one worker-thread call), and
``await append(...)`` returns after that commit. Readers, in this process or
others, read committed data at any time.

Embedding and indexing run behind ingest: an indexer reads committed steps,
embeds :func:`~dreamgym.replay.embedders.transition_text` of each, stores
the vectors in LMDB and adds them to the usearch index, which it saves
atomically with the highest sequence number it covers. Everything in the
index can be rebuilt from LMDB; :meth:`LmdbReplayStore.reindex` re-embeds
from scratch.

Durability: a crashed process loses nothing whose commit returned. With
``StoreConfig.sync=True`` (the default) neither does a power loss, as far as
the disk honours fsync; with ``sync=False`` a power loss can lose the last
commits. The derived index can always lag and is reconciled on open.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import lmdb
import numpy as np
import numpy.typing as npt

from dreamgym.core.errors import (
    ConfigError,
    EmbedderMismatchError,
    RecordFormatError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
)
from dreamgym.core.progress import progress
from dreamgym.core.protocols import Embedder, Neighbour
from dreamgym.core.types import SHADOW_SUFFIX, Episode, Record, Source, Step, Task, decode_record, encode_record
from dreamgym.replay._index import TransitionIndex
from dreamgym.replay._lmdb import LmdbEnv
from dreamgym.replay._vectors import SOURCE_CODE, VectorEntry, vector_decoder, vector_encoder
from dreamgym.replay._writer import Apply, GroupCommitWriter, SeqAlloc
from dreamgym.replay.config import StoreConfig
from dreamgym.replay.embedders import default_embedder, embedder_from_name, transition_text

__all__ = ["LmdbReplayStore", "StoreStats"]

log = logging.getLogger(__name__)

STORE_FORMAT = 2
"""Version of the layout above; bump it, with a migration, when it changes. 1: records as
MessagePack. 2: each step, episode and task record is its MessagePack followed by the CRC-32 of
it (4 bytes, big-endian), checked on every read (LMDB keeps no checksums of its own: bytes
overwritten in a record read back as plausible wrong data). A store keeps the format it was
created with; format-1 stores are read and written as they are."""

_SEALED_DBS = frozenset({"steps", "episodes", "tasks"})
"""The databases whose records carry a checksum from format 2 on."""

_SOURCE_BYTE = {"real": b"r", "synthetic": b"s"}


def _key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


Bytes = bytes | memoryview  # what lmdb's typing promises; with buffers=False it is bytes


def _seq(key: Bytes) -> int:
    return int.from_bytes(key[-8:], "big")


def _int(value: Bytes | None) -> int:
    return int(bytes(value)) if value else 0


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts and index state of a store."""

    steps: dict[str, int]
    episodes: int
    tasks: int
    last_seq: int
    embedded_upto: int
    vectors: int
    embedder: str
    dim: int
    map_size: int
    index_covered_upto: int
    unfinished_episodes: int = 0
    """Episodes with steps but no episode record: still running when their writer stopped, or
    written by ``append`` without their summary (a shadow episode, ``<id>/shadow``, has none by
    design and is not counted)."""
    empty_episodes: int = 0
    """Episode records without a step."""


class _UnavailableEmbedder:
    """Stands in, in a read-only store, for a recorded embedder that needs settings (an endpoint)."""

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise ConfigError(
            f"this store was indexed with {self.name!r}; open it with that embedder to search by text "
            "(searching by vector works without it)"
        )


class LmdbReplayStore:
    """A replay store in the directory ``path`` (created if missing).

    Use it as an async context manager, entered and exited in one task::

        async with LmdbReplayStore(path, embedder=HashingEmbedder()) as store:
            seqs = await store.append(steps)
            await store.flush()
            hits = await store.nearest(transition_text(task, action, state), k=5)

    Args:
        path: The store directory.
        embedder: Embeds transitions. ``None`` uses the embedder the store
            recorded, or for a new store :func:`default_embedder`.
        config: Storage and indexing settings.
        readonly: Open for reading only; any number of reader processes may
            run beside one writer process.

    Raises:
        EmbedderMismatchError: The store was indexed by another embedder.
        StoreLockedError: The store is already open in this process.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | None = None,
        config: StoreConfig | None = None,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self.config = config or StoreConfig()
        self.readonly = readonly
        self._embedder = embedder
        self._env: LmdbEnv | None = None
        self._closed = False
        self._next_seq = 1  # until the writer starts and owns it
        self._embedded_upto = 0
        self._sealed = True
        self._instructions: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            raise StoreClosedError("the store is not open; use `async with LmdbReplayStore(...)`")
        return self._embedder

    async def __aenter__(self) -> Self:
        self._env = await anyio.to_thread.run_sync(self._open_env)
        try:
            await anyio.to_thread.run_sync(self._init_meta)
            self._index = TransitionIndex(
                self.path,
                self.embedder.name,
                self.embedder.dim,
                self.config,
                self._stored_vectors,
                readonly=self.readonly,
            )
            if not self.readonly:
                await anyio.to_thread.run_sync(self._index.load)
        except BaseException:
            self._env.close()
            self._env = None
            raise
        if not self.readonly:
            self._writer = GroupCommitWriter(
                self._env,
                next_seq=self._next_seq,
                max_records=self.config.max_commit_records,
                buffer=self.config.request_buffer,
            )
            self._work = anyio.Event()
            self._index_lock = anyio.Lock()
            self._task_group = anyio.create_task_group()
            await self._task_group.__aenter__()
            self._task_group.start_soon(self._writer.run)
            self._task_group.start_soon(self._index_loop)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _open_env(self) -> LmdbEnv:
        return LmdbEnv(self.path, readonly=self.readonly, map_size=self.config.map_size, sync=self.config.sync)

    def _init_meta(self) -> None:
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> dict[str, Bytes | None]:
            keys = ("store_format", "embedder", "dim", "embedded_upto")
            out: dict[str, Bytes | None] = {k: txn.get(k.encode(), db=env.db("meta")) for k in keys}
            cursor = txn.cursor(db=env.db("steps"))
            out["last_key"] = cursor.key() if cursor.last() else None
            return out

        meta = env.read(read)
        store_format = _int(meta["store_format"])
        self._sealed = (store_format or STORE_FORMAT) >= 2
        if store_format > STORE_FORMAT:
            raise StoreError(
                f"the store at {self.path} has format {store_format}; this dreamgym reads up to "
                f"{STORE_FORMAT}: upgrade dreamgym"
            )
        recorded = bytes(meta["embedder"]).decode() if meta["embedder"] else None
        recorded_dim = _int(meta["dim"])
        if self._embedder is None:
            self._embedder = self._recorded_embedder(recorded, recorded_dim) if recorded else default_embedder()
        elif recorded and (recorded != self._embedder.name or recorded_dim != self._embedder.dim):
            raise EmbedderMismatchError(
                f"the store at {self.path} was indexed with {recorded!r} (dim {recorded_dim}), not "
                f"{self._embedder.name!r} (dim {self._embedder.dim}); open it with that embedder, or run "
                f"`dreamgym replay reindex {self.path} --embedder ...` to re-embed it"
            )
        self._next_seq = _seq(meta["last_key"]) + 1 if meta["last_key"] else 1
        self._embedded_upto = _int(meta["embedded_upto"])
        if not self.readonly and recorded is None:
            self._write_meta({"store_format": STORE_FORMAT, "embedder": self.embedder.name, "dim": self.embedder.dim})

    def _recorded_embedder(self, name: str, dim: int) -> Embedder:
        try:
            return embedder_from_name(name)
        except ConfigError:
            if not self.readonly:
                raise
            return _UnavailableEmbedder(name, dim)  # a reader can still count, read and search by vector

    def _write_meta(self, values: dict[str, Any]) -> None:
        env = self._require_env()

        def put(txn: lmdb.Transaction) -> None:
            for key, value in values.items():
                txn.put(key.encode(), str(value).encode(), db=env.db("meta"))

        env.write(put)

    async def aclose(self) -> None:
        """Commit what is queued, save the index, and close. Calling it again does nothing.

        Call it from the task that opened the store (``async with`` does).
        Indexing that has not caught up is not waited for (call :meth:`flush`
        first for that); the next open picks it up from LMDB.
        """
        if self._closed:
            return
        self._closed = True
        env = self._env
        if env is None:
            return
        if not self.readonly:
            with anyio.CancelScope(shield=True):
                async with self._index_lock:  # let the indexing batch in progress commit
                    await self._writer.aclose()  # commits what is queued, then exits
            self._task_group.cancel_scope.cancel()
            await self._task_group.__aexit__(None, None, None)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._index.save)
        env.close()

    def _require_env(self) -> LmdbEnv:
        if self._env is None:
            raise StoreClosedError("the store is not open; use `async with LmdbReplayStore(...)`")
        return self._env

    def _require_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the store at {self.path} is closed")
        if self.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only")
        self._require_env()

    # ------------------------------------------------------------------ writing

    async def append(self, steps: Sequence[Step], *, episodes: Sequence[Episode] = ()) -> list[int]:
        """Commit steps in order, and the summaries of the episodes they finish, in one transaction.

        Returns the steps' sequence numbers after the commit. An episode and its
        steps appended together are stored together or not at all: a process
        killed mid-commit leaves neither.
        """
        self._require_writable()
        if not steps and not episodes:
            return []
        encoded = [self._seal(encode_record(step)) for step in steps]
        summaries = [(episode.episode_id.encode(), self._seal(encode_record(episode))) for episode in episodes]
        for step in steps:
            _check_ids(step)
        env = self._require_env()

        def apply(txn: lmdb.Transaction, alloc: SeqAlloc) -> list[int]:
            counts = {"real": 0, "synthetic": 0}
            seqs = [_put_step(txn, env, alloc, step, data, counts) for step, data in zip(steps, encoded, strict=True)]
            _bump_counts(txn, env, counts)
            for key, data in summaries:
                txn.put(key, data, db=env.db("episodes"))
            if summaries:
                _fault_point("episode-commit")
            return seqs

        seqs: list[int] = await self._submit(apply, len(steps) + len(summaries))
        if self.config.auto_index:
            self._work.set()
        return seqs

    async def add_records(self, records: Callable[[], Iterable[Record]]) -> dict[str, int]:
        """Add tasks, steps and episodes in one transaction (all or nothing), skipping steps already stored.

        ``records()`` is iterated inside the write transaction (again, from the
        start, should the map grow mid-way), so an import streams a file of any
        size and still commits it whole. A step is already stored when its
        episode holds a step of the same ``step_index``: adding the same records
        twice, or after a partial earlier import, adds nothing twice. Tasks and
        episodes are put by id (the newer replaces the older).

        Returns counts: ``task``, ``step`` (added), ``episode``, ``skipped`` (steps already stored).

        Raises:
            RecordFormatError: A record is not a task, step or episode, or an id holds a NUL;
                nothing was committed.
        """
        self._require_writable()
        env = self._require_env()
        instructions: dict[str, str] = {}

        def apply(txn: lmdb.Transaction, alloc: SeqAlloc) -> dict[str, int]:
            found = {"task": 0, "step": 0, "episode": 0, "skipped": 0}
            counts = {"real": 0, "synthetic": 0}
            stored: dict[str, set[int]] = {}
            instructions.clear()
            for record in records():
                if isinstance(record, Task):
                    txn.put(record.task_id.encode(), self._seal(encode_record(record)), db=env.db("tasks"))
                    instructions[record.task_id] = record.instruction
                    found["task"] += 1
                elif isinstance(record, Episode):
                    txn.put(record.episode_id.encode(), self._seal(encode_record(record)), db=env.db("episodes"))
                    found["episode"] += 1
                elif isinstance(record, Step):
                    _check_ids(record)
                    indices = stored.get(record.episode_id)
                    if indices is None:
                        indices = stored[record.episode_id] = self._stored_indices(txn, record.episode_id)
                    if record.step_index in indices:
                        found["skipped"] += 1
                        continue
                    indices.add(record.step_index)
                    _put_step(txn, env, alloc, record, self._seal(encode_record(record)), counts)
                    found["step"] += 1
                else:
                    raise RecordFormatError(f"a {type(record).__name__} cannot be added to a store on its own")
            _bump_counts(txn, env, counts)
            return found

        found: dict[str, int] = await self._submit(apply, 1)
        self._instructions.update(instructions)
        if found["step"] and self.config.auto_index:
            self._work.set()
        return found

    @property
    def checksummed(self) -> bool:
        """Whether this store's records carry checksums (:data:`STORE_FORMAT` 2 on)."""
        return self._sealed

    def _seal(self, data: bytes) -> bytes:
        """A record as stored: with its checksum from store format 2 on."""
        return data + zlib.crc32(data).to_bytes(4, "big") if self._sealed else data

    def _unseal(self, data: Bytes, db: str, key: bytes) -> bytes:
        """A stored record's MessagePack, its checksum checked (format 2 on).

        Raises:
            StoreCorruptError: The record's bytes are not the ones written.
        """
        data = bytes(data)
        if not self._sealed:
            return data
        payload, checksum = data[:-4], data[-4:]
        if len(data) < 4 or zlib.crc32(payload).to_bytes(4, "big") != checksum:
            shown = str(_seq(key)) if db == "steps" else bytes(key).decode(errors="replace")
            raise StoreCorruptError(
                f"the {db} record {shown} of the store at {self.path} fails its checksum: the file is damaged "
                f"there; run `dreamgym replay check {self.path}`"
            )
        return payload

    def _stored_indices(self, txn: lmdb.Transaction, episode_id: str) -> set[int]:
        """The step indices an episode already has in the store."""
        env = self._require_env()
        prefix = episode_id.encode() + b"\0"
        steps = env.db("steps")
        indices: set[int] = set()
        cursor = txn.cursor(db=env.db("by_episode"))
        if cursor.set_range(prefix):
            for key in cursor.iternext(keys=True, values=False):
                if not bytes(key).startswith(prefix):
                    break
                data = txn.get(bytes(key)[-8:], db=steps)
                if data is not None:
                    indices.add(decode_record(self._unseal(data, "steps", bytes(key)[-8:]), Step).step_index)
        return indices

    async def put_task(self, task: Task) -> None:
        """Store (or replace) a task."""
        await self._put_keyed("tasks", task.task_id, self._seal(encode_record(task)))
        self._instructions[task.task_id] = task.instruction

    async def put_episode(self, episode: Episode) -> None:
        """Store (or replace) an episode summary."""
        await self._put_keyed("episodes", episode.episode_id, self._seal(encode_record(episode)))

    async def put_cached(self, key: bytes, value: bytes) -> None:
        """Store a model-call answer in the ``cache`` database (see ``dreamgym.simulator``)."""
        await self._put_keyed("cache", key, value)

    async def get_cached(self, key: bytes) -> bytes | None:
        """The model-call answer stored under ``key``, or ``None``."""
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> bytes | None:
            data = txn.get(key, db=env.db("cache"))
            return None if data is None else bytes(data)

        return await anyio.to_thread.run_sync(env.read, read)

    async def _put_keyed(self, db: str, key: str | bytes, data: bytes) -> None:
        self._require_writable()
        env = self._require_env()
        raw_key = key.encode() if isinstance(key, str) else key

        def apply(txn: lmdb.Transaction, alloc: SeqAlloc) -> None:
            txn.put(raw_key, data, db=env.db(db))

        await self._submit(apply, 1)

    async def _submit(self, apply: Apply, count: int) -> Any:
        return await self._writer.submit(apply, count)

    # ------------------------------------------------------------------ reading

    async def get_step(self, seq: int) -> Step:
        """The step with this sequence number.

        Raises:
            KeyError: No such step.
        """
        steps = await self.get_steps([seq])
        return steps[0]

    async def get_steps(self, seqs: Sequence[int]) -> list[Step]:
        """Steps by sequence number, in the given order; raises ``KeyError`` for a missing one."""
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> list[Step]:
            out = []
            for seq in seqs:
                data = txn.get(_key(seq), db=env.db("steps"))
                if data is None:
                    raise KeyError(f"no step with sequence number {seq}")
                out.append(decode_record(self._unseal(data, "steps", _key(seq)), Step))
            return out

        return await anyio.to_thread.run_sync(env.read, read)

    async def episode_steps(self, episode_id: str) -> list[Step]:
        """The steps of one episode, in commit order."""
        return await self.get_steps(await self.episode_seqs(episode_id))

    async def episode_seqs(self, episode_id: str) -> list[int]:
        return await self._prefix_seqs("by_episode", episode_id)

    async def task_seqs(self, task_id: str, *, source: Source | None = None) -> list[int]:
        """Sequence numbers of a task's steps, optionally of one source."""
        return await self._prefix_seqs("by_task", task_id, None if source is None else _SOURCE_BYTE[source])

    async def task_ids(self, *, source: Source | None = None) -> list[str]:
        """The distinct task ids of the stored steps (optionally of one source), sorted.

        Read from the task index: no step is decoded, and each task's run of
        keys is skipped once one of them matches.
        """
        env = self._require_env()
        wanted = None if source is None else _SOURCE_BYTE[source]

        def read(txn: lmdb.Transaction) -> list[str]:
            cursor = txn.cursor(db=env.db("by_task"))
            found: list[str] = []
            more = cursor.first()
            while more:
                key = bytes(cursor.key())
                task = key[: key.index(b"\0")]
                if wanted is None or cursor.value() == wanted:
                    found.append(task.decode())
                    more = cursor.set_range(task + b"\1")  # past every key of this task
                else:
                    more = cursor.next()
            return found

        return await anyio.to_thread.run_sync(env.read, read)

    async def _prefix_seqs(self, db: str, prefix_id: str, value: bytes | None = None) -> list[int]:
        env = self._require_env()
        prefix = prefix_id.encode() + b"\0"

        def read(txn: lmdb.Transaction) -> list[int]:
            cursor = txn.cursor(db=env.db(db))
            out: list[int] = []
            if not cursor.set_range(prefix):
                return out
            for key, stored in cursor:
                if not bytes(key).startswith(prefix):
                    break
                if value is None or stored == value:
                    out.append(_seq(key))
            return out

        return await anyio.to_thread.run_sync(env.read, read)

    async def get_episode(self, episode_id: str) -> Episode | None:
        episode: Episode | None = await self._get_keyed("episodes", episode_id, Episode)
        return episode

    async def get_task(self, task_id: str) -> Task | None:
        task: Task | None = await self._get_keyed("tasks", task_id, Task)
        return task

    async def _get_keyed(self, db: str, key: str, kind: Any) -> Any:
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> Any:
            data = txn.get(key.encode(), db=env.db(db))
            return None if data is None else decode_record(self._unseal(data, db, key.encode()), kind)

        return await anyio.to_thread.run_sync(env.read, read)

    def iter_records(self, db: str, *, start: int = 1, batch: int = 1000) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` of a database in key order, in short read transactions.

        Blocking: call it from a worker thread. ``start`` applies to ``steps``.
        """
        env = self._require_env()
        position = _key(start) if db in ("steps", "vectors") else b""
        while True:

            def read(txn: lmdb.Transaction, position: bytes = position) -> list[tuple[bytes, bytes]]:
                cursor = txn.cursor(db=env.db(db))
                if not cursor.set_range(position):
                    return []
                rows: list[tuple[bytes, bytes]] = list(itertools.islice(cursor, batch))  # type: ignore[arg-type]
                if db in _SEALED_DBS:
                    return [(key, self._unseal(value, db, key)) for key, value in rows]
                return rows

            rows = env.read(read)
            yield from rows
            if len(rows) < batch:
                return
            position = rows[-1][0] + b"\0"  # the smallest key after the last one read

    async def stats(self) -> StoreStats:
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> StoreStats:
            meta = env.db("meta")

            def get(key: str) -> int:
                return _int(txn.get(key.encode(), db=meta))

            cursor = txn.cursor(db=env.db("steps"))
            unfinished, empty = _episode_gaps(txn, env)
            return StoreStats(
                steps={"real": get("count/real"), "synthetic": get("count/synthetic")},
                episodes=txn.stat(env.db("episodes"))["entries"],
                tasks=txn.stat(env.db("tasks"))["entries"],
                last_seq=_seq(cursor.key()) if cursor.last() else 0,
                embedded_upto=get("embedded_upto"),
                vectors=txn.stat(env.db("vectors"))["entries"],
                embedder=self.embedder.name,
                dim=self.embedder.dim,
                map_size=env.map_size(),
                index_covered_upto=self._index.covered_upto,
                unfinished_episodes=unfinished,
                empty_episodes=empty,
            )

        return await anyio.to_thread.run_sync(env.read, read)

    async def embedded(self, seqs: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The stored embedding of each of ``seqs`` that has one (what :meth:`nearest` searches), by sequence number.

        A step is embedded from ``transition_text`` of its goal (or its task's
        instruction), action and page; a caller that needs that text's vector
        can take it from here instead of embedding it again.
        """
        env = self._require_env()

        def read(txn: lmdb.Transaction) -> dict[int, npt.NDArray[np.float32]]:
            found = {}
            for seq in seqs:
                data = txn.get(_key(seq), db=env.db("vectors"))
                if data is not None:
                    found[seq] = np.frombuffer(vector_decoder.decode(data).vector, dtype=np.float32)
            return found

        return await anyio.to_thread.run_sync(env.read, read)

    # ------------------------------------------------------------------ indexing

    def _stored_vectors(self, after: int) -> Iterator[tuple[int, VectorEntry]]:
        if "vectors" not in self._require_env().dbs:  # a reader of a store still being created
            return
        for key, value in self.iter_records("vectors", start=after + 1, batch=5000):
            yield _seq(key), vector_decoder.decode(value)

    async def _index_loop(self) -> None:
        if self.config.auto_index:
            self._work.set()  # catch up with what an earlier run committed but did not index
        while True:
            await self._work.wait()
            self._work = anyio.Event()
            if self._closed:
                return
            try:
                await self._index_pending()
            except Exception:
                log.exception("indexing %s failed; ingest goes on, flush() will retry", self.path)
                await anyio.sleep(1.0)

    async def flush(self) -> None:
        """Wait until every committed step is embedded and indexed, and save the index.

        Raises:
            BackendError: The embedder failed.
        """
        self._require_writable()
        await self._index_pending(report=True)
        async with self._index_lock:
            await anyio.to_thread.run_sync(self._index.save)

    async def _index_pending(self, *, report: bool = False) -> None:
        """Embed and index every committed step not yet embedded; ``report``: as a progress phase of steps."""
        async with self._index_lock:
            committed = self._writer.next_seq - 1 if self._writer is not None else self._next_seq - 1
            waiting = max(0, committed - self._embedded_upto)
            shown = report and waiting > 0
            with progress("embed and index steps", total=waiting, unit="steps") if shown else nullcontext() as phase:
                while not self._closed:
                    began = self._embedded_upto
                    if not await self._index_batch():
                        break
                    if phase is not None:
                        phase.advance(self._embedded_upto - began)
            await anyio.to_thread.run_sync(self._index.grow)

    async def _index_batch(self) -> bool:
        """Embed the next batch of committed steps; ``False`` when none were left."""
        env = self._require_env()
        upto = self._embedded_upto
        size = self.config.embed_batch_size
        rows = await anyio.to_thread.run_sync(
            lambda: list(itertools.islice(self.iter_records("steps", start=upto + 1, batch=size), size))
        )
        if not rows:
            return False
        scanned = _seq(rows[-1][0])
        steps = [(_seq(key), decode_record(value, Step)) for key, value in rows]
        chosen = [(seq, step) for seq, step in steps if step.source in self.config.index_sources]
        texts = [await self._transition_text(step) for _, step in chosen]
        vectors = await self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dim), np.float32)
        if vectors.shape != (len(texts), self.embedder.dim):
            raise ConfigError(f"{self.embedder.name} returned shape {vectors.shape} for {len(texts)} texts")
        entries = [
            (
                seq,
                VectorEntry(
                    SOURCE_CODE[step.source],
                    step.task_id,
                    step.site,
                    step.episode_id,
                    step.seed,
                    vectors[i].astype(np.float32).tobytes(),
                ),
            )
            for i, (seq, step) in enumerate(chosen)
        ]

        def apply(txn: lmdb.Transaction, alloc: SeqAlloc) -> None:
            for seq, entry in entries:
                txn.put(_key(seq), vector_encoder.encode(entry), db=env.db("vectors"))
            txn.put(b"embedded_upto", str(scanned).encode(), db=env.db("meta"))

        await self._submit(apply, len(entries) + 1)
        self._embedded_upto = scanned

        def extend() -> None:
            self._index.add(entries, vectors, scanned)
            self._index.grow()
            self._index.save(force=False)

        await anyio.to_thread.run_sync(extend)
        return True

    async def _transition_text(self, step: Step) -> str:
        if step.observation.goal:  # the episode's own goal (a MiniWoB utterance) says more than the task's
            return transition_text(step.observation.goal, str(step.action), step.observation.state)
        instruction = self._instructions.get(step.task_id)
        if instruction is None:
            task = await self.get_task(step.task_id)
            instruction = task.instruction if task else ""
            if task is None:
                log.warning("task %r is not in the store; its steps are embedded without an instruction", step.task_id)
            self._instructions[step.task_id] = instruction
        return transition_text(instruction, str(step.action), step.observation.state)

    async def reindex(self, embedder: Embedder | None = None) -> None:
        """Drop every vector and the index, then embed everything again (with ``embedder``)."""
        self._require_writable()
        env = self._require_env()
        async with self._index_lock:

            def clear(txn: lmdb.Transaction, alloc: SeqAlloc) -> None:
                txn.drop(env.db("vectors"), delete=False)
                txn.put(b"embedded_upto", b"0", db=env.db("meta"))
                new = embedder or self.embedder
                txn.put(b"embedder", new.name.encode(), db=env.db("meta"))
                txn.put(b"dim", str(new.dim).encode(), db=env.db("meta"))

            await self._submit(clear, 1)
            if embedder is not None:
                self._embedder = embedder
            self._embedded_upto = 0
            self._index.reset(self.embedder.name, self.embedder.dim)
        await self.flush()

    # ------------------------------------------------------------------ search

    async def nearest(
        self,
        query: str | npt.NDArray[np.float32],
        k: int,
        *,
        source: Source | None = None,
        task_id: str | None = None,
        site: str | None = None,
        exclude_episodes: Sequence[str] = (),
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> list[Neighbour]:
        """The ``k`` indexed steps most similar to ``query``, best first.

        ``query`` is text (embedded with the store's embedder; build it with
        :func:`transition_text`) or a vector. Steps whose embedding has not
        finished are not yet searchable (:meth:`flush` waits for them).
        Candidate sets up to ``exact_threshold`` are searched exactly, larger
        ones through the usearch index plus an exact scan of what it does not
        cover yet.
        """
        if k <= 0:
            return []
        if isinstance(query, str):
            vector = (await self.embedder.embed([query]))[0]
        else:
            vector = np.asarray(query, dtype=np.float32).reshape(-1)
            if vector.shape != (self.embedder.dim,):
                raise ConfigError(
                    f"query vector has shape {vector.shape}; the store's dimension is {self.embedder.dim}"
                )
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        filters = dict(
            source=source,
            task_id=task_id,
            site=site,
            exclude_episodes=tuple(exclude_episodes),
            exclude_task_seeds=tuple(exclude_task_seeds),
        )
        seqs, scores = await anyio.to_thread.run_sync(lambda: self._index.search(vector, k, filters))
        steps = await self.get_steps(seqs)
        return [Neighbour(seq=q, score=s, step=st) for q, s, st in zip(seqs, scores, steps, strict=True)]


def _check_ids(step: Step) -> None:
    if "\0" in step.episode_id or "\0" in step.task_id:
        raise RecordFormatError("task and episode ids must not contain NUL characters")


def _put_step(
    txn: lmdb.Transaction, env: LmdbEnv, alloc: SeqAlloc, step: Step, data: bytes, counts: dict[str, int]
) -> int:
    """Put one encoded step and its index keys under the next sequence number; count it by source."""
    seq = alloc.take()
    key = _key(seq)
    txn.put(key, data, db=env.db("steps"), append=True)
    txn.put(step.episode_id.encode() + b"\0" + key, b"", db=env.db("by_episode"))
    txn.put(step.task_id.encode() + b"\0" + key, _SOURCE_BYTE[step.source], db=env.db("by_task"))
    counts[step.source] += 1
    return seq


def _bump_counts(txn: lmdb.Transaction, env: LmdbEnv, counts: dict[str, int]) -> None:
    for source, n in counts.items():
        if n:
            _bump(txn, env, f"count/{source}", n)


def _episode_gaps(txn: lmdb.Transaction, env: LmdbEnv) -> tuple[int, int]:
    """(episodes with steps but no record, records without steps), from the keys alone."""
    with_steps: set[bytes] = set()
    for key in txn.cursor(db=env.db("by_episode")).iternext(keys=True, values=False):
        episode_id = bytes(key)[:-9]  # episode_id \0 8-byte seq
        if not episode_id.endswith(SHADOW_SUFFIX.encode()):
            with_steps.add(episode_id)
    recorded = {bytes(key) for key in txn.cursor(db=env.db("episodes")).iternext(keys=True, values=False)}
    return len(with_steps - recorded), len(recorded - with_steps)


_FAULT_HITS: dict[str, int] = {}


def _fault_point(name: str) -> None:
    """A test hook: with ``DREAMGYM_TEST_FAULT=kill:<name>@<n>`` in the environment the process
    SIGKILLs itself the ``n``-th time it gets here (``@<n>`` left out: the first), so a test stops a
    real writer at a chosen point, not at a chosen time. ``episode-commit`` is inside the write
    transaction of an episode's steps and record, before it commits. Unset, it costs one lookup."""
    fault = os.environ.get("DREAMGYM_TEST_FAULT", "")
    point, _, nth = fault.removeprefix("kill:").partition("@")
    if fault.startswith("kill:") and point == name:
        _FAULT_HITS[name] = _FAULT_HITS.get(name, 0) + 1
        if _FAULT_HITS[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def _bump(txn: lmdb.Transaction, env: LmdbEnv, key: str, n: int) -> None:
    meta = env.db("meta")
    txn.put(key.encode(), str(_int(txn.get(key.encode(), db=meta)) + n).encode(), db=meta)
