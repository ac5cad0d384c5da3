"""Rollout workers on Ray: real MiniWoB++ episodes in two actors into one store, one actor killed mid-run.

A Ray cluster started here (``ray.init(num_cpus=2)``, real worker processes,
not local mode); each actor opens its own Chromium and MiniWoB++ server. The
policy (the scripted demonstrator) and the store's writer stay in the test's
process.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
from helpers import dreamgym
from runtime_helpers import open_store

from dreamgym.bridge import MiniWobDemonstrator, miniwob_tasks
from dreamgym.core import ConfigError, Observation, PolicyDecision, Step, Task, outcome_reward
from dreamgym.jobs import open_browser_envs
from dreamgym.replay import LmdbReplayStore
from dreamgym.runtime import GroupSpec, RayWorkers, Runtime, RuntimeConfig, WorkerConfig

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


class KillsAWorker:
    """The demonstrator, which SIGKILLs worker 0's process before its ``kill_at``-th decision.

    Once the pool has begun replacing the dead worker, each decision waits for the replacement to be up: else, on
    a slow machine, the other worker can take every remaining group while the new one starts its browser, and
    nothing would show that the replacement serves episodes.
    """

    def __init__(self, workers: RayWorkers, kill_at: int) -> None:
        self.inner = MiniWobDemonstrator()
        self.policy_id = self.inner.policy_id
        self.workers = workers
        self.kill_at = kill_at
        self.decisions = 0
        self.killed = 0

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        self.decisions += 1
        if self.decisions == self.kill_at:
            self.killed = self.workers.pids[0]
            os.kill(self.killed, signal.SIGKILL)
        elif self.workers.replaced:
            with anyio.fail_after(120):
                while self.workers.pids[0] in (0, self.killed):
                    await anyio.sleep(0.05)
        return await self.inner.act(task, history, observation)


def _port(step: Step) -> int | None:
    return urlsplit(step.observation.url).port


async def test_two_workers_play_into_one_store_and_a_killed_one_is_replaced(cluster: None, tmp_path: Path) -> None:
    tasks = miniwob_tasks(["click-button", "enter-text", "click-checkboxes", "focus-text"], max_steps=8)
    groups = [GroupSpec(task=task, size=2, seed=seed, source="real") for task in tasks for seed in range(4)]
    envs = functools.partial(open_browser_envs, (), 1)
    async with (
        open_store(tmp_path / "store") as store,
        RayWorkers(envs, WorkerConfig(workers=2, cpus=0.5)) as workers,
    ):
        first_pids = list(workers.pids)
        assert len(set(first_pids)) == 2 and os.getpid() not in first_pids
        policy = KillsAWorker(workers, kill_at=12)
        runtime = Runtime(policy=policy, store=store, config=RuntimeConfig(real_concurrency=4), real_env=workers.env)
        async with runtime:
            results = await runtime.run_groups(groups)
        assert policy.killed == first_pids[0]
        assert workers.replaced == 1
        assert workers.pids[1] == first_pids[1] and workers.pids[0] not in (0, first_pids[0])

        rollouts = [rollout for result in results for rollout in result.rollouts]
        assert len(rollouts) == 2 * len(groups)
        lost = [r for r in rollouts if r.episode.cut_reason == "worker_lost"]
        assert lost, "the kill ended no episode"
        for rollout in lost:
            assert outcome_reward(rollout.episode) is None and "WorkerLostError" in rollout.episode.error
            if rollout.steps:
                assert rollout.steps[-1].truncation_reason == "worker_lost"
        # the run went on: every other episode finished, and the demonstrator solved it
        others = [r for r in rollouts if r not in lost]
        assert others and all(r.episode.success for r in others)
        # no acknowledged step is lost: the store holds every episode exactly as the runtime returned it
        for rollout in rollouts:
            stored = await store.episode_steps(rollout.episode.episode_id)
            assert [s.step_index for s in stored] == [s.step_index for s in rollout.steps]
            assert [s.action for s in stored] == [s.action for s in rollout.steps]
        # steps came from both workers and from the replacement (each serves its pages on its own port)
        ports = {_port(step) for rollout in rollouts for step in rollout.steps}
        assert len(ports) == 3
        # a group's episodes run on one worker, so they start alike unless a loss split them
        for result in results:
            if not any(r.episode.cut_reason for r in result.rollouts):
                assert result.consistent
                assert len({_port(r.steps[0]) for r in result.rollouts}) == 1


async def test_an_error_inside_a_worker_is_raised_as_itself_and_ends_only_its_episode(
    cluster: None, tmp_path: Path
) -> None:
    [good] = miniwob_tasks(["click-button"], max_steps=4)
    unknown = Task(task_id="nowhere/x", instruction="x", site="nowhere", benchmark="nowhere", max_steps=2)
    async with (
        open_store(tmp_path / "store") as store,
        RayWorkers(functools.partial(open_browser_envs, (), 1), WorkerConfig(workers=1)) as workers,
    ):
        runtime = Runtime(policy=MiniWobDemonstrator(), store=store, real_env=workers.env)
        async with runtime:
            bad_group, good_group = await runtime.run_groups(
                [
                    GroupSpec(task=unknown, size=1, seed=0, source="real"),
                    GroupSpec(task=good, size=1, seed=0, source="real"),
                ]
            )
        [bad] = bad_group.episodes
        assert bad.cut_reason == "error" and bad.error.startswith("ConfigError: no site runs benchmark 'nowhere'")
        assert good_group.rewards == (1.0,)
        assert workers.replaced == 0


def test_worker_settings_are_checked() -> None:
    for bad in ({"workers": 0}, {"cpus": 0}, {"max_replacements": -1}):
        with pytest.raises(ConfigError):
            WorkerConfig(**bad)  # type: ignore[arg-type]


def test_collect_with_workers_stores_every_episode_from_the_workers(tmp_path: Path) -> None:
    store = tmp_path / "store"
    out = dreamgym("collect", "--store", str(store), "--tasks", "click-button,enter-text", "--seeds", "0-2",
                   "--workers", "2", "--concurrency", "2")  # fmt: skip
    assert "6 groups, 6 episodes; real: 6/6 episodes succeeded" in out.stdout
    assert "real episodes run on 2 Ray rollout workers" in " ".join(out.stderr.split())  # rich may wrap it

    async def stored() -> tuple[int, set[int | None]]:
        async with LmdbReplayStore(store, readonly=True) as opened:
            seqs = [seq for task in ("click-button", "enter-text") for seq in await opened.task_seqs(f"miniwob/{task}")]
            steps = await opened.get_steps(seqs)
            return len({step.episode_id for step in steps}), {_port(step) for step in steps}

    count, ports = anyio.run(stored)
    assert count == 6 and len(ports) == 2  # both workers served pages, each from its own MiniWoB++ server


def test_worker_flags_are_checked_before_anything_opens(tmp_path: Path) -> None:
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--ray-address", "auto", check=False)
    assert result.returncode == 2 and "--ray-address runs real episodes on a Ray cluster" in result.stderr
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--workers", "-1", check=False)
    assert result.returncode == 2 and "--workers must be >= 0" in result.stderr
    assert not (tmp_path / "s").exists()
    # an address where no cluster listens is one line at once, not Ray retrying it for minutes
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--workers", "1", "--ray-address", "127.0.0.1:1",
                      "--tasks", "click-test", "--seeds", "0", check=False, timeout=60)  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("dreamgym: error: no Ray cluster answers at 127.0.0.1:1: ")
