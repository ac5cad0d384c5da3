"""Real MiniWoB++ episodes per second with Ray rollout workers, beside the in-process runtime, in one run.

    python benchmarks/workers_bench.py [--seeds 12] [--repeats 2] [--commit-results]

The scripted demonstrator plays the same groups (six MiniWoB++ tasks × ``--seeds``
seeds, one episode each) through one :class:`~dreamgym.runtime.Runtime` and one
store, the real environments either in this process (one Chromium, as
``dreamgym collect`` runs them) or in Ray actors (:class:`~dreamgym.runtime.RayWorkers`,
one Chromium each). Each configuration plays a warm-up batch first (browsers
launched, pages loaded), untimed; then ``--repeats`` timed batches, the best kept.
JSON lines, each against the in-process runtime measured in the same run:

- ``episodes_per_s_<mode>``: 2 episodes in flight, for ``inprocess``,
  ``workers_1`` and ``workers_2`` (ratio against in-process; on 2 cores
  expect below 1: the browsers already use both);
- ``overhead_per_episode_s``: one episode in flight, the seconds an episode
  takes on one worker minus in process: what Ray adds per episode (its calls,
  the pickled pages crossing processes);
- ``ray_start_s``: starting a local Ray and two actors with their browsers,
  beside opening the in-process browser (neither is in the rates).

``--commit-results`` writes ``benchmarks/results/workers_bench.json`` with the
date, the commit and the command.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import _report as report
import anyio

from dreamgym.bridge import MiniWobDemonstrator, miniwob_tasks
from dreamgym.core import Environment
from dreamgym.jobs import open_browser_envs
from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
from dreamgym.runtime import GroupSpec, RayWorkers, Runtime, RuntimeConfig, WorkerConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "workers_bench.json"
TASKS = ["click-button", "enter-text", "click-checkboxes", "focus-text", "click-tab", "login-user"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12, help="seeds per task in each timed batch")
    parser.add_argument("--repeats", type=int, default=2, help="timed batches per configuration (best kept)")
    parser.add_argument(
        "--commit-results", action="store_true", help="also write benchmarks/results/workers_bench.json"
    )
    args = parser.parse_args()
    import ray

    started = time.perf_counter()
    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    rows: list[dict[str, Any]] = []
    try:
        rows = anyio.run(_measure, args, time.perf_counter() - started)
    finally:
        ray.shutdown()
    if args.commit_results:
        results = {
            **report.provenance(),
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


async def _measure(args: argparse.Namespace, ray_init_s: float) -> list[dict[str, Any]]:
    tasks = miniwob_tasks(TASKS, max_steps=8)
    rows: list[dict[str, Any]] = []
    rates: dict[tuple[str, int], float] = {}
    per_episode: dict[str, float] = {}
    ready: dict[str, float] = {}
    for mode in ("inprocess", "workers_1", "workers_2"):
        began = time.perf_counter()
        async with _real_envs(mode) as real_env:
            ready[mode] = time.perf_counter() - began
            for concurrency in (1, 2):
                seeds = range(args.seeds) if concurrency == 2 else range(max(2, args.seeds // 2))
                groups = [GroupSpec(task=task, size=1, seed=seed, source="real") for task in tasks for seed in seeds]
                await _play(real_env, groups[: len(tasks)], concurrency)  # warm-up
                best = min([await _play(real_env, groups, concurrency) for _ in range(args.repeats)])
                rates[mode, concurrency] = len(groups) / best
                if concurrency == 1:
                    per_episode[mode] = best / len(groups)
    for mode in ("inprocess", "workers_1", "workers_2"):
        rows.append(report.emit(f"episodes_per_s_{mode}", rates[mode, 2], "episodes/s", "in-process runtime",
                                rates["inprocess", 2], concurrency=2))  # fmt: skip
    rows.append(report.emit("ray_start_s", ray_init_s + ready["workers_2"], "s", "in-process browser start",
                            ready["inprocess"], workers=2))  # fmt: skip
    overhead = per_episode["workers_1"] - per_episode["inprocess"]
    rows.append(report.emit("overhead_per_episode_s", overhead, "s", "in-process seconds per episode",
                            per_episode["inprocess"], concurrency=1))  # fmt: skip
    return rows


@asynccontextmanager
async def _real_envs(mode: str) -> AsyncIterator[Callable[[], Environment]]:
    envs = functools.partial(open_browser_envs, (), 1)
    async with AsyncExitStack() as stack:
        if mode == "inprocess":
            yield await stack.enter_async_context(envs())
        else:
            workers = int(mode.removeprefix("workers_"))
            pool = await stack.enter_async_context(RayWorkers(envs, WorkerConfig(workers=workers)))
            yield pool.env


async def _play(real_env: Callable[[], Environment], groups: list[GroupSpec], concurrency: int) -> float:
    """Seconds to play ``groups`` into a fresh store (the store's writer included, as in a real run)."""
    with tempfile.TemporaryDirectory() as folder:
        config = RuntimeConfig(real_concurrency=concurrency, max_steps=8)
        store = LmdbReplayStore(
            Path(folder) / "store", embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False)
        )
        async with (
            store,
            Runtime(policy=MiniWobDemonstrator(), store=store, config=config, real_env=real_env) as runtime,
        ):
            began = time.perf_counter()
            results = await runtime.run_groups(groups)
            seconds = time.perf_counter() - began
    failed = [e for r in results for e in r.episodes if not e.success]
    if failed:
        raise SystemExit(f"{len(failed)} episodes failed, e.g. {failed[0].task_id}: {failed[0].error or 'unsolved'}")
    return seconds


if __name__ == "__main__":
    sys.exit(main())
