"""Runtime figures, each beside its ideal (JSON lines on stdout).

    python benchmarks/probes/runtime_bench.py                     # throughput at 1..1024, then a 180 s soak
    python benchmarks/probes/runtime_bench.py --soak-seconds 0    # throughput only
    python benchmarks/probes/runtime_bench.py --quick             # up to 256 in flight, one wave, 30 s soak

Everything is in-process: the experience model is the real ``LLMExperienceModel``
and ``SimulatedEnv`` over a text backend that sleeps ``--latency-s`` (1 s) per
call and then answers "nothing changed" for a tiny page; the store is a real
LMDB store in a temporary directory, with the hashing embedder. The model has
no call cache (every fork asks the same question, and cached answers would
not measure the runtime). Retrieval is off, so the figures are the
runtime's own overhead.

Figures:
- ``synthetic_throughput_c<N>``: synthetic steps/s with ``N`` episodes in
  flight (groups of up to 8, ``--waves`` episodes per slot, ``--max-steps``
  steps each) vs the ideal ``N / latency``; ``ratio`` is the efficiency.
- ``soak``: ``--soak-episodes`` (1,000) episodes kept in flight for
  ``--soak-seconds``; RSS (and its anonymous part, which excludes LMDB's
  mapped file pages) sampled every 10 s: start, end, max and the slope of a
  least-squares line over the samples after the first, in MiB per minute.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _report, the scripts reused

import anyio
from _report import emit

from dreamgym.core import (
    ChatMessage,
    Completion,
    Observation,
    PolicyDecision,
    Sampling,
    Step,
    Task,
    parse_action,
)
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.runtime import GroupSpec, Runtime, RuntimeConfig
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, SimulatedEnv, SimulatorConfig

TASK = Task(task_id="bench/form", instruction='Enter "Ana" and press Submit.', site="bench")
PAGE = Observation(state='[e1] generic: Enter "Ana" and press Submit.\n[e2] textbox\n[e3] button "Submit"')
NO_CHANGE = "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"
MIB = 1024 * 1024


class SleepingBackend:
    """A text backend that takes a fixed time per call, then answers like the tiny page would."""

    backend_id = "sleeping-backend"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.calls = 0

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        self.calls += 1
        await anyio.sleep(self.latency_s)
        if "Action: " not in messages[-1].content:
            return Completion(text=f"<state>\n{PAGE.state}\n</state>")
        return Completion(text=NO_CHANGE)

    async def aclose(self) -> None:
        pass


class ScrollPolicy:
    """Scrolls every step: a policy that costs nothing, so the model's latency is all there is."""

    policy_id = "scroll"

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        return PolicyDecision(action=parse_action("scroll [down]"))


async def seed_store(store: LmdbReplayStore) -> None:
    """One real first page, so resets start from it instead of asking the model."""
    first = Step(
        source="real",
        task_id=TASK.task_id,
        episode_id="seed",
        step_index=0,
        seed=0,
        site=TASK.site,
        observation=PAGE,
        action=parse_action("scroll [down]"),
        next_observation=PAGE,
    )
    await store.put_task(TASK)
    await store.append([first])


def make_runtime(store: LmdbReplayStore, backend: SleepingBackend, concurrency: int, max_steps: int) -> Runtime:
    model = LLMExperienceModel(backend, config=ExperienceModelConfig())
    config = RuntimeConfig(
        synthetic_concurrency=concurrency,
        max_steps=max_steps,
        store_buffer=max(256, concurrency),
        commit_batch=max(256, concurrency),
    )
    return Runtime(
        policy=ScrollPolicy(),
        store=store,
        config=config,
        synthetic_env=lambda: SimulatedEnv(model, store=store, config=SimulatorConfig(neighbours=0)),
    )


def groups_for(episodes: int, size: int, start: int = 0) -> list[GroupSpec]:
    return [GroupSpec(task=TASK, size=size, seed=start + n, source="synthetic") for n in range(episodes // size)]


async def throughput(root: Path, concurrency: int, args: argparse.Namespace) -> None:
    backend = SleepingBackend(args.latency_s)
    size = min(8, concurrency)
    async with LmdbReplayStore(root / f"c{concurrency}", embedder=HashingEmbedder(64)) as store:
        await seed_store(store)
        async with make_runtime(store, backend, concurrency, args.max_steps) as runtime:
            began = time.perf_counter()
            results = await runtime.run_groups(groups_for(concurrency * args.waves, size))
            seconds = time.perf_counter() - began
        steps = sum(rollout.episode.num_steps for group in results for rollout in group.rollouts)
        stored = (await store.stats()).steps["synthetic"]
    emit(
        f"synthetic_throughput_c{concurrency}",
        steps / seconds,
        "steps/s",
        "concurrency/latency",
        concurrency / args.latency_s,
        concurrency=concurrency,
        group_size=size,
        steps=steps,
        stored_steps=stored,
        seconds=round(seconds, 2),
        model_calls=backend.calls,
        latency_s=args.latency_s,
    )


def rss_mib() -> tuple[float, float]:
    """(RSS, anonymous RSS) of this process in MiB, from /proc/self/status (psutil gives the same RSS)."""
    fields: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            fields[key] = float(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("RssAnon", 0.0)


def slope_per_min(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per minute."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60 if var else 0.0


async def soak(root: Path, args: argparse.Namespace) -> None:
    backend = SleepingBackend(args.latency_s)
    size = 8
    lanes = args.soak_episodes // size
    samples: list[tuple[float, float, float]] = []
    async with LmdbReplayStore(root / "soak", embedder=HashingEmbedder(64)) as store:
        await seed_store(store)
        async with make_runtime(store, backend, args.soak_episodes, args.max_steps) as runtime:
            began = time.perf_counter()
            stop_at = began + args.soak_seconds

            async def lane(index: int) -> None:
                round_ = 0
                while time.perf_counter() < stop_at:
                    await runtime.run_groups(groups_for(size, size, start=index * 1_000_000 + round_))
                    round_ += 1

            async def sample() -> None:
                while True:
                    samples.append((time.perf_counter() - began, *rss_mib()))
                    await anyio.sleep(10)

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                async with anyio.create_task_group() as workers:
                    for index in range(lanes):
                        workers.start_soon(lane, index)
                samples.append((time.perf_counter() - began, *rss_mib()))
                tg.cancel_scope.cancel()
            seconds = time.perf_counter() - began
            snapshot = runtime.stats.snapshot()
    rss = [(t, r) for t, r, _ in samples]
    anon = [(t, a) for t, _, a in samples]
    emit(
        "soak",
        snapshot.synthetic_steps / seconds,
        "steps/s",
        "concurrency/latency",
        lanes * size / args.latency_s,
        episodes_in_flight=lanes * size,
        seconds=round(seconds, 1),
        episodes=snapshot.episodes,
        steps=snapshot.synthetic_steps,
        errors=dict(snapshot.errors),
        rss_start_mib=round(rss[0][1], 1),
        rss_end_mib=round(rss[-1][1], 1),
        rss_max_mib=round(max(r for _, r in rss), 1),
        rss_slope_mib_per_min=round(slope_per_min(rss[1:]), 2),
        rss_anon_start_mib=round(anon[0][1], 1),
        rss_anon_end_mib=round(anon[-1][1], 1),
        rss_anon_max_mib=round(max(a for _, a in anon), 1),
        rss_anon_slope_mib_per_min=round(slope_per_min(anon[1:]), 2),
        samples=len(samples),
    )


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="runtime-bench-"))
    try:
        for concurrency in args.concurrency:
            await throughput(root, concurrency, args)
        if args.soak_seconds > 0:
            await soak(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    parser.add_argument("--latency-s", type=float, default=1.0, help="seconds the backend takes per call")
    parser.add_argument("--waves", type=int, default=3, help="episodes per slot of concurrency")
    parser.add_argument("--max-steps", type=int, default=5, help="steps per episode")
    parser.add_argument("--soak-seconds", type=float, default=180.0, help="0 skips the soak")
    parser.add_argument("--soak-episodes", type=int, default=1000, help="episodes in flight during the soak")
    parser.add_argument("--quick", action="store_true", help="up to 256 in flight, one wave, a 30 s soak")
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency = [c for c in args.concurrency if c <= 256]
        args.waves = 1
        args.soak_seconds = min(args.soak_seconds, 30.0)
    return args


if __name__ == "__main__":
    anyio.run(main, parse_args(sys.argv[1:]), backend="asyncio")
