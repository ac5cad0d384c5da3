from __future__ import annotations

import os
import subprocess
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import lmdb
import msgspec
import numpy as np
import pytest
from helpers import make_step

from dreamgym.core import (
    BackendError,
    ConfigError,
    Embedder,
    EmbedderMismatchError,
    Episode,
    ReplayStore,
    SchemaVersionError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    Task,
    encode_record,
)
from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig, transition_text
from dreamgym.replay._lmdb import LmdbEnv

pytestmark = pytest.mark.anyio

EMBEDDER = HashingEmbedder(64)


def store_at(path: Path, **config: object) -> LmdbReplayStore:
    return LmdbReplayStore(path, embedder=EMBEDDER, config=StoreConfig(**config))  # type: ignore[arg-type]


async def test_task_ids_come_from_the_task_index_by_source(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        await store.append([make_step(i, episode_id="ep-a") for i in range(3)])
        await store.append([make_step(0, episode_id="ep-b", source="synthetic", task_id="task-b")])
        await store.append([make_step(0, episode_id="ep-c", task_id="task-ab"), make_step(0, episode_id="ep-d",
                            task_id="task-b")])  # fmt: skip
        assert await store.task_ids() == ["task-a", "task-ab", "task-b"]  # one task id a prefix of another
        assert await store.task_ids(source="real") == ["task-a", "task-ab", "task-b"]  # task-b's real step is last
        assert await store.task_ids(source="synthetic") == ["task-b"]


async def test_appended_steps_come_back_by_seq_episode_and_task(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        first = await store.append([make_step(i, episode_id="ep-a") for i in range(3)])
        second = await store.append([make_step(0, episode_id="ep-b", source="synthetic", task_id="task-b")])
        assert first == [1, 2, 3] and second == [4]
        assert await store.get_step(2) == make_step(1, episode_id="ep-a")
        assert [s.step_index for s in await store.episode_steps("ep-a")] == [0, 1, 2]
        assert await store.task_seqs("task-a") == [1, 2, 3]
        assert await store.task_seqs("task-b", source="real") == []
        assert await store.task_seqs("task-b", source="synthetic") == [4]
        with pytest.raises(KeyError):
            await store.get_step(99)
        task = Task(task_id="task-a", instruction="click it")
        episode = Episode(episode_id="ep-a", task_id="task-a", source="real", num_steps=3)
        await store.put_task(task)
        await store.put_episode(episode)
        assert await store.get_task("task-a") == task
        assert await store.get_episode("ep-a") == episode
        stats = await store.stats()
        assert stats.steps == {"real": 3, "synthetic": 1}
        assert (stats.episodes, stats.tasks, stats.last_seq) == (1, 1, 4)
    async with store_at(tmp_path) as store:  # sequence numbers continue after reopening
        assert await store.append([make_step(9)]) == [5]


async def test_concurrent_appends_share_group_commits_and_lose_nothing(tmp_path: Path) -> None:
    results: dict[int, list[int]] = {}
    async with store_at(tmp_path, auto_index=False) as store:

        async def writer(w: int) -> None:
            seqs = []
            for i in range(20):
                seqs += await store.append([make_step(i, episode_id=f"ep-{w}")])
            results[w] = seqs

        async with anyio.create_task_group() as tg:
            for w in range(10):
                tg.start_soon(writer, w)
        all_seqs = sorted(s for seqs in results.values() for s in seqs)
        assert all_seqs == list(range(1, 201))
        for w, seqs in results.items():
            assert seqs == sorted(seqs)
            assert [s.episode_id for s in await store.get_steps(seqs)] == [f"ep-{w}"] * 20


async def test_nearest_returns_the_most_similar_transitions(tmp_path: Path) -> None:
    pages = ["shopping cart checkout", "forum post comment upvote", "login username password", "map route directions"]
    async with store_at(tmp_path) as store:
        await store.put_task(Task(task_id="task-a", instruction="do the thing"))
        steps = [make_step(i, state=f"text: {pages[i % 4]} {i}", episode_id=f"ep-{i}") for i in range(40)]
        await store.append(steps)
        await store.flush()
        query = transition_text("do the thing", "click [e1]", "text: login username password 2")
        hits = await store.nearest(query, 5)
        assert hits[0].step == steps[2] and hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert all("login" in h.step.observation.state for h in hits[:5])
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        by_vector = await store.nearest(EMBEDDER.embed_sync([query])[0], 5)
        assert [h.seq for h in by_vector] == [h.seq for h in hits]


def _exact(vectors: dict[int, np.ndarray], query: np.ndarray, k: int, keep: set[int]) -> list[tuple[int, float]]:
    scored = sorted(((-float(v @ query), seq) for seq, v in vectors.items() if seq in keep))
    return [(seq, -score) for score, seq in scored[:k]]


@pytest.mark.parametrize("exact_threshold", [20_000, 100], ids=["exact", "with-usearch"])
async def test_filtered_nearest_equals_exact_search(tmp_path: Path, exact_threshold: int) -> None:
    async with store_at(tmp_path, exact_threshold=exact_threshold, index_sources=("real", "synthetic")) as store:
        await store.put_task(Task(task_id="task-0", instruction="same"))
        steps = [
            make_step(
                i,
                source="synthetic" if i % 5 == 0 else "real",
                task_id=f"task-{i % 3}",
                site=f"site-{i % 2}",
                episode_id=f"ep-{i % 7}",
                seed=i % 4,
                state=f"text: item {i % 13} of page {i % 11}",
            )
            for i in range(300)
        ]
        seqs = await store.append(steps)
        await store.flush()
        texts = {
            seq: transition_text("same" if s.task_id == "task-0" else "", str(s.action), s.observation.state)
            for seq, s in zip(seqs, steps, strict=True)
        }
        vectors = dict(zip(texts, EMBEDDER.embed_sync(list(texts.values())), strict=True))
        query = EMBEDDER.embed_sync(["text: item 4 of page 2"])[0]
        cases = [
            ({"source": "real"}, lambda s: s.source == "real"),
            ({"task_id": "task-1"}, lambda s: s.task_id == "task-1"),
            ({"site": "site-0"}, lambda s: s.site == "site-0"),
            ({"exclude_episodes": ["ep-1", "ep-2"]}, lambda s: s.episode_id not in ("ep-1", "ep-2")),
            (
                {"exclude_task_seeds": [("task-0", 0), ("task-2", 3)]},
                lambda s: (s.task_id, s.seed) not in (("task-0", 0), ("task-2", 3)),
            ),
            (
                {"task_id": "task-2", "source": "synthetic", "site": "site-1"},
                lambda s: (s.task_id, s.source, s.site) == ("task-2", "synthetic", "site-1"),
            ),
            ({"task_id": "no-such-task"}, lambda s: False),
        ]
        for filters, predicate in cases:
            keep = {seq for seq, s in zip(seqs, steps, strict=True) if predicate(s)}
            hits = await store.nearest(query, 8, **filters)  # type: ignore[arg-type]
            assert all(predicate(h.step) for h in hits), filters
            expected = _exact(vectors, query, 8, keep)
            for hit in hits:  # reported scores are true cosine similarities
                assert hit.score == pytest.approx(float(vectors[hit.seq] @ query), abs=1e-5)
            if exact_threshold > len(keep):  # exact: the same top-k (ties may come in either order)
                assert [h.score for h in hits] == pytest.approx([score for _, score in expected], abs=1e-5), filters
            else:  # approximate: most of the true neighbours, never a filtered-out one
                assert len({h.seq for h in hits} & {seq for seq, _ in expected}) >= 6, filters
        if exact_threshold == 100:
            assert (tmp_path / "index.usearch").exists()
            assert (await store.stats()).index_covered_upto == 300


async def test_only_real_steps_are_indexed_by_default(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        await store.append([make_step(0), make_step(1, source="synthetic", episode_id="s")])
        await store.flush()
        stats = await store.stats()
        assert (stats.vectors, stats.embedded_upto) == (1, 2)
        assert [h.seq for h in await store.nearest("anything", 5)] == [1]


async def test_a_tiny_map_grows_without_losing_a_record(tmp_path: Path) -> None:
    async with store_at(tmp_path, map_size=1 << 16) as store:
        steps = [make_step(i, state="text: " + "x" * 2000 + str(i)) for i in range(400)]
        for start in range(0, 400, 50):
            await store.append(steps[start : start + 50])
        await store.flush()
        stats = await store.stats()
        assert stats.map_size > 1 << 16
        assert await store.get_steps(list(range(1, 401))) == steps
        assert stats.vectors == 400


async def test_opening_a_store_twice_in_one_process_is_refused(tmp_path: Path) -> None:
    async with store_at(tmp_path):
        with pytest.raises(StoreLockedError, match="already open in this process"):
            async with store_at(tmp_path):
                pass
    async with store_at(tmp_path):  # closing releases it
        pass


async def test_a_closed_or_read_only_store_refuses_writes(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    async with store:
        await store.append([make_step(0)])
    with pytest.raises(StoreClosedError):
        await store.append([make_step(1)])
    await store.aclose()  # idempotent
    async with LmdbReplayStore(tmp_path, readonly=True) as reader:
        with pytest.raises(StoreError, match="read-only"):
            await reader.append([make_step(1)])
        assert (await reader.stats()).steps["real"] == 1


async def test_an_unknown_schema_version_is_one_clear_error(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        await store.append([make_step(0)])
    env = lmdb.open(str(tmp_path), max_dbs=16)
    raw = msgspec.msgpack.decode(encode_record(make_step(1)))
    raw["schema_version"] = 99
    with env.begin(write=True) as txn:
        data = msgspec.msgpack.encode(raw)  # sealed as the store writes it (format 2), so only the version is odd
        txn.put((2).to_bytes(8, "big"), data + zlib.crc32(data).to_bytes(4, "big"), db=env.open_db(b"steps", txn=txn))
    env.close()
    async with store_at(tmp_path) as store:
        assert (await store.get_step(1)).step_index == 0
        with pytest.raises(SchemaVersionError, match="schema version 99"):
            await store.get_step(2)


async def test_reopening_with_another_embedder_is_refused_until_reindexed(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        await store.append([make_step(i) for i in range(5)])
        await store.flush()
    with pytest.raises(EmbedderMismatchError, match="hashing-64.*reindex"):
        async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(32)):
            pass
    async with LmdbReplayStore(tmp_path) as store:  # no embedder given: the recorded one
        assert store.embedder.name == "hashing-64"
        await store.reindex(HashingEmbedder(32))
        stats = await store.stats()
        assert (stats.embedder, stats.dim, stats.vectors) == ("hashing-32", 32, 5)
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(32)) as store:
        assert len(await store.nearest("button 3", 2)) == 2


async def test_a_lost_or_corrupt_index_is_rebuilt_on_open(tmp_path: Path) -> None:
    async with store_at(tmp_path, exact_threshold=10) as store:
        await store.append([make_step(i) for i in range(50)])
        await store.flush()
        before = [h.seq for h in await store.nearest("button 7", 5)]
    (tmp_path / "index.usearch").write_bytes(b"not an index")
    async with store_at(tmp_path, exact_threshold=10) as store:
        assert [h.seq for h in await store.nearest("button 7", 5)] == before
        assert (await store.stats()).index_covered_upto == 50
    (tmp_path / "index.usearch").unlink()
    (tmp_path / "index.json").unlink()
    async with store_at(tmp_path, exact_threshold=10) as store:
        assert [h.seq for h in await store.nearest("button 7", 5)] == before


class BrokenEmbedder:
    name = "hashing-64"
    dim = 64

    def __init__(self) -> None:
        self.fail = True

    async def embed(self, texts: list[str]) -> np.ndarray:
        if self.fail:
            raise BackendError("embedding server is down")
        return await EMBEDDER.embed(texts)


async def test_a_failing_embedder_never_blocks_ingest(tmp_path: Path) -> None:
    embedder = BrokenEmbedder()
    async with LmdbReplayStore(tmp_path, embedder=embedder) as store:
        await store.append([make_step(i) for i in range(10)])
        with pytest.raises(BackendError, match="down"):
            await store.flush()
        assert (await store.stats()).steps["real"] == 10
        embedder.fail = False
        await store.flush()
        assert (await store.stats()).vectors == 10


async def test_cancelled_appenders_leave_committed_steps_intact(tmp_path: Path) -> None:
    async with store_at(tmp_path, auto_index=False) as store:
        committed: list[int] = []

        async def cancel_after_some(scope: anyio.CancelScope) -> None:
            while len(committed) < 5:  # by count, not by time: a slow machine still commits some first
                await anyio.sleep(0.001)
            scope.cancel()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_after_some, tasks.cancel_scope)
                while True:
                    committed += await store.append([make_step(len(committed))])
        assert len(committed) >= 5
        stats = await store.stats()
        assert stats.last_seq >= len(committed)
        assert [s.step_index for s in await store.get_steps(committed)] == list(range(len(committed)))


class CustomEmbedder:
    """An embedder a store cannot rebuild from its name alone (like an HTTP endpoint)."""

    name = "custom:endpoint"
    dim = 64

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await EMBEDDER.embed(texts)


async def test_a_reader_needs_no_embedder_to_count_read_and_search_by_vector(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path, embedder=CustomEmbedder()) as store:
        assert await store.append([]) == []
        await store.append([make_step(i) for i in range(4)])
        await store.flush()
    async with LmdbReplayStore(tmp_path, readonly=True) as reader:
        assert (await reader.stats()).embedder == "custom:endpoint"
        query = EMBEDDER.embed_sync([transition_text("", "click [e1]", make_step(2).observation.state)])[0]
        assert (await reader.nearest(query, 1))[0].seq == 3
        with pytest.raises(ConfigError, match="open it with that embedder"):
            await reader.nearest("text needs the embedder", 1)
    with pytest.raises(ConfigError, match="pass that embedder explicitly"):
        async with LmdbReplayStore(tmp_path):
            pass


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root, as on CI machines); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


async def test_a_full_disk_fails_the_write_and_keeps_every_commit(tiny_disk: Path) -> None:
    committed: list[int] = []
    async with store_at(tiny_disk / "store", map_size=1 << 16, auto_index=False) as store:
        with pytest.raises(StoreFullError, match="free space and retry"):
            for i in range(2000):
                committed += await store.append([make_step(i, state="text: " + "x" * 3000)])
        assert committed
        assert (await store.stats()).last_seq == len(committed)  # the failed write committed nothing
        assert [s.step_index for s in await store.get_steps(committed)] == list(range(len(committed)))
    async with store_at(tiny_disk / "store") as store:  # and the store reopens intact
        assert (await store.stats()).last_seq == len(committed)


def test_a_forked_child_cannot_use_the_parents_environment(tmp_path: Path) -> None:
    env = LmdbEnv(tmp_path, readonly=False, map_size=1 << 20, sync=False)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: exactly what is refused
        pid = os.fork()
    if pid == 0:  # the child: must be refused, never touch the parent's LMDB handle
        try:
            env.read(lambda txn: None)
            os.write(write_end, b"used")
        except StoreError:
            os.write(write_end, b"refused")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read_end, 16) == b"refused"
    os.close(read_end)
    os.close(write_end)
    env.close()


async def test_the_store_and_embedders_implement_the_core_protocols(tmp_path: Path) -> None:
    async with store_at(tmp_path) as store:
        assert isinstance(store, ReplayStore)
    assert isinstance(EMBEDDER, Embedder)
    assert isinstance(CustomEmbedder(), Embedder)
