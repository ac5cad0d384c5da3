"""dreamgym's torch work on one device, beside the same model's bare ``generate``: the GPU check of issue 18.

    python benchmarks/gpu_check.py [--size 0.5b|tiny] [--device auto|cuda|cpu] [--dtype auto|bfloat16|...]

Built for a GPU machine that has torch and transformers but no network
(``scripts/gpu_check.sh`` runs it): nothing is downloaded. It builds a
randomly initialised Llama of about 0.45B parameters (``--size 0.5b``:
width 896, 24 layers, 14 heads, 2 key-value heads, MLP 4864, the shape of
Qwen2.5-0.5B, with a 8,000-token BPE trained here on MiniWoB-like pages) or
a tiny one (``--size tiny``, a CPU smoke run), and prints as JSON lines:

1. ``LocalPolicy`` decisions per second (index mode: one label token per
   decision, ``--decisions`` of them in flight together, batched by the
   policy), beside ``model.generate`` of the same prompts in one batch with
   one new token;
2. ``LocalBackend`` synthetic steps per second (experience-model prompts,
   up to ``--new-tokens`` greedy tokens each (a random model seldom stops
   sooner), batched by the backend), beside one ``model.generate`` batch of
   the same prompts forced to that many tokens;
3. seconds per GRPO update of dreamgym's trainer (real groups only, on an
   in-process button page, so the browser is not what is timed), after one
   update of warm-up, beside the same model's bare generate of the policy's
   prompts.

Each line has the figure, its baseline from the same run, and their ratio.
The model's weights are random, so what it says is noise: only the speeds
mean anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

SIZES = {
    "0.5b": dict(vocab_size=8000, hidden_size=896, layers=24, heads=14, kv_heads=2, intermediate_size=4864),
    "tiny": dict(vocab_size=1000, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128),
}
NAMES = ("ONE", "TWO", "THREE", "FOUR")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--decisions", type=int, default=32, help="policy decisions timed (in flight together)")
    parser.add_argument("--steps", type=int, default=16, help="synthetic steps timed (in flight together)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens each synthetic step generates")
    parser.add_argument("--updates", type=int, default=3, help="GRPO updates timed after one of warm-up")
    args = parser.parse_args()
    import torch

    from dreamgym.core.devices import resolve_device

    device = resolve_device(args.device)
    model, tokenizer = _model(args.size)
    emit("setup", size=args.size, device=str(device), dtype=args.dtype, torch=torch.__version__,
         parameters=sum(p.numel() for p in model.parameters()),
         gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None)  # fmt: skip
    _policy(model, tokenizer, args)
    _backend(model, tokenizer, args)
    _grpo(model, tokenizer, args)
    return 0


def emit(figure: str, **values: Any) -> None:
    print(json.dumps({"figure": figure, **values}), flush=True)


def _pages() -> list[Any]:
    from dreamgym.core import Observation, Task

    pages = []
    for n in range(len(NAMES)):
        buttons = "\n".join(f'[e{i + 2}] button "{name}"' for i, name in enumerate(NAMES))
        goal = f'Click on the "{NAMES[n]}" button.'
        pages.append((Task(task_id="check/buttons", instruction=goal, site="check"),
                      Observation(state=f"[e1] generic: {goal}\n{buttons}", goal=goal)))  # fmt: skip
    return pages


def _model(size: str) -> tuple[Any, Any]:
    from dreamgym.simulator import ScratchModelConfig
    from dreamgym.trainer import tiny_index_policy

    return tiny_index_policy(_pages(), ScratchModelConfig(**SIZES[size], max_positions=4096), seed=0)


def _bare_generate(model: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int) -> float:
    """Seconds for one left-padded ``generate`` batch of ``prompts``, greedy, ``new_tokens`` each."""
    import torch

    from dreamgym.core.devices import model_device

    device = model_device(model)
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=pad)
        _sync(device)
        began = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=pad)  # fmt: skip
        _sync(device)
    return time.perf_counter() - began


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _policy(model: Any, tokenizer: Any, args: argparse.Namespace) -> None:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig

    config = LocalPolicyConfig(mode="index", temperature=1.0, seed=0, list_actions=False, device=args.device,
                               dtype=args.dtype, max_batch=args.decisions)  # fmt: skip
    policy = LocalPolicy(model, tokenizer, config=config)
    pages = _pages()
    jobs = [pages[n % len(pages)] for n in range(args.decisions)]

    async def decide() -> float:
        await policy.act(jobs[0][0], [], jobs[0][1])  # warm-up
        began = time.perf_counter()
        async with anyio.create_task_group() as group:
            for task, observation in jobs:
                group.start_soon(policy.act, task, [], observation)
        return time.perf_counter() - began

    seconds = anyio.run(decide)
    prompts = [policy.input_ids(task, [], observation) for task, observation in jobs]
    bare = _bare_generate(policy.model, tokenizer, prompts, 1)
    emit("policy decisions per second", value=round(args.decisions / seconds, 2),
         baseline="bare generate, 1 token, one batch", baseline_value=round(args.decisions / bare, 2),
         ratio=round(bare / seconds, 3), n=args.decisions)  # fmt: skip


def _backend(model: Any, tokenizer: Any, args: argparse.Namespace) -> None:
    from dreamgym.core import ChatMessage, Sampling
    from dreamgym.simulator import LocalBackend

    backend = LocalBackend(model, tokenizer, name="check", digest="0" * 16, max_batch=args.steps,
                           device=args.device, dtype=args.dtype)  # fmt: skip
    prompts = [[ChatMessage(role="user", content=f"Page:\n{obs.state}\nAction: click [e{2 + n % 4}]\nNext page?")]
               for n, (_, obs) in enumerate(_pages() * args.steps)][: args.steps]  # fmt: skip
    sampling = Sampling(max_new_tokens=args.new_tokens)

    async def predict() -> float:
        await backend.complete(prompts[0], sampling)  # warm-up
        began = time.perf_counter()
        async with anyio.create_task_group() as group:
            for messages in prompts:
                group.start_soon(backend.complete, messages, sampling)
        return time.perf_counter() - began

    seconds = anyio.run(predict)
    bare = _bare_generate(backend.model, tokenizer, [backend.encode(m) for m in prompts], args.new_tokens)
    emit("synthetic steps per second", value=round(args.steps / seconds, 2),
         baseline=f"bare generate, {args.new_tokens} tokens, one batch", baseline_value=round(args.steps / bare, 2),
         ratio=round(bare / seconds, 3), n=args.steps, new_tokens=args.new_tokens)  # fmt: skip


def _grpo(model: Any, tokenizer: Any, args: argparse.Namespace) -> None:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore
    from dreamgym.runtime import RuntimeConfig, Sides
    from dreamgym.trainer import TrainConfig, Trainer

    task = _pages()[0][0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        @asynccontextmanager
        async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
            async with LmdbReplayStore(root / "store", embedder=HashingEmbedder(64)) as store:
                yield Sides(store=store, real_env=ButtonPage, runtime_config=RuntimeConfig(max_steps=2))

        updates = 1 + args.updates
        config = TrainConfig(mode="mixed", real_share=1.0, updates=updates, group_size=8, groups_per_update=2,
                             output_dir=root / "run", report_to=(), device=args.device, dtype=args.dtype,
                             save_every=updates, lora=None)  # fmt: skip
        acting = LocalPolicyConfig(mode="index", temperature=1.0, seed=0, list_actions=False, device=args.device)
        policy = LocalPolicy(model, tokenizer, config=acting)
        trainer = Trainer(config, policy=policy, tasks=[task], open_sides=open_sides, train_seeds=range(8))
        marks: list[float] = []
        original = trainer._after_update

        def timed(update: int) -> bool:
            marks.append(time.perf_counter())
            return original(update)

        trainer._after_update = timed  # type: ignore[method-assign]
        trainer.train(resume=False)
    per_update = (marks[-1] - marks[0]) / max(len(marks) - 1, 1)
    pages = _pages()
    prompts = [policy.input_ids(t, [], o) for t, o in pages * 4][: config.group_size * config.groups_per_update]
    bare = _bare_generate(policy.model, tokenizer, prompts, 1)
    emit("seconds per GRPO update", value=round(per_update, 3), updates=len(marks) - 1,
         episodes_per_update=config.group_size * config.groups_per_update,
         baseline="bare generate of one update's first prompts, 1 token, one batch", baseline_value=round(bare, 4),
         ratio=round(per_update / bare, 1))  # fmt: skip


class ButtonPage:
    """An in-process page of four buttons: clicking the one the goal names ends the episode with reward 1."""

    source = "real"

    def __init__(self) -> None:
        self.goal = 0

    async def reset(self, task: Any, *, seed: int | None = None) -> Any:
        self.goal = (seed or 0) % len(NAMES)
        return _pages()[self.goal][1]

    async def step(self, action: Any) -> Any:
        from dreamgym.core import StepResult

        page = _pages()[self.goal][1]
        clicked = action.name == "click" and action.args[0] == f"e{self.goal + 2}"
        return StepResult(observation=page, reward=float(clicked), terminated=action.name == "click", truncated=False)

    async def aclose(self) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
