"""The blocking portal: synchronous callers drive one runtime, in one event loop, across calls."""

from __future__ import annotations

import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from runtime_helpers import TASK, Counts, ToyBackend, ToyFormEnv, ToyPolicy, open_store, simulator

from dreamgym.runtime import GroupResult, GroupSpec, Runtime, RuntimeConfig, RuntimePortal


def test_a_plain_thread_drives_one_runtime_twice_in_the_same_loop(tmp_path: Path) -> None:
    counts = Counts()
    built: list[int] = []
    backend = ToyBackend()

    @asynccontextmanager
    async def build() -> AsyncIterator[Runtime]:
        built.append(1)
        async with open_store(tmp_path / "store") as store:
            runtime = Runtime(
                policy=ToyPolicy(),
                store=store,
                config=RuntimeConfig(real_concurrency=2),
                real_env=lambda: ToyFormEnv(counts),
                synthetic_env=lambda: simulator(backend, store),
            )
            async with runtime:
                yield runtime

    results: list[list[GroupResult]] = []
    runtimes: list[Runtime] = []
    failures: list[BaseException] = []

    def trainer() -> None:  # what TRL's synchronous rollout hook does
        try:
            with RuntimePortal(build) as portal:
                for seed in (0, 1):
                    groups = [
                        GroupSpec(task=TASK, size=2, seed=seed, source=source) for source in ("real", "synthetic")
                    ]
                    results.append(portal.run_groups(groups))
                    runtimes.append(portal.runtime)
                stats = portal.call(portal.runtime.store.stats)
                assert stats.steps == {"real": 8, "synthetic": 8}
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=trainer)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and not failures, failures
    assert len(built) == 1 and runtimes[0] is runtimes[1]
    assert len(counts.loops) == 1  # every reset ran on the portal's one loop
    assert counts.made == 2 and counts.resets == 4  # the two browser-like envs were reused, not rebuilt
    assert [[group.source for group in call] for call in results] == [["real", "synthetic"]] * 2
    assert all(group.consistent and group.rewards == (1.0, 1.0) for call in results for group in call)


def test_the_portal_is_closed_after_its_block(tmp_path: Path) -> None:
    @asynccontextmanager
    async def build() -> AsyncIterator[Runtime]:
        async with (
            open_store(tmp_path / "store") as store,
            Runtime(policy=ToyPolicy(), store=store, real_env=ToyFormEnv) as runtime,
        ):
            yield runtime

    portal = RuntimePortal(build)
    with portal:
        [group] = portal.run_groups([GroupSpec(task=TASK, seed=3)])
        assert group.rewards == (1.0,)
    portal.close()  # again: nothing happens
    try:
        portal.run_groups([GroupSpec(task=TASK, seed=3)])
    except Exception as exc:
        assert "not open" in str(exc)
    else:
        raise AssertionError("a closed portal ran groups")
    anyio.run(_reopen_and_count, tmp_path / "store")


async def _reopen_and_count(path: Path) -> None:
    async with open_store(path) as store:
        assert (await store.stats()).steps["real"] == 2


class Interrupted(Exception):
    """What the test's signal handler raises in the main thread, as Ctrl-C raises KeyboardInterrupt."""


def test_an_interrupted_call_stops_the_run_with_its_finished_steps_committed(tmp_path: Path) -> None:
    counts = Counts()

    @asynccontextmanager
    async def build() -> AsyncIterator[Runtime]:
        async with (
            open_store(tmp_path / "store") as store,
            Runtime(
                policy=ToyPolicy(scrolls=100),
                store=store,
                config=RuntimeConfig(real_concurrency=2),
                real_env=lambda: ToyFormEnv(counts, delay_s=0.02),
            ) as runtime,
        ):
            yield runtime

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    main = threading.get_ident()
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGUSR1))
    try:
        with RuntimePortal(build) as portal:
            timer.start()
            with pytest.raises(Interrupted):
                portal.run_groups([GroupSpec(task=TASK, size=2, seed=n, source="real") for n in range(4)])
            snapshot = portal.snapshot()
            stats = portal.call(portal.runtime.store.stats)
            assert snapshot.errors == {"cancelled": 2} and snapshot.in_flight == 0
            assert stats.steps["real"] == counts.finished_steps > 0 and stats.episodes == 2
            [group] = portal.run_groups([GroupSpec(task=TASK, size=1, seed=9, source="real")])  # still usable
            assert group.rollouts[0].episode.truncation_reason == "step_limit"
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
