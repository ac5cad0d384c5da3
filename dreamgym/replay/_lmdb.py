"""One LMDB environment: named databases, map growth, resize-safe transactions.

One writer per store, across processes: a writable open takes an exclusive
``flock`` on ``writer.lock`` in the store's directory (the holder's pid
written in it) and keeps it until closed; a second writer is refused at open
with :class:`~dreamgym.core.errors.StoreLockedError` naming the holder. The
kernel drops the lock when the holder dies, even by SIGKILL. Readers
(``readonly``) take no lock and keep working beside the writer.

The map is large and sparse. A write that fills it (``MapFullError`` aborts the
whole transaction) grows the map under an exclusive lock and is retried from
the start, so no record is ever dropped. Readers in other processes see the
new size as ``MapResizedError`` and adopt it before retrying.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import lmdb

from dreamgym.core.errors import StoreCorruptError, StoreError, StoreFullError, StoreLockedError, StorePathError

T = TypeVar("T")

log = logging.getLogger(__name__)

DATABASES = ("meta", "steps", "episodes", "tasks", "by_episode", "by_task", "vectors", "cache")
"""Named databases. ``cache`` holds experience-model calls (simulator issue)."""

_open_paths: set[Path] = set()
_open_paths_lock = threading.Lock()


class _SharedExclusiveLock:
    """Many holders in shared mode, or one in exclusive mode (to resize the map)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._shared:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class LmdbEnv:
    """An open LMDB environment at ``path`` (a directory), once per process."""

    def __init__(self, path: Path, *, readonly: bool, map_size: int, sync: bool) -> None:
        self.path = path.resolve()
        self.readonly = readonly
        self.pid = os.getpid()
        with _open_paths_lock:
            if self.path in _open_paths:
                raise StoreLockedError(
                    f"the store at {self.path} is already open in this process; share that instance "
                    "(LMDB forbids opening one environment twice in a process)"
                )
            _open_paths.add(self.path)
        self._writer_fd: int | None = None
        try:
            if not readonly:
                self._writer_fd = _take_writer_lock(self.path)
            self.env = self._open(readonly=readonly, map_size=map_size, sync=sync)
            self.dbs = {
                name: self.env.open_db(name.encode(), create=not readonly)
                for name in DATABASES
                if not readonly or self._has_db(name)
            }
        except BaseException:
            self._release_path()
            raise
        self._lock = _SharedExclusiveLock()

    def _open(self, *, readonly: bool, map_size: int, sync: bool) -> lmdb.Environment:
        if readonly and not (self.path / "data.mdb").exists():
            raise StorePathError(f"no store at {self.path} (data.mdb is missing)")
        lock = not (readonly and _read_only_files(self.path))
        if not lock:
            log.debug("%s: its files are read-only, so no process writes to it; reading without LMDB's lock file",
                     self.path)  # fmt: skip
        try:
            return lmdb.open(
                str(self.path),
                lock=lock,
                # A reader maps what the writer recorded and follows its growth
                # through MapResizedError; asking for more would only hide that path.
                map_size=1 << 16 if readonly else map_size,
                max_dbs=len(DATABASES) + 4,
                readonly=readonly,
                sync=sync,
                metasync=sync,
                readahead=False,
                max_readers=512,
            )
        except lmdb.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc

    def _has_db(self, name: str) -> bool:
        with self.env.begin() as txn:
            return txn.get(name.encode()) is not None

    def db(self, name: str) -> lmdb._Database:
        if name not in self.dbs:
            # A reader opened before the writer created this database.
            raise StoreError(f"the store at {self.path} has no {name!r} database yet")
        return self.dbs[name]

    def check_process(self) -> None:
        if os.getpid() != self.pid:
            raise StoreError(
                f"the store at {self.path} was opened in process {self.pid}; "
                "a forked child must open the store itself, never reuse the parent's handle"
            )

    def read(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in a read transaction, adopting a map grown by another process."""
        self.check_process()
        while True:
            try:
                with self._lock.shared(), self.env.begin(buffers=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._adopt_map_size()
            except _CORRUPTION as exc:
                raise self._corrupt(exc) from exc

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in one write transaction and commit it, growing the map as needed.

        ``fn`` may run more than once (after a grow); it must not have effects
        outside the transaction.

        Raises:
            StoreFullError: The disk is full; nothing was committed.
            StoreError: LMDB failed otherwise; nothing was committed.
        """
        self.check_process()
        while True:
            try:
                with self._lock.shared(), self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.MapResizedError:
                self._adopt_map_size()
            except _CORRUPTION as exc:
                raise self._corrupt(exc) from exc
            except lmdb.Error as exc:
                if self._disk_is_full(exc):
                    raise StoreFullError(
                        f"the disk holding {self.path} is full ({shutil.disk_usage(self.path).free} bytes free); "
                        "free space and retry: nothing of this write was committed"
                    ) from exc
                raise StoreError(f"write to the store at {self.path} failed: {exc}") from exc

    def _corrupt(self, exc: lmdb.Error) -> StoreCorruptError:
        return StoreCorruptError(
            f"the store at {self.path} is damaged ({exc}); run `dreamgym replay check {self.path}` to see where"
        )

    def _disk_is_full(self, exc: lmdb.Error) -> bool:
        return _disk_full(self.path, exc)

    def map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def _grow(self) -> None:
        with self._lock.exclusive():
            size = self.map_size()
            self.env.set_mapsize(size * 2)

    def _adopt_map_size(self) -> None:
        with self._lock.exclusive():
            self.env.set_mapsize(0)

    def close(self) -> None:
        self.env.close()
        self._release_path()

    def _release_path(self) -> None:
        if self._writer_fd is not None:
            os.close(self._writer_fd)  # closing the descriptor drops the flock
            self._writer_fd = None
        with _open_paths_lock:
            _open_paths.discard(self.path)


WRITER_LOCK = "writer.lock"


_CORRUPTION = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError)
"""What LMDB raises on damaged pages (a broken branch, a leaf header, a page number past the file)."""


def _read_only_files(path: Path) -> bool:
    """Whether this process cannot write the store's lock file (a read-only copy, a read-only mount):
    LMDB's readers need to, unless they open without it, which is safe when nothing can write."""
    lock = path / "lock.mdb"
    return not os.access(lock if lock.exists() else path, os.W_OK)


def _take_writer_lock(path: Path) -> int:
    """Create the store's directory if needed and hold its writer lock; the locked descriptor.

    Raises:
        StoreLockedError: Another process holds the store open for writing.
        StoreError: The directory cannot be made or written (a file in its place, no permission).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except FileExistsError as exc:
        raise StorePathError(f"the store path {path} is a file, not a store directory") from exc
    except OSError as exc:
        raise StorePathError(f"cannot open the store at {path} for writing: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreLockedError(
            f"the store at {path} is open for writing in process {holder}; one writer at a time "
            "(open it with readonly=True to read beside it, or wait for that process to finish)"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            os.close(fd)
            raise StoreError(f"cannot lock the store at {path} for writing: {exc.strerror or exc}") from exc
        log.warning("the filesystem holding %s has no file locks: nothing stops a second writer process", path)
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


FULL_DISK_BYTES = 64 << 20
"""LMDB reports a failed page write as EIO, without saying why. A write error on
a filesystem with less free space than this is reported as a full disk."""


def _disk_full(path: Path, exc: lmdb.Error) -> bool:
    if getattr(exc, "errno", None) == errno.ENOSPC:
        return True
    try:
        return shutil.disk_usage(path).free < FULL_DISK_BYTES
    except OSError:
        return False
