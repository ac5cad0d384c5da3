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

import random
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobDemonstrator, MiniWobSite
from dreamgym.core import (
    Embedder,
    Episode,
    Observation,
    Policy,
    PolicyDecision,
    Step,
    StepTimings,
    Task,
    candidate_actions,
    diff_states,
    observation_hash,
    parse_state,
)
from dreamgym.replay import LmdbReplayStore, StoreConfig, transition_text

__all__ = ["run_demo"]

TASKS = ("click-button", "enter-text", "login-user", "choose-list", "click-checkboxes", "search-engine")
TRAIN_SEEDS = range(4)
HELD_OUT_SEEDS = range(100, 103)
MAX_STEPS = 10


class _RandomChooser:
    """Uniform over ``candidate_actions``: the baseline every learned policy must beat."""

    policy_id = "random-candidates"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        state = parse_state(observation.state)
        return PolicyDecision(action=self.rng.choice(candidate_actions(state, observation.goal or task.instruction)))


async def _episode(env: BrowserEnv, task: Task, seed: int, policy: Policy) -> tuple[list[Step], Episode]:
    """One episode (the runtime issue replaces this loop with the async scheduler)."""
    episode_id = uuid.uuid4().hex[:12]
    policy_id = policy.policy_id
    started = time.time()
    observation = await env.reset(task, seed=seed)
    first = observation
    steps: list[Step] = []
    for index in range(MAX_STEPS):
        t0 = time.perf_counter()
        action = (await policy.act(task, steps, observation)).action
        t1 = time.perf_counter()
        result = await env.step(action)
        truncated = result.truncated or (index == MAX_STEPS - 1 and not result.terminated)
        steps.append(
            Step(
                source="real",
                task_id=task.task_id,
                episode_id=episode_id,
                group_id=f"{task.task_id}/{seed}",
                step_index=index,
                seed=seed,
                site=task.site,
                observation=observation,
                action=action,
                next_observation=result.observation,
                reward=result.reward,
                terminated=result.terminated,
                truncated=truncated,
                truncation_reason=result.truncation_reason or ("step_limit" if truncated else ""),
                policy_id=policy_id,
                timings=StepTimings(started_at=time.time(), policy_s=t1 - t0, env_s=time.perf_counter() - t1),
            )
        )
        observation = result.observation
        if result.terminated or truncated:
            break
    last = steps[-1]
    summary = Episode(
        episode_id=episode_id, task_id=task.task_id, source="real", group_id=last.group_id, seed=seed,
        site=task.site, policy_id=policy_id, num_steps=len(steps), total_reward=sum(s.reward for s in steps),
        success=last.reward > 0, terminated=last.terminated, truncated=last.truncated,
        truncation_reason=last.truncation_reason, started_at=started, ended_at=time.time(),
        initial_observation_hash=observation_hash(first),
    )  # fmt: skip
    return steps, summary


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
                    steps, summary = await _episode(env, task, seed, demonstrator)
                    await store.append(steps)
                    await store.put_episode(summary)
                policies: tuple[tuple[str, Policy], ...] = (
                    ("demonstrator", demonstrator),
                    ("random", _RandomChooser(0)),
                )
                for label, policy in policies:
                    for seed in HELD_OUT_SEEDS:
                        _, summary = await _episode(env, task, seed, policy)
                        results[label].setdefault(name, []).append(float(summary.success))
            collected = time.perf_counter() - started
            console.print(f"collected {len(TASKS) * len(TRAIN_SEEDS)} real episodes in {collected:.1f} s; "
                          f"embedding with {store.embedder.name} ...")  # fmt: skip
            await store.flush()
            stats = await store.stats()

            task = site.task("login-user", max_steps=MAX_STEPS)
            held_out, _ = await _episode(env, task, HELD_OUT_SEEDS[0], demonstrator)
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
