"""``dreamgym replay check`` on real LMDB files with bytes overwritten: a branch page, a leaf header, a
record's payload; and what the other commands do on such a store (one line, no partial file)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import anyio
import lmdb
import pytest
from helpers import dreamgym, make_step

from dreamgym.core import Episode, StoreCorruptError
from dreamgym.replay import HashingEmbedder, LmdbReplayStore

pytestmark = pytest.mark.timeout(300)

P_BRANCH, P_LEAF = 0x01, 0x02


def _marker(n: int) -> str:
    return f"payload-marker-{n:05d}-" + "x" * 200


def _compact_store(tmp_path: Path) -> Path:
    """A store of 300 steps in 30 episodes, copied compacted (no free pages: every page is live)."""
    built, store = tmp_path / "built", tmp_path / "store"

    async def fill() -> None:
        async with LmdbReplayStore(built, embedder=HashingEmbedder(16)) as opened:
            for e in range(30):
                steps = [make_step(i, episode_id=f"ep-{e}", state=_marker(e * 10 + i)) for i in range(10)]
                episode = Episode(episode_id=f"ep-{e}", task_id="task-a", source="real", num_steps=10)
                await opened.append(steps, episodes=[episode])
            await opened.flush()

    anyio.run(fill)
    store.mkdir()
    env = lmdb.open(str(built), max_dbs=16, readonly=True, lock=False)
    env.copy(str(store), compact=True)
    env.close()
    return store


def _pages(store: Path) -> list[tuple[int, int]]:
    """(page number, flags) of every page of data.mdb but the two meta pages."""
    data = (store / "data.mdb").read_bytes()
    size = 4096
    return [(n, struct.unpack_from("<H", data, n * size + 10)[0]) for n in range(2, len(data) // size)]


def _overwrite(store: Path, offset: int, data: bytes) -> None:
    with (store / "data.mdb").open("r+b") as file:
        file.seek(offset)
        file.write(data)


def test_a_healthy_store_checks_clean(tmp_path: Path) -> None:
    store = _compact_store(tmp_path)
    done = dreamgym("replay", "check", str(store), "--json")
    report = json.loads(done.stdout)
    assert report["problems"] == [] and report["checksummed"]
    assert report["records"]["steps"] == 300 and report["records"]["episodes"] == 30
    assert "no damage found" in dreamgym("replay", "check", str(store)).stdout


def test_bytes_over_a_records_payload_fail_its_checksum(tmp_path: Path) -> None:
    """Plausible wrong data: the record still decodes (a letter of its state changed); only the checksum sees it."""
    store = _compact_store(tmp_path)
    offset = (store / "data.mdb").read_bytes().index(_marker(123).encode())
    _overwrite(store, offset, b"PAYLOAD")
    done = dreamgym("replay", "check", str(store), check=False)
    assert done.returncode == 1
    assert "steps record 124" in done.stderr and "fails its checksum" in done.stderr

    async def read() -> None:
        async with LmdbReplayStore(store, readonly=True) as opened:
            assert (await opened.get_step(1)).observation.state == _marker(0)
            with pytest.raises(StoreCorruptError, match="steps record 124 .* fails its checksum"):
                await opened.get_step(124)

    anyio.run(read)
    exported = dreamgym("replay", "export", str(store), "-o", str(tmp_path / "out.jsonl"), check=False)
    assert exported.returncode == 1 and len(exported.stderr.strip().splitlines()) == 1
    assert "replay check" in exported.stderr
    assert not list(tmp_path.glob("out.jsonl*"))  # no partial file


@pytest.mark.parametrize("kind", ["branch", "leaf header"])
def test_bytes_over_a_page_are_reported_damage(tmp_path: Path, kind: str) -> None:
    store = _compact_store(tmp_path)
    pages = _pages(store)
    wanted = P_BRANCH if kind == "branch" else P_LEAF
    number = next(n for n, flags in pages if flags & wanted)
    if kind == "branch":  # its end, where its nodes (child page numbers and keys) live
        _overwrite(store, number * 4096 + 4096 - 1024, bytes(range(256)) * 4)
    else:  # its header: page number, flags, free-space bounds
        _overwrite(store, number * 4096, b"\xa5" * 16)
    done = dreamgym("replay", "check", str(store), check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "damaged:" in done.stderr and "the store is damaged" in done.stderr
    stats = dreamgym("replay", "stats", str(store), check=False)  # counts alone would look healthy
    assert stats.returncode == 1, stats.stdout + stats.stderr
    assert len(stats.stderr.strip().splitlines()) == 1, stats.stderr
    assert "is damaged" in stats.stderr and "replay check" in stats.stderr
    assert "Traceback" not in stats.stderr


def test_replay_stats_of_a_healthy_store_walks_its_pages_and_reports_its_counts(tmp_path: Path) -> None:
    store = _compact_store(tmp_path)
    stats = json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)
    assert stats["steps"] == {"real": 300, "synthetic": 0}
    assert stats["episodes"] == 30


def test_an_older_store_without_checksums_is_read_and_checked_as_it_is(tmp_path: Path) -> None:
    store = _compact_store(tmp_path)
    env = lmdb.open(str(store), max_dbs=16)
    with env.begin(write=True) as txn:  # a format-1 store: records without their checksums
        steps, episodes = env.open_db(b"steps", txn=txn), env.open_db(b"episodes", txn=txn)
        for db in (steps, episodes):
            for key, value in list(txn.cursor(db=db)):
                txn.put(key, value[:-4], db=db)
        txn.put(b"store_format", b"1", db=env.open_db(b"meta", txn=txn))
    env.close()
    report = json.loads(dreamgym("replay", "check", str(store), "--json").stdout)
    assert report["problems"] == [] and not report["checksummed"]

    async def read() -> None:
        async with LmdbReplayStore(store, readonly=True) as opened:
            assert (await opened.get_step(124)).observation.state == _marker(123)

    anyio.run(read)


def test_a_collect_into_a_damaged_store_ends_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    """The writer's refusal crosses the runtime's task groups; the command line still says it in one line."""
    store = _compact_store(tmp_path)
    number = next(n for n, flags in _pages(store) if flags & P_BRANCH)
    _overwrite(store, number * 4096 + 4096 - 1024, bytes(range(256)) * 4)
    done = dreamgym("collect", "--tasks", "click-test", "--seeds", "0", "--store", str(store), check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("dreamgym: error:")]
    assert len(errors) == 1, done.stderr
    assert "is damaged" in errors[0] and "replay check" in errors[0]
