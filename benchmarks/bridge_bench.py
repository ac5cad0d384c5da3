"""Bridge figures, each beside a baseline measured in the same run (JSON lines on stdout).

    python benchmarks/bridge_bench.py [--quick] [--commit-results]

With ``--commit-results`` the rows also go to ``benchmarks/results/bridge_bench.json``
with the date, the commit and the command.

- ``env_step_overhead``: mean seconds per step of one action sequence (a
  MiniWoB login, solved) through ``BrowserEnv`` vs. bare Playwright doing the
  same actions each followed by one ``aria_snapshot`` (target ratio <= 1.2).
- ``env_step_overhead_settling``: the same with the page waited for to settle
  before each capture, as on live sites (``MiniWobSite(settle=True)``; MiniWoB++
  pages are settled when the action returns, so the site skips it by default).
- ``miniwob_episodes_per_s_<k>``: demonstrator episodes per second with k
  concurrent contexts (2 browser processes), vs. k = 1. Actions wait at most
  1 s for an element (a covered button otherwise costs 5 s a try).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _report as report
import anyio
from learning_curve import _commit

from dreamgym.bridge import (
    CHROMIUM_ARGS,
    DEMONSTRATORS,
    BrowserConfig,
    BrowserEnv,
    BrowserPool,
    EnvConfig,
    MiniWobDemonstrator,
    MiniWobSite,
    find_chromium,
)
from dreamgym.core import parse_action
from dreamgym.runtime import run_episode

TASK = "login-user"


ROWS: list[dict[str, Any]] = []


def emit(figure: str, value: float, unit: str, baseline: str, baseline_value: float, **extra: Any) -> None:
    report.emit(figure, value, unit, baseline, baseline_value, digits=5, **extra)
    ROWS.append({"figure": figure, "value": round(value, 5), "baseline": baseline,
                 "baseline_value": round(baseline_value, 5),
                 "ratio": round(value / baseline_value, 4) if baseline_value else None, **extra})  # fmt: skip


async def solved_sequence(site: MiniWobSite, seed: int) -> list[str]:
    """The demonstrator's actions for one seeded episode (ids are stable for a seed)."""
    async with BrowserPool(BrowserConfig(processes=1)) as pool:
        env = BrowserEnv(pool, sites=[site])
        task = site.task(TASK)
        steps, _ = await run_episode(env, MiniWobDemonstrator(), task, seed=seed, max_steps=10)
        actions = [str(step.action) for step in steps]
        await env.aclose()
        return actions


async def through_env(
    site: MiniWobSite, actions: list[str], seed: int, episodes: int, config: EnvConfig | None = None
) -> list[float]:
    steps: list[float] = []
    async with BrowserPool(BrowserConfig(processes=1)) as pool:
        env = BrowserEnv(pool, sites=[site], config=config)
        task = site.task(TASK)
        parsed = [parse_action(a) for a in actions]
        for _ in range(episodes):
            await env.reset(task, seed=seed)
            for action in parsed:
                start = time.perf_counter()
                await env.step(action)
                steps.append(time.perf_counter() - start)
        await env.aclose()
    return steps


async def through_playwright(site: MiniWobSite, actions: list[str], seed: int, episodes: int) -> list[float]:
    """The same actions, bare: locate by aria-ref, act, take one snapshot."""
    from playwright.async_api import async_playwright

    from dreamgym.bridge import RefMap, render_snapshot

    steps: list[float] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(find_chromium()), args=list(CHROMIUM_ARGS))
        context = await browser.new_context(viewport={"width": 1280, "height": 720})
        page = await context.new_page()
        await page.goto(site.url(site.task(TASK)), wait_until="load")
        parsed = [parse_action(a) for a in actions]
        for _ in range(episodes):
            await page.evaluate(
                "(s) => { Math.seedrandom(s); core.EPISODE_MAX_TIME = 1e9; core.startEpisodeReal(); }", seed
            )
            refs = RefMap()
            render_snapshot(await page.aria_snapshot(mode="ai"), refs)  # to know which ref each id means
            for action in parsed:
                start = time.perf_counter()
                locator = page.locator(f"aria-ref={refs.ref(action.args[0])}")
                if action.name == "type":
                    await locator.fill(action.args[1])
                else:
                    await locator.click()
                await page.aria_snapshot(mode="ai")
                steps.append(time.perf_counter() - start)
        await browser.close()
    return steps


async def episodes_per_second(site: MiniWobSite, concurrency: int, episodes: int) -> tuple[float, float]:
    names = [n for n in DEMONSTRATORS if n != "search-engine"]
    policy = MiniWobDemonstrator()
    async with BrowserPool(BrowserConfig(processes=2, max_contexts=concurrency)) as pool:
        queue = list(range(episodes))
        wins: list[float] = []

        async def worker() -> None:
            env = BrowserEnv(pool, sites=[site], config=EnvConfig(action_timeout_s=1.0, step_deadline_s=10.0))
            while queue:
                number = queue.pop()
                task = site.task(names[number % len(names)])
                steps, _ = await run_episode(env, policy, task, seed=number, max_steps=10)
                wins.append(steps[-1].reward)
            await env.aclose()

        for _ in range(concurrency):  # warm the browsers outside the timing
            async with pool.context():
                pass
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        return episodes / (time.perf_counter() - start), sum(wins) / len(wins)


async def main(quick: bool) -> None:
    site = MiniWobSite()
    episodes = 10 if quick else 40
    actions = await solved_sequence(site, seed=5)
    bare = await through_playwright(site, actions, 5, episodes)
    ours = await through_env(site, actions, 5, episodes)
    emit(
        "env_step_overhead",
        statistics.mean(ours),
        "s/step",
        "bare playwright act + aria_snapshot",
        statistics.mean(bare),
        steps=len(ours),
        task=TASK,
        target="ratio <= 1.2",
        median_ratio=round(statistics.median(ours) / statistics.median(bare), 4),
    )
    settling = MiniWobSite(settle=True)
    settled = await through_env(settling, actions, 5, episodes)
    settling.close()
    emit(
        "env_step_overhead_settling",
        statistics.mean(settled),
        "s/step",
        "bare playwright act + aria_snapshot",
        statistics.mean(bare),
        steps=len(settled),
        task=TASK,
        median_ratio=round(statistics.median(settled) / statistics.median(bare), 4),
    )
    runs = 20 if quick else 60
    single, success = await episodes_per_second(site, 1, runs)
    emit("miniwob_episodes_per_s_1", single, "episodes/s", "itself", single, episodes=runs, success=success)
    for concurrency in (2, 4):
        rate, success = await episodes_per_second(site, concurrency, runs)
        emit(
            f"miniwob_episodes_per_s_{concurrency}",
            rate,
            "episodes/s",
            "1 context",
            single,
            episodes=runs,
            success=success,
        )
    site.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/bridge_bench.json")
    args = parser.parse_args()
    commit = _commit()
    anyio.run(main, args.quick)
    if args.commit_results:
        record = {"date": datetime.date.today().isoformat(), "commit": commit,
                  "command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "rows": ROWS}  # fmt: skip
        (Path(__file__).resolve().parent / "results" / "bridge_bench.json").write_text(
            json.dumps(record, indent=1) + "\n"
        )
