"""``dreamgym replay check``: walk every page and record of a store and say what is damaged.

LMDB checks a page's header when it reads the page, but keeps no checksum of
what a record holds: bytes overwritten in a record read back as plausible
wrong data. From store format 2 on each step, episode and task record carries
a CRC-32 (see :data:`~dreamgym.replay.store.STORE_FORMAT`), so the walk
finds those too. What the walk checks:

- every named database, read end to end in one read transaction (every
  branch, leaf and overflow page a key or value lives on);
- every step, episode and task record: its checksum (format 2 on) and that it
  decodes; every vector entry decodes;
- the indexes against the steps: each ``by_episode`` and ``by_task`` key names
  a stored step of that episode or task (and source), and each step has both;
- the counters (``count/real``, ``count/synthetic``) against the steps, and
  the embedded-up-to mark against the last step.

Damage is a *problem* (the command exits 1). Episodes with steps but no
record, or a record but no steps, are *notes*: a store written by an older
dreamgym, or by ``append`` alone, has them without being damaged.

A damaged branch page can crash the reading process outright; the command
line runs the walk in a child process (``python -m dreamgym.replay._check``)
and reports a crash as damage.

``pages_only`` is the quick walk ``replay stats`` runs before it reports
counts: every database's keys end to end (so every branch and leaf page LMDB
checks), the step count against the counters, no record read or decoded. It
finds damaged pages, not damaged payloads; ``replay check`` finds both.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CheckReport", "check_store", "check_store_isolated"]

_SHOWN = 20
"""Problems listed per kind; the rest are counted."""


@dataclass(slots=True)
class CheckReport:
    """What a walk of a store found."""

    path: str
    problems: list[str] = field(default_factory=list)
    """Damage: each entry names the database and the record or page."""
    notes: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    """Entries read per database."""
    checksummed: bool = False
    """Whether the store's records carry checksums (format 2 on)."""

    @property
    def ok(self) -> bool:
        return not self.problems


async def check_store(path: str | Path, *, pages_only: bool = False) -> CheckReport:
    """Walk the store at ``path`` in this process (read-only); see the module docstring."""
    import anyio

    from dreamgym.core.errors import StoreError
    from dreamgym.replay.store import LmdbReplayStore

    report = CheckReport(path=str(path))
    if not (Path(path) / "data.mdb").is_file():
        report.problems.append(f"no store at {path}")
        return report
    try:
        async with LmdbReplayStore(Path(path), readonly=True) as store:
            report.checksummed = store.checksummed
            await anyio.to_thread.run_sync(_walk, report, store, pages_only)
    except StoreError as exc:
        report.problems.append(f"the store does not open: {exc}")
    return report


def _walk(report: CheckReport, store: Any, pages_only: bool = False) -> None:
    walk = _Walk(report, store._require_env(), store)
    if pages_only:
        walk.pages()
    else:
        walk.run()


def check_store_isolated(path: str | Path, *, pages_only: bool = False, timeout_s: float = 3600) -> CheckReport:
    """:func:`check_store` in a child process (blocking), so that a page damaged badly enough to crash
    the reader is reported as damage instead of taking the caller down."""
    done = subprocess.run(
        [sys.executable, "-m", "dreamgym.replay._check", str(path), *(["--pages"] if pages_only else [])],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode == 0 and done.stdout.strip():
        return CheckReport(**json.loads(done.stdout))
    report = CheckReport(path=str(path))
    if done.returncode < 0:
        report.problems.append(
            f"reading the store crashed the reader (signal {-done.returncode}): its pages are damaged"
        )
    else:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        report.problems.append(f"the check could not run: {tail[0]}")
    return report


class _Walk:
    def __init__(self, report: CheckReport, env: Any, store: Any) -> None:
        self.report, self.env, self.store = report, env, store
        self.unreadable: set[str] = set()
        """Databases LMDB could not read to the end (their cross-checks are left out)."""
        self.steps: dict[int, tuple[str, str, str]] = {}
        """seq -> (episode_id, task_id, source) of every step that decoded."""
        self.shown: Counter[str] = Counter()

    def problem(self, kind: str, text: str) -> None:
        self.shown[kind] += 1
        if self.shown[kind] <= _SHOWN:
            self.report.problems.append(text)

    def entries(self, db: str, *, values: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of ``db``, in a read transaction of its own (LMDB invalidates a transaction
        that met a damaged page); LMDB's own damage becomes a problem and ends the database. Without
        ``values`` only the keys are read (every branch and leaf page, no overflow page) and each value is
        ``b""``."""
        import lmdb

        count = 0
        try:
            if not self.env._has_db(db):
                return
            with self.env.env.begin(buffers=False) as txn:
                cursor = txn.cursor(db=self.env.db(db))
                rows = iter(cursor) if values else ((key, b"") for key in cursor.iternext(keys=True, values=False))
                for key, value in rows:
                    count += 1
                    yield bytes(key), bytes(value)
        except lmdb.Error as exc:
            self.unreadable.add(db)
            self.problem(f"lmdb:{db}", f"{db}: LMDB cannot read past entry {count}: {exc}")
        finally:
            self.report.records[db] = count

    def run(self) -> None:
        from dreamgym.core.types import Episode, Step, Task, decode_record

        for key, value in self.entries("steps"):
            seq = int.from_bytes(key[-8:], "big")
            step = self.record("steps", seq, key, value, lambda data: decode_record(data, Step))
            if step is not None:
                self.steps[seq] = (step.episode_id, step.task_id, step.source)
        recorded: set[str] = set()
        for key, value in self.entries("episodes"):
            if self.record("episodes", key.decode(errors="replace"), key, value, lambda d: decode_record(d, Episode)):
                recorded.add(key.decode(errors="replace"))
        for key, value in self.entries("tasks"):
            self.record("tasks", key.decode(errors="replace"), key, value, lambda data: decode_record(data, Task))
        self.indexes()
        self.vectors_and_meta()
        for _ in self.entries("cache"):  # the model-call cache: read through, every page of it
            pass
        for kind, n in sorted(self.shown.items()):
            if n > _SHOWN:
                self.report.problems.append(f"... and {n - _SHOWN} more problems of {kind} like those above")
        if {"steps", "episodes"} & self.unreadable:
            return
        with_steps = {episode for episode, _, _ in self.steps.values() if not episode.endswith("/shadow")}
        if unfinished := len(with_steps - recorded):
            self.report.notes.append(f"{unfinished} episodes have steps but no episode record (unfinished)")
        if empty := len(recorded - with_steps):
            self.report.notes.append(f"{empty} episode records have no steps")

    def pages(self) -> None:
        """Every database's keys end to end, values left unread; then the step count against the counters."""
        from dreamgym.replay._lmdb import DATABASES

        for db in DATABASES:
            for _ in self.entries(db, values=False):
                pass
        if {"steps", "meta"} & self.unreadable:
            return
        with self.env.env.begin(buffers=False) as txn:
            meta = self.env.db("meta")
            stored = [txn.get(f"count/{source}".encode(), db=meta) or b"0" for source in ("real", "synthetic")]
        if not all(value.isdigit() for value in stored) or sum(map(int, stored)) != self.report.records["steps"]:
            self.problem("meta", f"meta: the counters say {b'+'.join(stored).decode(errors='replace')} steps, "
                                 f"the store holds {self.report.records['steps']}")  # fmt: skip

    def record(self, db: str, name: object, key: bytes, value: bytes, decode: Callable[[bytes], Any]) -> Any:
        from dreamgym.core.errors import DreamgymError

        try:
            return decode(self.store._unseal(value, db, key))
        except DreamgymError as exc:
            self.problem(db, f"{db} record {name}: {exc}")
        except Exception as exc:  # a damaged payload can fail to decode in any way
            self.problem(db, f"{db} record {name} does not decode: {type(exc).__name__}: {exc}")
        return None

    def indexes(self) -> None:
        for db, position in (("by_episode", 0), ("by_task", 1)):
            seen: set[int] = set()
            for key, value in self.entries(db):
                owner, seq = key[:-9].decode(errors="replace"), int.from_bytes(key[-8:], "big")
                seen.add(seq)
                step = self.steps.get(seq)
                if step is None:
                    self.problem(db, f"{db}: {owner!r} lists step {seq}, which is not a readable step")
                elif step[position] != owner:
                    self.problem(db, f"{db}: {owner!r} lists step {seq}, which belongs to {step[position]!r}")
                elif db == "by_task" and value != {"real": b"r", "synthetic": b"s"}[step[2]]:
                    self.problem(db, f"{db}: step {seq} is filed under the wrong source")
            if db in self.unreadable or "steps" in self.unreadable:
                continue
            if missing := sorted(set(self.steps) - seen):
                self.problem(db, f"{db}: {len(missing)} steps are missing from it (first: {missing[0]})")

    def vectors_and_meta(self) -> None:
        from dreamgym.replay._vectors import vector_decoder

        last = max(self.steps, default=0)
        for key, value in self.entries("vectors"):
            seq = int.from_bytes(key[-8:], "big")
            try:
                vector_decoder.decode(value)
            except Exception as exc:
                self.problem("vectors", f"vectors: the entry of step {seq} does not decode: {exc}")
        meta = dict(self.entries("meta"))
        if "meta" in self.unreadable or "steps" in self.unreadable:
            return
        counts = Counter(source for _, _, source in self.steps.values())
        for source in ("real", "synthetic"):
            stored = meta.get(f"count/{source}".encode(), b"0")
            if not stored.isdigit() or int(stored) != counts[source]:
                self.problem("meta", f"meta: count/{source} says {stored!r}, the store holds {counts[source]}")
        upto = meta.get(b"embedded_upto", b"0")
        if not upto.isdigit() or int(upto) > max(last, self.report.records.get("steps", 0)):
            self.problem("meta", f"meta: embedded_upto {upto!r} is past the last step ({last})")


def _main() -> int:
    import anyio

    report = anyio.run(functools.partial(check_store, sys.argv[1], pages_only="--pages" in sys.argv[2:]))
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
