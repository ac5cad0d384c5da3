"""``dreamgym demo``: the main job on a fresh machine, offline, on 2 CPU cores.

Today it runs what exists, and says so: it collects real MiniWoB++ episodes in
headless Chromium with the scripted demonstrators (and, as a baseline, a
policy that picks uniformly among the valid actions) into a real replay
store, embeds the transitions with the packaged MiniLM model, and retrieves
the stored transitions nearest to a step of an unseen seed, the way the
experience model will ground its predictions. The experience model, mixed
rollouts, training and held-out evaluation land with the simulator, runtime
and trainer issues.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from dreamgym.agents import RandomExplorer
from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobDemonstrator, MiniWobSite
from dreamgym.core import (
    Embedder,
    Policy,
    diff_states,
)
from dreamgym.replay import LmdbReplayStore, StoreConfig, transition_text
from dreamgym.runtime import run_episode

__all__ = ["run_demo"]

TASKS = ("click-button", "enter-text", "login-user", "choose-list", "click-checkboxes", "search-engine")
TRAIN_SEEDS = range(4)
HELD_OUT_SEEDS = range(100, 103)
MAX_STEPS = 10


async def run_demo(out: Path, embedder: Embedder | None = None) -> int:
    """Run the demo; writes the store under ``out`` and prints what it did."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.rule("dreamgym demo — what exists today")
    console.print(
        "Real MiniWoB++ episodes in headless Chromium → LMDB replay store → MiniLM retrieval.\n"
        "[yellow]Not yet: the experience model, mixed real/synthetic rollouts, GRPO training and held-out "
        "evaluation of a trained policy (the simulator, runtime and trainer issues).[/]"
    )
    store_path = out / "store"
    shutil.rmtree(store_path, ignore_errors=True)  # the demo starts from an empty store each run
    started = time.perf_counter()
    site = MiniWobSite()
    demonstrator = MiniWobDemonstrator()
    results: dict[str, dict[str, list[float]]] = {"demonstrator": {}, "random": {}}
    try:
        async with (
            BrowserPool(BrowserConfig(processes=2)) as pool,
            LmdbReplayStore(store_path, embedder=embedder, config=StoreConfig()) as store,
        ):
            env = BrowserEnv(pool, sites=[site])
            for name in TASKS:
                task = site.task(name, max_steps=MAX_STEPS)
                await store.put_task(task)
                for seed in TRAIN_SEEDS:
                    steps, summary = await run_episode(
                        env, demonstrator, task, seed=seed, max_steps=MAX_STEPS, group_id=f"{name}/{seed}"
                    )
                    await store.append(steps)
                    await store.put_episode(summary)
                policies: tuple[tuple[str, Policy], ...] = (
                    ("demonstrator", demonstrator),
                    ("random", RandomExplorer(0)),
                )
                for label, policy in policies:
                    for seed in HELD_OUT_SEEDS:
                        _, summary = await run_episode(env, policy, task, seed=seed, max_steps=MAX_STEPS)
                        results[label].setdefault(name, []).append(float(summary.success))
            collected = time.perf_counter() - started
            console.print(f"collected {len(TASKS) * len(TRAIN_SEEDS)} real episodes in {collected:.1f} s; "
                          f"embedding with {store.embedder.name} ...")  # fmt: skip
            await store.flush()
            stats = await store.stats()

            task = site.task("login-user", max_steps=MAX_STEPS)
            held_out, _ = await run_episode(env, demonstrator, task, seed=HELD_OUT_SEEDS[0], max_steps=MAX_STEPS)
            step = held_out[1]
            console.rule(f"an unseen seed ({HELD_OUT_SEEDS[0]}) of login-user, step 2")
            console.print(Text(f"goal: {step.observation.goal}\n{step.observation.state}"))
            query = transition_text(step.observation.goal, str(step.action), step.observation.state)
            hits = await store.nearest(query, 3, source="real")
            table = Table(title=Text(f"nearest stored real transitions to '{step.action}'"))
            for column in ("seq", "score", "task / seed", "action", "what it did (state diff)"):
                table.add_column(column)
            for hit in hits:
                diff = diff_states(hit.step.observation.state, hit.step.next_observation.state)
                cells = (str(hit.seq), f"{hit.score:.3f}", f"{hit.step.task_id} / {hit.step.seed}",
                         str(hit.step.action), diff)  # fmt: skip
                table.add_row(*(Text(cell) for cell in cells))
            console.print(table)
            await env.aclose()
    finally:
        site.close()

    scores = Table(title=Text(f"success on held-out seeds {list(HELD_OUT_SEEDS)} (n = {len(HELD_OUT_SEEDS)} per task)"))
    scores.add_column("task")
    scores.add_column("scripted demonstrator")
    scores.add_column("random valid action")
    for name in TASKS:
        scores.add_row(name, *(f"{sum(results[p][name]):.0f}/{len(results[p][name])}" for p in results))
    totals = {p: sum(sum(v) for v in results[p].values()) for p in results}
    episodes = len(TASKS) * len(HELD_OUT_SEEDS)
    scores.add_row("all", *(f"{totals[p]:.0f}/{episodes}" for p in results))
    console.print(scores)
    console.rule("store")
    console.print(
        f"{store_path}: {stats.steps['real']} real steps, {stats.episodes} episodes, {stats.tasks} tasks, "
        f"{stats.vectors} vectors ({stats.embedder}, dim {stats.dim}); {time.perf_counter() - started:.1f} s in all"
    )
    console.print(f"Inspect it: dreamgym replay stats {store_path}")
    return 0
