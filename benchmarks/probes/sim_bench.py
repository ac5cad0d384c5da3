"""Simulator figures, each beside a baseline measured in the same run (JSON lines on stdout).

    python benchmarks/probes/sim_bench.py [--only openai|local] [--latency 0.5] [--rounds 4] [--model DIR]

- ``sim_local``: synthetic steps/s of ``LLMExperienceModel`` on the local
  backend (the offline default model unless ``--model``), predicting real
  MiniWoB++ transitions of the default model's store with their retrieved
  neighbours, no call cache, at 1, 8 and 16 concurrent predictions. Baselines
  from the same run: concurrency 1 (``gain_vs_1``, target >= 5 at 8) and one
  hand-batched ``model.generate`` call over the same 8 prompts (transformers'
  own loop, left padding, greedy): ``ratio_to_hand_batched``. Also at 8: the
  shared-prefix KV reuse switched off.

- ``sim_openai``: mean seconds per ``OpenAIBackend.complete`` call against the
  test server (tests/openai_server.py) answering every request after a fixed
  latency, at 1, 8 and 32 concurrent calls (the backend's ``max_concurrency``
  set to match), vs. that bare latency. ``overhead`` is the fraction the
  backend (client, HTTP, parsing, limiter) adds; the target is <= 0.05. Beside
  it, the same calls through a bare ``AsyncOpenAI`` client (no limiter, no
  deadline, no retries), which isolates what ``OpenAIBackend`` itself adds.
  The server runs in its own process, as a real one would, so its threads do
  not compete with the client for the GIL; connections are warmed up first.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from openai_server import ServerState, openai_server

from dreamgym.core import ChatMessage, ExperienceQuery, ModelOutputError, Sampling
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, LocalBackend, TemplateConfig
from dreamgym.simulator._sft import read_metadata
from dreamgym.simulator.backends import OpenAIBackend

PROMPT = [
    ChatMessage(role="system", content="You predict the next state of a web page."),
    ChatMessage(role="user", content="[e1] main\n[e5] button 'Add to Cart'\naction: click [e5]"),
]


def emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def scripted_answer(body: dict[str, Any]) -> str:
    return "[e1] main\n[e9] text 'Added to cart'"


def serve(latency_s: float, conn: Connection) -> None:
    """The test server, in a child process: sends its URL, serves until told to stop."""
    with openai_server(ServerState(latency_s=latency_s, chat_reply=scripted_answer)) as (url, _):
        conn.send(url)
        conn.recv()


@contextmanager
def server_process(latency_s: float) -> Iterator[str]:
    """Run :func:`serve` in a spawned process; yields its ``/v1`` URL."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=serve, args=(latency_s, theirs), daemon=True)
    process.start()
    try:
        yield ours.recv()
    finally:
        ours.send("stop")
        process.join(timeout=10)


async def timed_calls(call: Callable[[], Awaitable[object]], concurrency: int, calls: int) -> list[float]:
    """Run ``calls`` calls, ``concurrency`` at a time; the seconds each took."""
    durations: list[float] = []

    async def worker(share: int) -> None:
        for _ in range(share):
            start = time.perf_counter()
            await call()
            durations.append(time.perf_counter() - start)

    async with anyio.create_task_group() as tg:
        for i in range(concurrency):
            tg.start_soon(worker, calls // concurrency + (i < calls % concurrency))
    return durations


async def mean_call_s(call: Callable[[], Awaitable[object]], concurrency: int, calls: int) -> float:
    await timed_calls(call, concurrency, concurrency)  # warm up: imports, one connection per caller
    return statistics.fmean(await timed_calls(call, concurrency, calls))


async def through_backend(url: str, concurrency: int, calls: int) -> float:
    backend = OpenAIBackend(model="bench-model", base_url=url, max_concurrency=concurrency)
    sampling = Sampling(max_new_tokens=64)
    try:
        return await mean_call_s(lambda: backend.complete(PROMPT, sampling), concurrency, calls)
    finally:
        await backend.aclose()


async def through_bare_client(url: str, concurrency: int, calls: int) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    messages: Any = [{"role": m.role, "content": m.content} for m in PROMPT]
    try:
        return await mean_call_s(
            lambda: client.chat.completions.create(
                model="bench-model", messages=messages, temperature=0.0, top_p=1.0, max_tokens=64
            ),
            concurrency,
            calls,
        )
    finally:
        await client.close()


async def run_openai(url: str, latency_s: float, rounds: int) -> None:
    for concurrency in (1, 8, 32):
        calls = concurrency * rounds
        backend_s = await through_backend(url, concurrency, calls)
        bare_s = await through_bare_client(url, concurrency, calls)
        emit(
            bench="sim_openai",
            concurrency=concurrency,
            calls=calls,
            latency_s=latency_s,
            mean_call_s=round(backend_s, 5),
            overhead=round(backend_s / latency_s - 1, 4),
            target="<=0.05",
            bare_client_mean_call_s=round(bare_s, 5),
            overhead_vs_bare_client=round(backend_s / bare_s - 1, 4),
        )


def bench_openai(args: argparse.Namespace) -> None:
    with server_process(args.latency) as url:
        anyio.run(run_openai, url, args.latency, args.rounds)


async def local_queries(store_dir: Path, count: int) -> list[ExperienceQuery]:
    """Real transitions of the default store as queries, neighbours retrieved outside their episode."""
    from dreamgym.core import Step, Task, decode_record
    from dreamgym.replay import LmdbReplayStore, transition_text

    queries = []
    async with LmdbReplayStore(store_dir, readonly=True) as store:
        steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
        by_episode: dict[str, list[Step]] = {}
        for step in steps:
            by_episode.setdefault(step.episode_id, []).append(step)
        for step in steps[:: max(1, len(steps) // count)][:count]:
            goal = step.observation.goal or step.task_id
            text = transition_text(goal, str(step.action), step.observation.state)
            found = await store.nearest(text, 3, source="real", exclude_episodes=[step.episode_id])
            history = tuple((s.observation, s.action) for s in by_episode[step.episode_id][: step.step_index])
            task = Task(task_id=step.task_id, instruction=goal, site=step.site)
            queries.append(ExperienceQuery(task=task, history=history, observation=step.observation,
                                           action=step.action, neighbours=tuple(found)))  # fmt: skip
    return queries


async def steps_per_s(model: LLMExperienceModel, queries: list[ExperienceQuery], concurrency: int) -> float:
    durations = await timed_calls(_cycler(model, queries), concurrency, len(queries))
    return len(durations) / (sum(durations) / concurrency)


def _cycler(model: LLMExperienceModel, queries: list[ExperienceQuery]) -> Callable[[], Awaitable[object]]:
    position = iter(range(10**9))

    async def call() -> object:
        try:
            return await model.predict(queries[next(position) % len(queries)])
        except ModelOutputError:
            return None  # a malformed answer costs its time like any other

    return call


def hand_batched_steps_per_s(backend: LocalBackend, prompts: list[list[ChatMessage]], max_new_tokens: int) -> float:
    import torch

    tokenizer = backend.tokenizer
    tokenizer.padding_side = "left"
    chats = [[{"role": m.role, "content": m.content} for m in p] for p in prompts]
    texts = [tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) for chat in chats]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    started = time.perf_counter()
    with torch.inference_mode():
        backend.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
    return len(prompts) / (time.perf_counter() - started)


async def run_local(model_dir: Path, store_dir: Path, rounds: int, max_new_tokens: int) -> None:
    config = read_metadata(model_dir).get("template", {})
    template = TemplateConfig(**config) if config else TemplateConfig()
    sampling = Sampling(max_new_tokens=max_new_tokens)
    backend = LocalBackend.load(model_dir, max_batch=16, batch_window_s=0.01)
    model = LLMExperienceModel(
        backend, config=ExperienceModelConfig(template=template, sampling=sampling, max_attempts=1)
    )
    queries = await local_queries(store_dir, 16 * rounds)
    await steps_per_s(model, queries[:2], 1)  # warm up
    single = await steps_per_s(model, queries[: 2 * rounds], 1)
    prompts = [template.messages(q) for q in queries[:8]]
    hand = hand_batched_steps_per_s(backend, prompts, sampling.max_new_tokens)
    for concurrency in (1, 8, 16):
        rate = single if concurrency == 1 else await steps_per_s(model, queries[: concurrency * rounds], concurrency)
        emit(bench="sim_local", model=backend.backend_id, concurrency=concurrency, steps_per_s=round(rate, 3),
             seconds_per_step=round(1 / rate, 3), gain_vs_1=round(rate / single, 2),
             target="gain_vs_1>=5 at 8" if concurrency == 8 else "",
             ratio_to_hand_batched=round(rate / hand, 3) if concurrency == 8 else None,
             hand_batched_steps_per_s=round(hand, 3))  # fmt: skip
    backend.prefix_cache = False
    plain = await steps_per_s(model, queries[: 8 * rounds], 8)
    emit(bench="sim_local_prefix_off", concurrency=8, steps_per_s=round(plain, 3), prefix_hits=backend.prefix_hits)


def bench_local(args: argparse.Namespace) -> None:
    from dreamgym.jobs.sim_default import default_model_dir, default_store_dir

    model_dir = Path(args.model) if args.model else default_model_dir()
    store_dir = Path(args.store) if args.store else default_store_dir()
    if args.model == "smollm2":
        from dreamgym.offline import smollm2_checkpoint

        model_dir = smollm2_checkpoint()
    if not (model_dir / "config.json").exists():
        sys.exit(f"no model at {model_dir}; build the offline default with `python -m dreamgym.jobs.sim_default`")
    anyio.run(run_local, model_dir, store_dir, args.rounds, args.max_new_tokens)


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {"openai": bench_openai, "local": bench_local}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), default=None, help="run one section")
    parser.add_argument("--latency", type=float, default=0.5, help="the server's seconds per answer")
    parser.add_argument("--rounds", type=int, default=4, help="calls per concurrent caller")
    parser.add_argument("--model", default=None, help="local model directory, 'smollm2', or the offline default")
    parser.add_argument("--max-new-tokens", type=int, default=192, help="answer budget of the local section")
    parser.add_argument("--store", default=None, help="store of real transitions (default: the offline default's)")
    args = parser.parse_args()
    for name, section in SECTIONS.items():
        if args.only in (None, name):
            section(args)


if __name__ == "__main__":
    main()
