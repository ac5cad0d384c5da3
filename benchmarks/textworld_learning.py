"""Real-only GRPO of the tiny index policy on the named text-world family, from a behaviour-cloned warm start.

    python benchmarks/textworld_learning.py                   # the full run (hours on 2 CPU cores)
    python benchmarks/textworld_learning.py --quick           # a test-sized run of the same steps (minutes)
    python benchmarks/textworld_learning.py --commit-results  # also write benchmarks/results/textworld_learning.json

On ``COOKING_FAMILY`` (``dreamgym.textworlds``; TextWorld 1.7.0):

1. Games: the demonstrations' (``--bc-seeds``), the validation games (``--val-seeds``), the training games
   (``--train-seeds``) and the held-out games (``--held-out-seeds``). Small worlds can repeat, so every
   demonstration, validation and training seed whose game has a held-out game's content hash is left out
   (:func:`split_games`); the row ``held_out_games`` says how many were and that none is left.
2. The walkthrough demonstrator plays each demonstration game, really.
3. The tiny index policy (``dreamgym.trainer.tiny_index_policy``: its tokenizer learns the demonstrations'
   pages) with ``policy_context(max_steps)`` positions: a text-world turn is ~1,000 tokens, past the
   default 4,096 positions by the fourth step.
4. The warm start, sized on the validation games: behaviour-clone in stages (``--warm-epochs``, each
   continuing the last) and evaluate each greedily; keep the first whose success lies in [0.1, 0.7]
   (else the one nearest 0.4).
5. Real-only GRPO from it (``Trainer``, mixed mode, every group real), evaluated greedily on every held-out
   game at update 0 and at the end, and the two compared game by game (exact McNemar p,
   ``dreamgym.trainer.paired_comparison``).

Prints JSON lines: one per warm-start size, the split, and the figure (held-out success at the end beside
update 0, with the paired counts and p).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))
import _report as report

RESULTS = Path(__file__).resolve().parent / "results"
WARM_RANGE = (0.1, 0.7)
QUICK = {
    "bc_seeds": "0-5",
    "val_seeds": "2000-2003",
    "held_out_seeds": "1000-1005",
    "train_seeds": "100-109",
    "warm_epochs": "1",
    "updates": 1,
    "group_size": 2,
    "groups_per_update": 1,
    "max_steps": 6,
}
"""``--quick``: every step of the full run on a handful of games (a probe of the pipeline, not a figure)."""


def main() -> int:
    args = _arguments()
    report.commit()  # the code that runs, not whatever HEAD is when it ends
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "filelock", "transformers", "dreamgym.runtime", "dreamgym.textworlds"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    from dreamgym.textworlds import COOKING_FAMILY, parse_text_world_tasks

    tasks, _ = parse_text_world_tasks(COOKING_FAMILY, max_steps=args.max_steps)
    games = split_games(tasks[0], **{name: _seeds(getattr(args, name)) for name in SPLITS})
    print(json.dumps({"held_out_games": games.summary()}), flush=True)
    demos = anyio.run(_demonstrations, args, tasks, games.bc_seeds)
    model, tokenizer = _build_policy(args, tasks, demos)
    warm, tuning = _tune_warm_start(args, tasks, games, demos, model, tokenizer)
    run = _train(args, tasks, games, warm, tokenizer)
    result = {**report.provenance(), "family": COOKING_FAMILY, "textworld": _textworld_version(),
              "quick": args.quick, "settings": report.settings(args), "games": games.summary(),
              "warm_start_tuning": tuning, **run, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    start, end, paired = run["start"], run["end"], run["paired"]
    figure = report.emit(
        "textworld_learning/held_out_success", end["successes"] / max(1, end["n"]), "held-out success rate",
        "the warm start (update 0)", start["successes"] / max(1, start["n"]), updates=run["updates"],
        n=end["n"], only_after=paired["only_after"], only_before=paired["only_before"],
        paired_p=paired["p_value"], end_beats_start=paired["only_after"] > paired["only_before"],
        quick=args.quick,
    )  # fmt: skip
    result["rows"] = [figure]
    text = json.dumps(result, indent=1) + "\n"
    (args.out / "textworld_learning.json").write_text(text)
    if args.commit_results:
        (RESULTS / "textworld_learning.json").write_text(text)
        print(f"wrote {RESULTS / 'textworld_learning.json'}", file=sys.stderr)
    return 0


SPLITS = ("bc_seeds", "val_seeds", "train_seeds", "held_out_seeds")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bc-seeds", default="0-79", help="games the walkthrough demonstrator plays for cloning")
    parser.add_argument("--val-seeds", default="2000-2029", help="games the warm start is sized on")
    parser.add_argument("--held-out-seeds", default="1000-1119", help="reported games: each once, before and after")
    parser.add_argument("--train-seeds", default="100-499", help="games real GRPO groups start from")
    parser.add_argument("--warm-epochs", default="0.5,1,2,3", help="warm-start sizes to try, in order")
    parser.add_argument("--warm-lr", type=float, default=1e-3)
    parser.add_argument("--warm-batch", type=int, default=4)
    parser.add_argument("--warm-lm-weight", type=float, default=1.0, help="WarmStartConfig.lm_weight")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-update", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--resample-flat", type=int, default=2, help="TrainConfig.resample_flat")
    parser.add_argument("--temperature", type=float, default=0.5, help="the training temperature")
    parser.add_argument("--max-steps", type=int, default=8, help="step limit (the walkthroughs take 5)")
    parser.add_argument("--contexts", type=int, default=2, help="real episodes in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(".cache/bench/textworld-learning"))
    parser.add_argument("--quick", action="store_true", help="a test-sized run: " + json.dumps(QUICK))
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/")
    args = parser.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    return args


def _seeds(text: str) -> list[int]:
    from dreamgym.cli._common import parse_seeds

    return list(parse_seeds(text))


def _textworld_version() -> str:
    from importlib.metadata import version

    return version("textworld")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Games:
    """The seeds of each role, with every game that repeats a held-out game left out of the others."""

    bc_seeds: tuple[int, ...]
    val_seeds: tuple[int, ...]
    train_seeds: tuple[int, ...]
    held_out_seeds: tuple[int, ...]
    held_out_hashes: frozenset[str]
    dropped: dict[str, tuple[int, ...]]
    """Per role, the seeds left out because their game is a held-out game."""
    hashes: dict[str, frozenset[str]]
    """Per role, the content hashes of its kept games."""

    def summary(self) -> dict[str, Any]:
        shared = sum(len(self.hashes[role] & self.held_out_hashes) for role in ("bc", "val", "train"))
        return {
            "held_out": len(self.held_out_seeds),
            "held_out_distinct": len(self.held_out_hashes),
            "dropped": {role: list(seeds) for role, seeds in self.dropped.items()},
            "held_out_hashes_in_other_roles": shared,
        }


def split_games(
    task: Any, *, bc_seeds: Sequence[int], val_seeds: Sequence[int], train_seeds: Sequence[int],
    held_out_seeds: Sequence[int],
) -> Games:  # fmt: skip
    """The roles' seeds, each without the seeds whose game (told apart by content hash) a held-out seed makes.

    Generates the games the cache lacks (a second or so each).
    """
    from dreamgym.textworlds import game_for

    def hashes(seeds: Sequence[int]) -> dict[int, str]:
        return {seed: game_for(task, seed).content_hash for seed in seeds}

    held = hashes(held_out_seeds)
    held_hashes = frozenset(held.values())
    kept: dict[str, tuple[int, ...]] = {}
    dropped: dict[str, tuple[int, ...]] = {}
    found: dict[str, frozenset[str]] = {}
    for role, seeds in (("bc", bc_seeds), ("val", val_seeds), ("train", train_seeds)):
        made = hashes(seeds)
        kept[role] = tuple(seed for seed in seeds if made[seed] not in held_hashes)
        dropped[role] = tuple(seed for seed in seeds if made[seed] in held_hashes)
        found[role] = frozenset(made[seed] for seed in kept[role])
    return Games(
        bc_seeds=kept["bc"], val_seeds=kept["val"], train_seeds=kept["train"], held_out_seeds=tuple(held_out_seeds),
        held_out_hashes=held_hashes, dropped=dropped, hashes=found,
    )  # fmt: skip


def _stack(args: argparse.Namespace, tasks: list[Any], path: Path, *, eval_store: Path | None = None) -> Any:
    from dreamgym.jobs import StackSettings, real_envs_for
    from dreamgym.replay import HashingEmbedder, StoreConfig
    from dreamgym.runtime import RuntimeConfig

    shutil.rmtree(path, ignore_errors=True)
    return StackSettings(
        store=path, eval_store=eval_store, embedder=HashingEmbedder(64), store_config=StoreConfig(auto_index=False),
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=args.contexts),
        real_envs=real_envs_for(tasks),
    )  # fmt: skip


async def _demonstrations(args: argparse.Namespace, tasks: list[Any], seeds: Sequence[int]) -> list[list[Any]]:
    """The walkthrough demonstrator's episode of each demonstration game; each episode's steps in order."""
    from dreamgym.jobs import open_runtime
    from dreamgym.textworlds import WalkthroughDemonstrator
    from dreamgym.trainer import evaluate

    demonstrator = WalkthroughDemonstrator(seeds=seeds)
    async with open_runtime(_stack(args, tasks, args.out / "demos"), lambda _limiter: demonstrator) as (runtime, _):
        result = await evaluate(runtime, tasks, list(seeds), label="demos")
        steps = await runtime.store.get_steps(await runtime.store.task_seqs(tasks[0].task_id, source="real"))
    episodes: dict[str, list[Any]] = {}
    for step in sorted(steps, key=lambda s: (s.episode_id, s.step_index)):
        episodes.setdefault(step.episode_id, []).append(step)
    logging.info("demonstrations: %d of %d games won, %d steps", result.successes, result.episodes, len(steps))
    return list(episodes.values())


def _build_policy(args: argparse.Namespace, tasks: list[Any], demos: list[list[Any]]) -> tuple[Any, Any]:
    from dreamgym.textworlds import policy_context
    from dreamgym.trainer import TINY_POLICY, tiny_index_policy

    pages = [(tasks[0], page) for episode in demos for step in episode
             for page in (step.observation, step.next_observation)]  # fmt: skip
    shape = dataclasses.replace(TINY_POLICY, max_positions=policy_context(args.max_steps))
    return tiny_index_policy(pages, shape, seed=args.seed)


def _policy(model: Any, tokenizer: Any, args: argparse.Namespace, *, temperature: float, limiter: Any = None) -> Any:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig

    config = LocalPolicyConfig(mode="index", temperature=temperature, seed=args.seed, list_actions=False)
    return LocalPolicy(model, tokenizer, name="tiny-index", config=config, limiter=limiter)


def _tune_warm_start(
    args: argparse.Namespace, tasks: list[Any], games: Games, demos: list[list[Any]], model: Any, tokenizer: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Clone in stages, each evaluated greedily on the validation games; the first size in ``WARM_RANGE``."""
    from dreamgym.trainer import WarmStartConfig, demonstrations, warm_start

    tuning: list[dict[str, Any]] = []
    best: tuple[float, Any] | None = None
    policy = _policy(model, tokenizer, args, temperature=0.0)
    examples, skipped = demonstrations(policy, demos, tasks)
    done = 0.0
    for epochs in (float(e) for e in str(args.warm_epochs).split(",")):
        config = WarmStartConfig(epochs=epochs - done, learning_rate=args.warm_lr, batch_size=args.warm_batch,
                                 seed=args.seed + len(tuning), lm_weight=args.warm_lm_weight)  # fmt: skip
        fit = warm_start(policy, examples, config)
        done = epochs
        scores = _scores(anyio.run(_evaluate, args, tasks, model, tokenizer, games.val_seeds, f"val-{epochs}"))
        row = {"epochs": epochs, "examples": fit.examples, "skipped_steps": skipped, "updates": fit.updates,
               "loss": [round(fit.first_loss, 4), round(fit.last_loss, 4)], "label_accuracy": round(fit.accuracy, 4),
               **scores}  # fmt: skip
        tuning.append(row)
        print(json.dumps({"warm_start": row}), flush=True)
        success = scores["successes"] / max(1, scores["n"])
        if WARM_RANGE[0] <= success <= WARM_RANGE[1]:
            return model, tuning
        if best is None or abs(success - 0.4) < best[0]:
            best = (abs(success - 0.4), copy.deepcopy(model))
    assert best is not None
    logging.warning("no warm-start size put validation success in %s; the nearest 0.4 kept", WARM_RANGE)
    return best[1], tuning


async def _evaluate(
    args: argparse.Namespace, tasks: list[Any], model: Any, tokenizer: Any, seeds: Sequence[int], label: str
) -> Any:
    from dreamgym.jobs import open_runtime
    from dreamgym.trainer import evaluate

    policy = functools.partial(_policy, model, tokenizer, args, temperature=0.0)
    stack = _stack(args, tasks, args.out / "val" / label)
    async with open_runtime(stack, lambda limiter: policy(limiter=limiter)) as (runtime, _):
        return await evaluate(runtime, tasks, list(seeds), label=label)


def _scores(result: Any) -> dict[str, Any]:
    low, high = result.interval
    return {"successes": result.successes, "n": result.episodes, "ci_low": round(low, 4), "ci_high": round(high, 4),
            "cut": result.cut, "steps": result.steps}  # fmt: skip


def _train(args: argparse.Namespace, tasks: list[Any], games: Games, model: Any, tokenizer: Any) -> dict[str, Any]:
    """Real-only GRPO from the warm start; held-out success at update 0 and at the end, compared pair by pair."""
    from dreamgym.jobs import stack_sides
    from dreamgym.trainer import TrainConfig, Trainer, paired_comparison

    root = args.out / "grpo"
    shutil.rmtree(root, ignore_errors=True)
    config = TrainConfig(
        mode="mixed", real_share=1.0, updates=args.updates, output_dir=root / "run", group_size=args.group_size,
        groups_per_update=args.groups_per_update, learning_rate=args.lr, lora=None, eval_every=0,
        resample_flat=args.resample_flat, seed=args.seed, report_to=(),
    )  # fmt: skip
    stack = _stack(args, tasks, root / "store", eval_store=root / "eval-store")
    trainer = Trainer(
        config, policy=_policy(model, tokenizer, args, temperature=args.temperature), tasks=tasks,
        open_sides=stack_sides(stack), train_seeds=list(games.train_seeds), eval_seeds=list(games.held_out_seeds),
        eval_temperature=0.0,
    )  # fmt: skip
    result = trainer.train(resume=False)
    (first_update, first), (last_update, last) = result.evaluations[0], result.evaluations[-1]
    return {
        "updates": last_update,
        "start": {"update": first_update, **_scores(first)},
        "end": {"update": last_update, **_scores(last)},
        "paired": paired_comparison(first, last).as_dict(),
        "trainer": result.state.as_dict(),
        "train_seconds": round(result.seconds, 1),
    }


if __name__ == "__main__":
    raise SystemExit(main())
