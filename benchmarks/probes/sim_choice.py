"""Which offline default: a small model from scratch, or SmolLM2-135M + LoRA? Fidelity per second, measured.

    python benchmarks/probes/sim_choice.py [--lora-examples 400] [--eval-steps 150]

Both candidates go through the same template, parser and backend code. The
scratch model is the one ``python -m dreamgym.jobs.sim_default`` built; SmolLM2 is
fine-tuned here with LoRA on a subset of the same SFT examples (its CPU cost
per example is ~30x the small model's, so it gets what fits in ~15 minutes).
Both are scored teacher-forced on the same held-out MiniWoB++ steps (seeds the
default never trained on), beside the two baselines, with seconds per
synthetic step at 8 concurrent predictions. JSON lines; ``fidelity_per_s`` is
reward accuracy times state similarity per second of simulation.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import anyio

from dreamgym.core import Step, decode_record
from dreamgym.jobs.sim_default import (
    DEFAULT_TEMPLATE,
    HELD_OUT_SEEDS,
    default_model_dir,
    default_store_dir,
    ensure_held_out,
)
from dreamgym.offline import cache_dir, smollm2_checkpoint
from dreamgym.replay import LmdbReplayStore
from dreamgym.simulator import (
    SimTrainConfig,
    build_sft_examples,
    load_experience_model,
    one_step_fidelity,
    train_experience_model,
)


def emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


async def held_out_steps(path: Path, count: int) -> list[Step]:
    async with LmdbReplayStore(path, readonly=True) as store:
        steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
    episodes = sorted({s.episode_id for s in steps})
    random.Random(0).shuffle(episodes)
    chosen: set[str] = set()
    total = 0
    for episode in episodes:
        if total >= count:
            break
        chosen.add(episode)
        total += sum(s.episode_id == episode for s in steps)
    return [s for s in steps if s.episode_id in chosen]


async def main_async(args: argparse.Namespace) -> None:
    held = await ensure_held_out()
    steps = await held_out_steps(held, args.eval_steps)
    tasks = sorted({s.task_id for s in steps})
    exclude = [(task, seed) for task in tasks for seed in HELD_OUT_SEEDS]
    lora_dir = cache_dir() / "sim-miniwob-smollm2-lora"
    if not (lora_dir / "adapter_config.json").exists() or args.retrain:
        async with LmdbReplayStore(default_store_dir(), readonly=True) as store:
            examples = await build_sft_examples(store, DEFAULT_TEMPLATE, exclude_task_seeds=exclude)
        random.Random(0).shuffle(examples)
        config = SimTrainConfig(base=str(smollm2_checkpoint()), lora=True, epochs=1, batch_size=4, max_length=1536)
        started = time.perf_counter()
        await anyio.to_thread.run_sync(
            lambda: train_experience_model(examples[: args.lora_examples], lora_dir, config, template=DEFAULT_TEMPLATE)
        )
        emit(bench="sim_choice_train", candidate="smollm2-lora", examples=args.lora_examples,
             seconds=round(time.perf_counter() - started, 1))  # fmt: skip
    async with LmdbReplayStore(default_store_dir(), readonly=True) as store:
        for name, path in (("scratch", default_model_dir()), ("smollm2-lora", lora_dir)):
            model = load_experience_model(path, max_batch=8)
            results = await one_step_fidelity(
                model, steps, store=store, neighbours=DEFAULT_TEMPLATE.neighbours, exclude_task_seeds=exclude
            )
            for summary in results.values():
                row = summary.as_dict()
                if summary.name == "model":
                    row["name"] = name
                    quality = summary.reward_accuracy * summary.similarity
                    row["fidelity_per_s"] = round(quality / summary.seconds_per_step, 3)
                elif name != "scratch":
                    continue  # the baselines are the same for both candidates
                emit(bench="sim_choice", **row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lora-examples", type=int, default=240)
    parser.add_argument("--eval-steps", type=int, default=150)
    parser.add_argument("--retrain", action="store_true")
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
