"""Two ranks of one training run, started by ``torchrun`` from ``test_trainer_ranks.py``: real groups on the toy
form, a tiny real policy, anchored to demonstrations (``TrainConfig.anchor_weight``). Each rank writes
``OUT/rank-N.json`` (what it did, a digest of its final weights); the
rank that opens the sides writes ``OUT/opened-PID``."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import torch
from helpers import warm_index_labels
from runtime_helpers import NAMES, TASK, ToyFormEnv, goal, open_store, page
from torch.nn.parallel import DistributedDataParallel

from dreamgym.agents import (
    INDEX_TOKENS,
    LocalPolicy,
    LocalPolicyConfig,
    add_index_tokens,
    render_observation,
    system_message,
)
from dreamgym.runtime import RuntimeConfig, Sides
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer
from dreamgym.trainer import Demonstration, TrainConfig, Trainer

TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=4096)  # fmt: skip


def main() -> int:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    pages = [page(seed, typed) for seed in range(len(NAMES)) for typed in ("", NAMES[seed])]
    texts = [system_message("index"), TASK.instruction, *(goal(seed) for seed in range(4))]
    texts += [render_observation(p) for p in pages]
    tokenizer = train_tokenizer(texts * 4, TINY.vocab_size)
    model = scratch_model(tokenizer, TINY, seed=0)
    add_index_tokens(model, tokenizer)
    warm_index_labels(model, tokenizer, TASK, pages)
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=1.0, seed=0))

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        (out / f"opened-{os.getpid()}").touch()
        async with open_store(out / "store") as store:
            yield Sides(store=store, real_env=ToyFormEnv, runtime_config=RuntimeConfig(max_steps=4, real_concurrency=2))

    config = TrainConfig(mode="mixed", real_share=1.0, updates=2, group_size=2, groups_per_update=1,
                         learning_rate=1e-2, lora=None, output_dir=out / "run", report_to=(), anchor_weight=1.0,
                         anchor_batch=3)  # fmt: skip
    trainer = Trainer(config, policy=policy, tasks=[TASK], open_sides=open_sides, train_seeds=(0, 1, 2, 3),
                      anchor=_demonstrations(policy))  # fmt: skip
    before = _digest(policy.model)
    result = trainer.train(resume=False)
    report = {"pid": os.getpid(), "update": result.state.update, "real_groups": result.state.real_groups,
              "completions": len(trainer.last_rollout["completion_ids"]), "weights_before": before,
              "weights": _digest(trainer.grpo.model)}  # fmt: skip
    report["group_before_end"] = torch.distributed.is_initialized()
    if os.environ["RANK"] == "0":
        time.sleep(1.0)  # rank 0 is still busy after train (writing, say) when rank 1 reaches end()
    report["entered_end"] = time.time()
    trainer.end()  # as `dreamgym train` does: the process group goes before the interpreter's teardown
    report["left_end"] = time.time()
    trainer.end()  # a second call (a script's own `finally`, say) finds the group gone and does nothing more
    report["group_after_end"] = torch.distributed.is_initialized()
    gc.collect()
    report["wrappers_after_end"] = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    (out / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(report))
    return 0


def _demonstrations(policy: LocalPolicy) -> list[Demonstration]:
    """Typing the name, demonstrated on each training seed's empty form."""
    rows = []
    for seed in range(len(NAMES)):
        form = page(seed)
        choices = [str(action) for action in policy.choices(TASK, form)]
        typing = next(n for n, choice in enumerate(choices) if NAMES[seed] in choice)
        rows.append(
            Demonstration(
                ids=tuple(policy.input_ids(TASK, [], form)),
                label=policy.turns.encode(INDEX_TOKENS[typing])[0],
                task_id=TASK.task_id,
                episode_id=f"demo-{seed}",
                step_index=0,
                seed=seed,
            )
        )
    return rows


def _digest(model: torch.nn.Module) -> str:
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


if __name__ == "__main__":
    raise SystemExit(main())
