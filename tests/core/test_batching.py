"""ThreadBatcher: concurrent requests gathered into worker-thread batches."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import anyio
import pytest

from dreamgym.core import ConfigError, ThreadBatcher

pytestmark = pytest.mark.anyio


@dataclass(eq=False)
class Job:
    value: int
    result: int = 0
    done: bool = False


class Doubler:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.threads: set[int] = set()

    def run(self, batch: list[Job]) -> None:
        self.sizes.append(len(batch))
        self.threads.add(threading.get_ident())
        for job in batch:
            job.result, job.done = 2 * job.value, True


async def submit_all(batcher: ThreadBatcher[Job], jobs: list[Job]) -> None:
    async with anyio.create_task_group() as group:
        for job in jobs:
            group.start_soon(batcher.submit, job)


async def test_concurrent_requests_share_batches_in_a_worker_thread() -> None:
    model = Doubler()
    batcher = ThreadBatcher(model.run, max_batch=8, window_s=0.02)
    jobs = [Job(n) for n in range(8)]
    await submit_all(batcher, jobs)
    assert [j.result for j in jobs] == [2 * n for n in range(8)]
    assert model.sizes == [8] and threading.get_ident() not in model.threads


async def test_requests_beyond_one_batch_lead_the_next_ones() -> None:
    model = Doubler()
    batcher = ThreadBatcher(model.run, max_batch=2, window_s=0.01)
    jobs = [Job(n) for n in range(7)]
    await submit_all(batcher, jobs)
    assert all(j.done for j in jobs) and sum(model.sizes) == 7 and max(model.sizes) <= 2
    assert batcher.batches == len(model.sizes) and batcher.waiting == 0


async def test_a_cancelled_waiter_is_removed_and_the_rest_are_served() -> None:
    model = Doubler()
    batcher = ThreadBatcher(model.run, max_batch=4, window_s=0.05)
    with anyio.move_on_after(0.01):
        await batcher.submit(Job(99))
    assert batcher.waiting == 0
    jobs = [Job(n) for n in range(3)]
    await submit_all(batcher, jobs)
    assert all(j.done for j in jobs) and 99 * 2 not in [j.result for j in jobs]


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        ThreadBatcher(Doubler().run, max_batch=0, window_s=0.01)
