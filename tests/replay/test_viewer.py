"""``dreamgym replay view``: a store's episodes on one page that Chromium opens offline, filtered by CSS alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import dreamgym, watched_page
from runtime_helpers import TASK, Counts, ToyBackend, ToyFormEnv, ToyPolicy, open_store, simulator

from dreamgym.bridge import BrowserPool
from dreamgym.core import ConfigError, Task
from dreamgym.replay.viewer import ViewFilter
from dreamgym.runtime import GroupSpec, Runtime, RuntimeConfig

pytestmark = pytest.mark.anyio

VISIBLE = "() => [...document.querySelectorAll('details.trajectory')].filter(e => e.offsetParent !== null).length"


async def _store_with_shadowed_and_synthetic_episodes(path: Path) -> None:
    """Real toy-form episodes run in shadow mode (each step beside the simulator's prediction) and synthetic ones."""
    backend = ToyBackend()
    other = Task(task_id="toy/other-form", instruction=TASK.instruction, site="toy")
    async with open_store(path) as store:
        runtime = Runtime(
            policy=ToyPolicy(),
            store=store,
            real_env=lambda: ToyFormEnv(Counts()),
            synthetic_env=lambda: simulator(backend),
            config=RuntimeConfig(max_steps=4),
        )
        async with runtime:
            await runtime.run_groups(
                [
                    GroupSpec(task=TASK, size=2, seed=0, source="real", shadow=True),
                    GroupSpec(task=other, size=1, seed=1, source="real"),
                    GroupSpec(task=TASK, size=2, seed=2, source="synthetic"),
                ]
            )
        await store.flush()


async def test_the_viewer_shows_every_episode_with_shadow_diffs_and_filters_without_script(
    tmp_path: Path, pool: BrowserPool
) -> None:
    await _store_with_shadowed_and_synthetic_episodes(tmp_path / "store")
    out = tmp_path / "view" / "episodes.html"
    result = dreamgym("replay", "view", str(tmp_path / "store"), "--out", str(out))
    assert "5 of 5 matching episodes (5 in the store), 4 steps beside the simulator's prediction" in result.stdout
    html = out.read_text()
    assert "<script" not in html and "Content-Security-Policy" in html
    assert html.count('class="episode trajectory"') == 5
    assert "type [e2] [Ana] [0]" in html and "toy-model" in html  # the actions, the synthetic episodes' model

    async with watched_page(pool, out) as (page, opened):
        seen = {"all": await page.evaluate(VISIBLE)}
        await page.get_by_label("synthetic (2)").check()
        seen["synthetic"] = await page.evaluate(VISIBLE)
        await page.get_by_label("toy/other-form (1)").check()  # and another facet at once: nothing is both
        seen["synthetic and the other task"] = await page.evaluate(VISIBLE)
        await page.locator("#f-source-all").check()
        seen["the other task"] = await page.evaluate(VISIBLE)
        await page.locator("details.trajectory:visible > summary").click()
        shown = await page.locator("details.trajectory:visible").inner_text()
    assert opened.problems == [] and opened.requests == [out.as_uri()]  # nothing runs wrong, nothing is fetched
    assert seen == {"all": 5, "synthetic": 2, "synthetic and the other task": 0, "the other task": 1}
    assert "toy/other-form" in shown and "step 0" in shown


async def test_the_viewer_takes_filters_and_refuses_what_cannot_work(tmp_path: Path) -> None:
    await _store_with_shadowed_and_synthetic_episodes(tmp_path / "store")
    out = tmp_path / "real.html"
    result = dreamgym("replay", "view", str(tmp_path / "store"), "--out", str(out), "--source", "real",
                      "--task", "toy/f*", "--limit", "1")  # fmt: skip
    assert "1 of 2 matching episodes (5 in the store), 2 steps beside" in result.stdout
    solved = dreamgym("replay", "view", str(tmp_path / "store"), "--out", str(out), "--min-reward", "1")
    assert "5 of 5 matching" in solved.stdout  # the toy policy solves every episode
    failed = dreamgym("replay", "view", str(tmp_path / "store"), "--out", str(out), "--max-reward", "0.5")
    assert "0 of 0 matching" in failed.stdout and "(no episodes)" in out.read_text()
    missing = dreamgym("replay", "view", str(tmp_path / "nothing"), "--out", str(out), check=False)
    assert missing.returncode != 0 and "no store at" in missing.stderr
    with pytest.raises(ConfigError, match="limit"):
        ViewFilter(limit=0)
