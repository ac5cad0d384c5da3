"""``dreamgym train``: GRPO on MiniWoB++ tasks, synthetic, mixed or sim-to-real, evaluated on held-out real seeds."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from dreamgym._cli_run import RUN_TASKS_HELP, add_site_argument

__all__ = ["add_train_command", "miniwob_tasks"]


def add_train_command(commands: Any) -> None:
    """Register ``train`` on the CLI's subparsers."""
    train = commands.add_parser("train", help="train a local policy with GRPO: synthetic, mixed or sim2real")
    train.add_argument("--mode", choices=("synthetic", "mixed", "sim2real"), required=True)
    train.add_argument("--out", type=Path, required=True, help="run directory: checkpoints, metrics, TensorBoard")
    train.add_argument("--store", type=Path, required=True, help="training store; collect real steps into it first")
    train.add_argument("--eval-store", type=Path, default=None, help="held-out episodes' store (OUT/eval-store)")
    train.add_argument("--tasks", default="click-tab,click-checkboxes,enter-text", help=RUN_TASKS_HELP)
    train.add_argument("--eval-tasks", default=None,
                       help="held-out tasks, in --tasks' grammar (default: --tasks on --eval-seeds); tasks without "
                            "seeds (webarena:) are held out by task id, so these must be other tasks")  # fmt: skip
    add_site_argument(train)
    train.add_argument("--train-seeds", default="0-23", help="seeds groups start from, e.g. '0-23'")
    train.add_argument("--eval-seeds", default="1000-1004", help="held-out seeds ('' for no evaluation)")
    train.add_argument("--updates", type=int, default=20, help="policy updates")
    train.add_argument("--switch-at", type=int, default=0, help="sim2real: synthetic updates before the switch")
    train.add_argument("--real-share", type=float, default=0.25, help="mixed: share of real groups")
    train.add_argument("--group-size", type=int, default=4, help="G: episodes per group")
    train.add_argument("--groups-per-update", type=int, default=2)
    train.add_argument("--lr", type=float, default=1e-5, help="learning rate")
    train.add_argument("--beta", type=float, default=0.0, help="KL coefficient")
    train.add_argument("--lora-r", type=int, default=16, help="LoRA rank; 0 trains every weight")
    train.add_argument("--max-steps", type=int, default=6, help="step limit of an episode")
    train.add_argument("--temperature", type=float, default=1.0, help="the policy's sampling temperature")
    train.add_argument(
        "--policy-mode", choices=("index", "generate"), default="index",
        help="index: draw the label token of a listed candidate (adds the labels to a model without them); "
        "generate: sample a tagged reply. A chooser is not trainable",
    )  # fmt: skip
    train.add_argument("--eval-every", type=int, default=0, help="evaluate every N updates (and at start and end)")
    train.add_argument("--save-every", type=int, default=0, help="checkpoint every N updates (and at the end)")
    train.add_argument("--sim-refit-every", type=int, default=0, help="refit the experience model every N updates")
    train.add_argument("--policy-model", type=Path, default=None, help="chat model directory (default: SmolLM2-135M)")
    train.add_argument("--sim-model", default="default", help="experience model directory, or 'default'")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-resume", action="store_true", help="start afresh even if OUT has checkpoints")
    train.add_argument("--json", action="store_true", help="print the result as JSON")
    train.set_defaults(run=_run_train)


def miniwob_tasks(names: list[str], max_steps: int) -> list[Any]:
    """The MiniWoB++ tasks of these names (a task record needs no running site)."""
    from dreamgym.bridge import MiniWobSite

    site = MiniWobSite()
    try:
        return [site.task(name, max_steps=max_steps) for name in names]
    finally:
        site.close()


def _run_train(args: argparse.Namespace) -> int:
    from dreamgym._cli_run import parse_seeds, parse_tasks, run_tasks
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.core.errors import ConfigError, UsageError
    from dreamgym.offline import smollm2_checkpoint
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.sim_default import default_model_dir
    from dreamgym.trainer import LoraSettings, TrainConfig, Trainer
    from dreamgym.trainer._miniwob import MiniWobSides, held_out, miniwob_sides

    tasks, seeded = run_tasks(args)
    train_seeds = parse_seeds(args.train_seeds)
    eval_seeds = parse_seeds(args.eval_seeds) if args.eval_seeds.strip() else []
    eval_tasks = tasks
    if args.eval_tasks is not None:
        eval_tasks, _ = parse_tasks(args.eval_tasks, args.site, max_steps=args.max_steps)
    if not seeded:  # held out by task id: a seed means nothing to these tasks
        if args.eval_tasks is None and eval_seeds:
            raise UsageError("these tasks have no seeds, so held-out means other tasks: give --eval-tasks "
                             "(or --eval-seeds '' for no evaluation)")  # fmt: skip
        if shared := sorted({t.task_id for t in tasks} & {t.task_id for t in eval_tasks}):
            raise UsageError(f"--eval-tasks shares {shared[0]} with --tasks; held-out tasks must be unseen")
        eval_seeds = eval_seeds[:1]  # each held-out task once
    held = (
        held_out([task.task_id for task in eval_tasks], eval_seeds)
        if seeded
        else tuple((task.task_id, None) for task in eval_tasks)
    )
    config = TrainConfig(
        mode=args.mode,
        updates=args.updates,
        output_dir=args.out,
        group_size=args.group_size,
        groups_per_update=args.groups_per_update,
        learning_rate=args.lr,
        beta=args.beta,
        lora=LoraSettings(r=args.lora_r, alpha=2 * args.lora_r) if args.lora_r else None,
        real_share=args.real_share if args.mode == "mixed" else 0.25,
        switch_at=args.switch_at if args.mode == "sim2real" else 0,
        eval_every=args.eval_every,
        save_every=args.save_every,
        sim_refit_every=args.sim_refit_every,
        seed=args.seed,
    )
    sim_model = None
    if config.needs_synthetic:
        sim_model = default_model_dir() if args.sim_model == "default" else Path(args.sim_model)
        if not (sim_model / "config.json").exists():
            hint = " (build it with `make sim-default`)" if args.sim_model == "default" else ""
            raise ConfigError(f"no experience model at {sim_model}{hint}")
    if not args.store.exists() and config.needs_synthetic:
        print(f"note: {args.store} is new; the simulator will write first pages itself. Collect real steps first "
              "(dreamgym collect) to start groups from real pages and ground retrieval.")  # fmt: skip
    policy_dir = args.policy_model or smollm2_checkpoint()
    policy_config = LocalPolicyConfig(
        mode=args.policy_mode, temperature=args.temperature, seed=args.seed, list_actions=False
    )
    policy = LocalPolicy.load(policy_dir, config=policy_config)
    sites = []
    if not seeded or (args.eval_tasks or "").strip().startswith("webarena:"):
        from dreamgym.bridge import WebArenaSite, site_urls

        sites.append(WebArenaSite(site_urls(args.site)))
    sides = MiniWobSides(
        store=args.store,
        eval_store=args.eval_store or args.out / "eval-store",
        sim_model=sim_model,
        exclude_task_seeds=held,
        sites=tuple(sites),
        refit_dir=args.out / "sim-refits" if args.sim_refit_every else None,
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=2),
    )
    trainer = Trainer(
        config,
        policy=policy,
        tasks=tasks,
        open_sides=miniwob_sides(sides),
        train_seeds=train_seeds,
        eval_tasks=eval_tasks,
        eval_seeds=eval_seeds,
    )
    with contextlib.redirect_stdout(sys.stderr):  # TRL prints its logs; stdout carries only the result
        result = trainer.train(resume=not args.no_resume)
    summary = result.as_dict()
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{config.mode}: {result.state.update} updates in {result.seconds:.0f} s -> {result.final_dir}")
    cuts = ", ".join(f"{reason} {n}" for reason, n in sorted(result.state.cut_episodes.items())) or "none"
    print(f"real transitions used: {result.state.real_steps}; synthetic: {result.state.synthetic_steps}; "
          f"groups dropped: {result.state.dropped_groups}; episodes cut by the infrastructure: {cuts}")  # fmt: skip
    for update, evaluation in result.evaluations:
        low, high = evaluation.interval
        cut = f"; {evaluation.cut} cut by the infrastructure, not counted" if evaluation.cut else ""
        print(f"  held-out success after {update} updates: {evaluation.successes}/{evaluation.episodes} "
              f"({evaluation.success_rate:.2f}, 95% CI {low:.2f}-{high:.2f}{cut})")  # fmt: skip
    return 0
