"""Real groups in real Chromium: a deterministic site gives consistent groups, a drifting one is flagged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import open_store

from dreamgym.agents import RandomExplorer
from dreamgym.bridge import Allowlist, BrowserEnv, BrowserPool, MiniWobDemonstrator, MiniWobSite
from dreamgym.core import Task
from dreamgym.runtime import GroupSpec, Runtime, RuntimeConfig

pytestmark = pytest.mark.anyio

CHANGING = Task(task_id="changing/visit", instruction="Press Done.", site="changing", benchmark="changing", max_steps=2)


class ChangingSite:
    """A site whose first page counts its resets, like a live site whose state episodes leave behind."""

    name = "changing"

    def __init__(self) -> None:
        self.resets = 0

    def allowlist(self, task: Task) -> Allowlist:
        return Allowlist.of([])

    def context_options(self, task: Task) -> dict[str, Any]:
        return {}

    def capture_root(self, task: Task) -> str | None:
        return None

    def can_reuse(self, page: Any, task: Task) -> bool:
        return True

    async def start(self, page: Any, task: Task, seed: int | None) -> str:
        self.resets += 1
        await page.set_content(f"<p>Visit number {self.resets}</p><button>Done</button>")
        return ""

    async def outcome(self, page: Any, task: Task) -> tuple[float, bool]:
        return 0.0, False

    async def evaluate(self, page: Any, task: Task, answer: str) -> float:
        return 0.0

    async def aclose(self) -> None:
        pass


async def test_a_group_on_a_deterministic_site_starts_alike(
    tmp_path: Path, pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    task = miniwob.task("click-button", max_steps=4)
    async with open_store(tmp_path / "store") as store:
        runtime = Runtime(
            policy=MiniWobDemonstrator(),
            store=store,
            config=RuntimeConfig(real_concurrency=2),
            real_env=lambda: BrowserEnv(pool, sites=[miniwob]),
        )
        async with runtime:
            [group] = await runtime.run_groups([GroupSpec(task=task, size=2, seed=11, source="real")])
        assert group.consistent and group.rewards == (1.0, 1.0)
        first = {rollout.episode.initial_observation_hash for rollout in group.rollouts}
        assert len(first) == 1 and "" not in first
        assert (await store.stats()).steps["real"] == sum(r.episode.num_steps for r in group.rollouts)


async def test_a_site_whose_first_page_drifts_is_flagged_unless_the_reset_hook_restores_it(
    tmp_path: Path, pool: BrowserPool
) -> None:
    site = ChangingSite()

    async def restore(task: Task) -> None:
        site.resets = 0

    async with open_store(tmp_path / "store") as store:
        for hook, expected in ((None, False), (restore, True)):
            runtime = Runtime(
                policy=RandomExplorer(0),
                store=store,
                config=RuntimeConfig(real_concurrency=1),
                real_env=lambda: BrowserEnv(pool, sites=[site]),
                reset_hook=hook,
            )
            async with runtime:
                [group] = await runtime.run_groups([GroupSpec(task=CHANGING, size=2, seed=0, source="real")])
            assert group.consistent is expected
            assert runtime.stats.snapshot().inconsistent_groups == int(not expected)
            assert not any(rollout.episode.error for rollout in group.rollouts)
