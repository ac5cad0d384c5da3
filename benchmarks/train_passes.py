"""An update's forward and backward passes: its episodes in one padded pass, against one pass per episode.

    python benchmarks/train_passes.py --from .cache/demo [--updates 8] [--commit-results]

TRL pads an update's episodes to the longest prompt and the longest
completion among them and runs them in one pass; with
``TrainConfig.micro_batch_size`` the trainer cuts the update into passes of
like length (``dreamgym.trainer._passes.split_by_length``), their gradients
summed into the same one. This benchmark takes a kept demo (``--from``: the
``out`` of a finished ``dreamgym demo``), rebuilds the first ``--updates``
updates' episodes from the token records in its store (each update's first
two groups, as TRL got them), and times the warm-started policy's forward and
backward over each: the completion tokens' log-probabilities times an
advantage, the shape of GRPO's loss, in one padded pass (the baseline) and in
passes of ``--micro-batch-size`` episodes (1 by default: the demo's), in
alternation, so a slow spell of the machine hits both. It prints one JSON line:
the seconds per update of each and their ratio, with the padding share of the
one-pass batches. ``--commit-results`` writes
``benchmarks/results/train_passes.json`` with the date, the commit and the
command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--updates", type=int, default=8, help="updates to rebuild and time")
    parser.add_argument("--micro-batch-size", type=int, default=1, help="episodes per pass of the measured arm")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="train_passes", help="the results file's name, without .json")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from dreamgym.trainer._passes import split_by_length

    results: dict[str, Any] = report.provenance() | {"kept": str(args.kept), "cores": torch.get_num_threads()}
    updates = anyio.run(_updates, args.kept, args.updates)
    if not updates:
        parser.error(f"{args.kept} holds no training episodes with token records")
    model = AutoModelForCausalLM.from_pretrained(args.kept / "policy")
    model.train()
    one_pass: list[float] = []
    passes: list[float] = []
    padded = tokens = 0
    for batch in updates:
        rows = batch["prompt_ids"].size(0)
        tokens += int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
        padded += rows * (batch["prompt_ids"].size(1) + batch["completion_ids"].size(1))
        parts = rows // args.micro_batch_size
        for arm, slices in ((one_pass, [batch]), (passes, split_by_length(batch, parts))):
            started = time.perf_counter()
            for part in slices:
                (_loss(model, part) * len(part["advantages"]) / rows).backward()
            arm.append(time.perf_counter() - started)
            model.zero_grad()
    base, measured = statistics.mean(one_pass), statistics.mean(passes)
    row = report.emit(
        f"seconds per update's forward and backward, passes of {args.micro_batch_size}", measured, "s",
        "one padded pass (TRL's)", base, updates=len(updates), episodes_per_update=rows,
        padding_share=round(1 - tokens / padded, 4), speedup=round(base / measured, 2),
    )  # fmt: skip
    if args.commit_results:
        (RESULTS / f"{args.name}.json").write_text(json.dumps({**results, "rows": [row]}, indent=1) + "\n")
        print(f"wrote {RESULTS / f'{args.name}.json'}", file=sys.stderr)
    return 0


def _loss(model: Any, batch: dict[str, Any]) -> Any:
    """GRPO's loss shape: each episode's mean log-probability of its trained tokens, times its advantage."""
    import torch

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1 : -1].float()
    logps = torch.log_softmax(logits, dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    trained = batch["completion_mask"] * batch["tool_mask"]
    per_episode = (logps * trained).sum(dim=1) / trained.sum(dim=1).clamp(min=1)
    return -(per_episode * batch["advantages"]).mean()


async def _updates(kept: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` updates' first two groups, padded as TRL pads them (prompts left, completions right)."""
    import torch
    from trl.trainer.utils import pad

    from dreamgym.agents import episode_sequence, link_turns
    from dreamgym.jobs._demo_settings import DemoSettings
    from dreamgym.replay import LmdbReplayStore

    settings = DemoSettings(out=kept)
    episodes: dict[str, list[Any]] = {}
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        for task in await store.task_ids(source="real"):
            for step in await store.get_steps(await store.task_seqs(task, source="real")):
                if step.group_id.startswith("train/") and step.policy_tokens is not None:
                    episodes.setdefault(step.episode_id, []).append(step)
    by_group: dict[str, list[Any]] = {}
    for steps in episodes.values():
        steps.sort(key=lambda step: step.step_index)
        by_group.setdefault(steps[0].group_id, []).append(
            episode_sequence(link_turns([step.policy_tokens for step in steps]))
        )
    batches = []
    for update in range(count):
        groups = [by_group.get(f"train/u{update}/g{n}", []) for n in (0, 1)]
        if not all(groups):
            continue
        sequences = [sequence for group in groups for sequence in group]

        def padded(rows: list[Any], side: str) -> Any:
            return pad([torch.tensor(row) for row in rows], padding_value=0, padding_side=side)

        batches.append({
            "prompt_ids": padded([s.prompt_ids for s in sequences], "left"),
            "prompt_mask": padded([[1] * len(s.prompt_ids) for s in sequences], "left"),
            "completion_ids": padded([s.completion_ids for s in sequences], "right"),
            "completion_mask": padded([[1] * len(s.completion_ids) for s in sequences], "right"),
            "tool_mask": padded([s.env_mask for s in sequences], "right"),
            "advantages": torch.linspace(-1.0, 1.0, len(sequences)),
        })  # fmt: skip
    return batches


if __name__ == "__main__":
    raise SystemExit(main())
