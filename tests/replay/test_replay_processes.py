"""The store across processes: readers beside a writer, and a writer killed mid-ingest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from helpers import make_step

from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig, transition_text

pytestmark = pytest.mark.anyio

TESTS = str(Path(__file__).resolve().parents[1])

READER = textwrap.dedent(
    """
    import sys, anyio
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.replay import transition_text

    async def main(path):
        async with LmdbReplayStore(path, readonly=True) as store:
            for line in sys.stdin:
                target = int(line)
                while (stats := await store.stats()).last_seq < target:
                    await anyio.sleep(0.01)
                query = transition_text("", "click [e1]", '[e1] button "Button 7"\\n[e2] textbox "Name": value 7')
                hits = await store.nearest(query, 3)
                step = await store.get_step(target)
                print(stats.last_seq, step.step_index, hits[0].seq if hits else 0, flush=True)

    anyio.run(main, sys.argv[1])
    """
)


async def test_a_reader_process_sees_the_writers_commits_as_they_land(tmp_path: Path) -> None:
    config = StoreConfig(map_size=1 << 16, exact_threshold=20, index_save_every=10)
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(64), config=config) as store:
        await store.append([make_step(i) for i in range(10)])
        async with await anyio.open_process([sys.executable, "-c", READER, str(tmp_path)]) as reader:
            assert reader.stdin is not None and reader.stdout is not None
            lines = reader.stdout

            async def ask(target: int) -> list[int]:
                await reader.stdin.send(f"{target}\n".encode())  # type: ignore[union-attr]
                with anyio.fail_after(60):
                    data = b""
                    while not data.endswith(b"\n"):
                        data += await lines.receive()
                return [int(x) for x in data.split()]

            last, index, _ = await ask(10)
            assert (last, index) == (10, 9)
            # the writer grows its tiny map while the reader holds the environment open
            for start in range(10, 400, 30):
                await store.append([make_step(i, state=None) for i in range(start, start + 30)])
            await store.flush()
            last, index, top = await ask(400)
            assert (last, index) == (420 - 20, 399)
            assert top == 8  # step 7 (seq 8) is the exact twin of the query, found via the index view or scan
            await reader.stdin.aclose()  # type: ignore[union-attr]
        assert reader.returncode == 0


WRITER = textwrap.dedent(
    """
    import sys, anyio
    sys.path.insert(0, sys.argv[2])
    from helpers import make_step
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig

    async def main(path):
        config = StoreConfig(exact_threshold=50, index_save_every=40, embed_batch_size=16)
        async with LmdbReplayStore(path, embedder=HashingEmbedder(64), config=config) as store:
            i = 0
            while True:
                seqs = await store.append([make_step(i + j, episode_id=f"ep-{(i + j) // 50}") for j in range(25)])
                print(seqs[0], seqs[-1], flush=True)
                i += 25

    anyio.run(main, sys.argv[1])
    """
)


async def test_a_writer_killed_mid_ingest_loses_no_committed_step(tmp_path: Path) -> None:
    committed: list[tuple[int, int]] = []
    command = [sys.executable, "-c", WRITER, str(tmp_path), TESTS]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            committed.append(tuple(int(x) for x in line.split()))  # type: ignore[arg-type]
            if len(committed) == 60:
                break
        os.kill(child.pid, signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL
    last_committed = committed[-1][1]
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(64), config=StoreConfig(exact_threshold=50)) as store:
        stats = await store.stats()
        assert stats.last_seq >= last_committed
        steps = await store.get_steps(list(range(1, last_committed + 1)))
        assert steps == [make_step(i, episode_id=f"ep-{i // 50}") for i in range(last_committed)]
        await store.flush()  # reconciles the index with everything LMDB holds
        stats = await store.stats()
        assert stats.vectors == stats.embedded_upto == stats.index_covered_upto == stats.last_seq
        query = transition_text("", "click [e1]", make_step(123).observation.state)
        assert (await store.nearest(query, 1))[0].seq == 124


async def test_the_hashing_embedder_is_the_same_in_every_process() -> None:
    code = "from dreamgym.replay import HashingEmbedder; print(HashingEmbedder(16).embed_sync(['a b c'])[0].tolist())"
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert output.stdout.strip() == str(HashingEmbedder(16).embed_sync(["a b c"])[0].tolist())


OPENER = textwrap.dedent(
    """
    import sys, anyio
    from dreamgym.core.errors import StoreLockedError
    from dreamgym.replay import LmdbReplayStore

    async def main(path, readonly):
        try:
            async with LmdbReplayStore(path, readonly=readonly == "ro") as store:
                print("opened", (await store.stats()).last_seq, flush=True)
        except StoreLockedError as exc:
            print("refused", exc, flush=True)

    anyio.run(main, sys.argv[1], sys.argv[2])
    """
)


def _open_elsewhere(path: Path, mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", OPENER, str(path), mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_a_second_writer_process_is_refused_naming_the_holder_and_readers_are_not(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(64)) as store:
        await store.append([make_step(i) for i in range(5)])
        refused = await anyio.to_thread.run_sync(_open_elsewhere, tmp_path, "rw")
        assert refused.startswith("refused") and f"process {os.getpid()}" in refused
        assert await anyio.to_thread.run_sync(_open_elsewhere, tmp_path, "ro") == "opened 5"  # readers keep working
        await store.append([make_step(i) for i in range(5, 8)])  # the holder is unharmed
    assert await anyio.to_thread.run_sync(_open_elsewhere, tmp_path, "rw") == "opened 8"  # released at close


async def test_a_killed_writer_leaves_no_lock_behind(tmp_path: Path) -> None:
    command = [sys.executable, "-c", WRITER, str(tmp_path), TESTS]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        child.stdout.readline()  # it holds the store and has committed
        assert _open_elsewhere(tmp_path, "rw").startswith("refused")
        os.kill(child.pid, signal.SIGKILL)
    assert _open_elsewhere(tmp_path, "rw").startswith("opened")


@pytest.mark.parametrize("make", ["file", "unwritable"])
async def test_a_store_path_that_cannot_be_a_store_is_one_clear_error(tmp_path: Path, make: str) -> None:
    from dreamgym.core.errors import StoreError

    if make == "file":
        path = tmp_path / "store"
        path.write_text("not a store")
        expected = "is a file, not a store directory"
    else:
        parent = tmp_path / "locked"
        parent.mkdir(mode=0o500)
        # root writes through any permission bits, but not into /proc
        path = Path("/proc/dreamgym-test/store") if os.geteuid() == 0 else parent / "store"
        expected = "cannot open the store .* for writing"
    with pytest.raises(StoreError, match=expected):
        async with LmdbReplayStore(path):
            pass
