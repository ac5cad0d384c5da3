"""Probe: where a behaviour-cloned warm start lands on the named text-world family (validation games).

    python benchmarks/probes/textworld_warm_start.py [--train 16] [--val 20] [--epochs 3] [--commit-results]

The learning result needs a warm start between 0.1 and 0.7 on validation games. This plays the walkthrough
demonstrator on the family's training seeds (0..), builds the demo's tiny index policy on those pages,
behaviour-clones it (``dreamgym.trainer.warm_start``), and plays it greedily on validation seeds (2000..),
one episode per game, beside the walkthrough (1.0) and a uniform random policy (``textworld_family.py``).
One JSON line per run; ``--commit-results`` writes ``benchmarks/results/textworld_warm_start.json``.

First run (2026-12-06, 16 training games, 3 epochs): the demo's tiny index policy (4,096 positions) outgrew
its context on a validation episode (4,838 ids after a few turns: each turn repeats the state with its
20-50 commands), so an episode the policy cannot continue counts as a cut, not a win; a policy for this
family needs a longer context or a shorter history.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parents[1]))
import _report as report

from dreamgym.core import BackendError, Observation, Policy, Step, Task
from dreamgym.textworlds import COOKING_FAMILY, TextWorldEnv, WalkthroughDemonstrator, parse_text_world_tasks

MAX_STEPS = 20
log = logging.getLogger(__name__)


async def play(task: Task, seed: int, policy: Policy) -> tuple[list[Step], bool]:
    env = TextWorldEnv()
    observation: Observation = await env.reset(task, seed=seed)
    steps: list[Step] = []
    won, episode = False, uuid.uuid4().hex
    for index in range(MAX_STEPS):
        try:
            decision = await policy.act(task, steps, observation)
        except BackendError as exc:  # e.g. the episode outgrew the policy's context: a cut, not a loss
            log.warning("seed %d cut after %d steps: %s", seed, index, exc)
            break
        result = await env.step(decision.action)
        steps.append(Step(source="real", task_id=task.task_id, episode_id=episode, step_index=index,
                          observation=observation, action=decision.action, next_observation=result.observation,
                          reward=result.reward, terminated=result.terminated, truncated=result.truncated,
                          truncation_reason=result.truncation_reason, seed=seed, site="textworld",
                          policy_tokens=decision.tokens))  # fmt: skip
        observation = result.observation
        if result.terminated or result.truncated:
            won = result.terminated and result.reward >= 1.0
            break
    await env.aclose()
    return steps, won


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=16, help="training games (seeds 0..)")
    parser.add_argument("--val", type=int, default=20, help="validation games (seeds 2000..)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--commit-results", action="store_true")
    args = parser.parse_args()
    report.commit()

    import torch

    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.trainer import WarmStartConfig, demonstrations, tiny_index_policy, warm_start

    torch.manual_seed(0)
    task = parse_text_world_tasks(COOKING_FAMILY, max_steps=MAX_STEPS)[0][0]
    demonstrator = WalkthroughDemonstrator(seeds=range(args.train))
    episodes = [anyio.run(play, task, seed, demonstrator)[0] for seed in range(args.train)]
    pages = [(task, page) for episode in episodes for step in episode
             for page in (step.observation, step.next_observation)]  # fmt: skip
    model, tokenizer = tiny_index_policy(pages, seed=0)
    config = LocalPolicyConfig(mode="index", temperature=0.0, seed=0, list_actions=False)
    policy = LocalPolicy(model, tokenizer, name="tw-warm", config=config, limiter=anyio.CapacityLimiter(1))
    examples, skipped = demonstrations(policy, episodes, [task])
    fit = warm_start(policy, examples, WarmStartConfig(epochs=args.epochs, learning_rate=1e-3, batch_size=4,
                                                       lm_weight=1.0, accuracy_examples=128))  # fmt: skip
    wins = [anyio.run(play, task, seed, policy)[1] for seed in range(2000, 2000 + args.val)]
    row: dict[str, Any] = {
        "figure": "textworld_warm_start_success", "family": COOKING_FAMILY, "value": round(sum(wins) / len(wins), 4),
        "wins": sum(wins), "games": len(wins), "train_games": args.train, "examples": fit.examples,
        "skipped_steps": skipped, "epochs": args.epochs, "label_accuracy": round(fit.accuracy, 4),
        "first_loss": round(fit.first_loss, 4), "last_loss": round(fit.last_loss, 4), "max_steps": MAX_STEPS,
    }  # fmt: skip
    print(json.dumps(row), flush=True)
    if args.commit_results:
        out = Path(__file__).parents[1] / "results" / "textworld_warm_start.json"
        out.write_text(json.dumps({**report.provenance(), "textworld": "1.7.0", "rows": [row]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
