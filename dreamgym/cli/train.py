"""``dreamgym train``: GRPO on MiniWoB++ tasks, synthetic, mixed or sim-to-real, evaluated on held-out real seeds."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from dreamgym.cli._common import (
    RUN_TASKS_HELP,
    add_served_sim_arguments,
    add_site_argument,
    add_worker_arguments,
    experience_model_source,
    parse_seeds,
    parse_tasks,
    run_tasks,
    webarena_sites,
    worker_config,
)

__all__ = ["add_train_command", "train_config"]


COMMAND_DEFAULTS: dict[str, Any] = {"updates": 20}
"""What the command line gives a required ``TrainConfig`` field unless told (every other default is the field's)."""


def add_train_command(commands: Any, *, config_flags: bool = True) -> None:
    """Register ``train`` on the CLI's subparsers.

    Every :class:`~dreamgym.trainer.TrainConfig` field is a flag, its docstring
    the help (``--lr`` is ``--learning-rate``, ``--out`` is ``--output-dir``);
    ``config_flags=False`` leaves them out, so a command line that is not
    running ``train`` does not import the trainer.
    """
    train = commands.add_parser("train", help="train a local policy with GRPO: synthetic, mixed or sim2real")
    train.add_argument("--config", type=Path, default=None,
                       help="a JSON or TOML file of TrainConfig fields (e.g. updates = 40, [lora] r = 8); "
                            "flags override it")  # fmt: skip
    train.add_argument("--store", type=Path, required=True, help="training store; collect real steps into it first")
    train.add_argument("--eval-store", type=Path, default=None, help="held-out episodes' store (OUT/eval-store)")
    train.add_argument("--tasks", default="click-tab,click-checkboxes,enter-text", help=RUN_TASKS_HELP)
    train.add_argument("--eval-tasks", default=None,
                       help="held-out tasks, in --tasks' grammar (default: --tasks on --eval-seeds); tasks without "
                            "seeds (webarena:) are held out by task id, so these must be other tasks")  # fmt: skip
    add_site_argument(train)
    add_worker_arguments(train)
    train.add_argument("--train-seeds", default="0-23", help="seeds groups start from, e.g. '0-23'")
    train.add_argument("--eval-seeds", default="1000-1004", help="held-out seeds ('' for no evaluation)")
    train.add_argument("--max-steps", type=int, default=6, help="step limit of an episode")
    train.add_argument("--temperature", type=float, default=1.0, help="the policy's sampling temperature")
    train.add_argument(
        "--policy-mode", choices=("index", "generate"), default="index",
        help="index: draw the label token of a listed candidate (adds the labels to a model without them); "
        "generate: sample a tagged reply. A chooser is not trainable",
    )  # fmt: skip
    train.add_argument("--policy-model", type=Path, default=None, help="chat model directory (default: SmolLM2-135M)")
    train.add_argument(
        "--sim-model",
        default="default",
        help="experience model directory, or 'default' (with --sim-url: the served model's name)",
    )
    add_served_sim_arguments(train, "--sim-model")
    train.add_argument("--curriculum-url", default=None,
                       help="OpenAI-compatible /v1 URL of the model that varies tasks (with --curriculum)")  # fmt: skip
    train.add_argument("--curriculum-model", default=None, help="that model's name")
    train.add_argument("--no-resume", action="store_true", help="start afresh even if OUT has checkpoints")
    train.add_argument("--json", action="store_true", help="print the result as JSON")
    if config_flags:
        from dreamgym.cli._config import add_config_flags
        from dreamgym.trainer._config import TrainConfig

        group = train.add_argument_group("training settings (TrainConfig; --config FILE sets the same fields)")
        add_config_flags(
            group,
            TrainConfig,
            aliases={"learning_rate": ["--lr"], "output_dir": ["--out"]},
            helps={"output_dir": "run directory: checkpoints, metrics, TensorBoard (required)",
                   "mode": "synthetic, mixed or sim2real (required)",
                   "updates": f"policy updates (default: {COMMAND_DEFAULTS['updates']})"},
        )  # fmt: skip
    train.set_defaults(run=_run_train)


def train_config(args: argparse.Namespace) -> Any:
    """The run's ``TrainConfig``: the command's defaults, then ``--config FILE``, then the flags given.

    ``--lora-r 0`` is ``--no-lora``; ``--lora-r R`` alone sets ``alpha`` to ``2R``.

    Raises:
        UsageError: No mode or run directory, an unknown or ill-typed setting, or one ``TrainConfig`` refuses.
    """
    from dreamgym.cli._config import build_config, given_values, read_config_file
    from dreamgym.core.errors import ConfigError, UsageError
    from dreamgym.trainer import TrainConfig

    file_values = read_config_file(args.config) if args.config is not None else {}
    flags = given_values(args, TrainConfig)
    lora = flags.get("lora")
    if isinstance(lora, dict) and lora.get("r") == 0:
        flags["lora"] = None
    elif isinstance(lora, dict) and "r" in lora and "alpha" not in lora:
        lora["alpha"] = 2 * lora["r"]
    for name, flag in (("mode", "--mode synthetic|mixed|sim2real"), ("output_dir", "--out DIR")):
        if name not in flags and name not in file_values:
            raise UsageError(f"give {flag} (or {name} in --config)")
    where = f"--config {args.config}" if args.config is not None else "train"
    try:
        return build_config(TrainConfig, COMMAND_DEFAULTS, file_values, flags, where=where)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _run_train(args: argparse.Namespace) -> int:
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.core.errors import ConfigError, UsageError
    from dreamgym.jobs import StackSettings, held_out, real_envs_for, stack_sides
    from dreamgym.offline import smollm2_checkpoint
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import Trainer, demonstrations, sft_refit

    tasks, seeded = run_tasks(args)
    workers = worker_config(args)
    train_seeds = parse_seeds(args.train_seeds)
    eval_seeds = parse_seeds(args.eval_seeds) if args.eval_seeds.strip() else []
    eval_tasks = tasks
    if args.eval_tasks is not None:
        eval_tasks, _ = parse_tasks(args.eval_tasks, args.site, max_steps=args.max_steps)
    sites = webarena_sites(args, [*tasks, *eval_tasks])  # a missing answer judge is found before any model loads
    if not seeded:  # held out by task id: a seed means nothing to these tasks
        if args.eval_tasks is None and eval_seeds:
            raise UsageError("these tasks have no seeds, so held-out means other tasks: give --eval-tasks "
                             "(or --eval-seeds '' for no evaluation)")  # fmt: skip
        if shared := sorted({t.task_id for t in tasks} & {t.task_id for t in eval_tasks}):
            raise UsageError(f"--eval-tasks shares {shared[0]} with --tasks; held-out tasks must be unseen")
        eval_seeds = eval_seeds[:1]  # each held-out task once
    if seeded and eval_seeds:
        train_seeds = _apart_from_held_out(tasks, eval_tasks, train_seeds, eval_seeds)
    held = (
        held_out([task.task_id for task in eval_tasks], eval_seeds)
        if seeded
        else tuple((task.task_id, None) for task in eval_tasks)
    )
    config = train_config(args)
    if config.anchor_weight > 0 and args.policy_mode != "index":
        raise UsageError("--anchor-weight trains an index policy's label tokens: use --policy-mode index")
    shown = _anchor_episodes(args, tasks, train_seeds) if config.anchor_weight > 0 else []
    curriculum = None
    if config.curriculum is not None:
        if not (args.curriculum_url and args.curriculum_model):
            raise UsageError("--curriculum varies tasks with a chat model: give --curriculum-url URL and "
                             "--curriculum-model NAME (an OpenAI-compatible server)")  # fmt: skip
        from dreamgym.simulator import OpenAIBackend

        curriculum = OpenAIBackend(model=args.curriculum_model, base_url=args.curriculum_url)
    sim_model = None
    if config.needs_synthetic:
        sim_model = experience_model_source(args, args.sim_model, "--sim-model")
        if not isinstance(sim_model, Path) and config.sim_refit_every:
            raise UsageError("--sim-refit-every refits the experience model's weights: it needs a local model, "
                             "not --sim-url")  # fmt: skip
        if isinstance(sim_model, Path) and not (sim_model / "config.json").exists():
            hint = " (build it with `make sim-default`)" if args.sim_model == "default" else ""
            raise ConfigError(f"no experience model at {sim_model}{hint}")
    if not args.store.exists() and config.needs_synthetic:
        print(f"note: {args.store} is new; the simulator will write first pages itself. Collect real steps first "
              "(dreamgym collect) to start groups from real pages and ground retrieval.")  # fmt: skip
    policy_dir = args.policy_model or smollm2_checkpoint()
    policy_config = LocalPolicyConfig(  # loaded where TRL trains it
        mode=args.policy_mode, temperature=args.temperature, seed=config.seed, list_actions=False, device=config.device
    )
    policy = LocalPolicy.load(policy_dir, config=policy_config)
    anchor, _ = demonstrations(policy, shown, tasks)
    refit = None
    if config.sim_refit_every and isinstance(sim_model, Path):
        base, refits = sim_model, config.output_dir / "sim-refits"
        refit = lambda limiter: sft_refit(refits, base=base, exclude_task_seeds=held, limiter=limiter)  # noqa: E731
    stack = StackSettings(
        store=args.store,
        eval_store=args.eval_store or config.output_dir / "eval-store",
        sim_model=sim_model,
        sim_attempts=args.sim_attempts,
        exclude_task_seeds=held,
        sites=tuple(sites),
        refit=refit,
        curriculum_backend=curriculum,
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=1 if args.reset_command else 2),
        workers=workers,
        real_envs=real_envs_for([*tasks, *eval_tasks]),
    )
    trainer = Trainer(
        config,
        policy=policy,
        tasks=tasks,
        open_sides=stack_sides(stack),
        train_seeds=train_seeds,
        eval_tasks=eval_tasks,
        eval_seeds=eval_seeds,
        anchor=anchor,
    )
    with contextlib.redirect_stdout(sys.stderr):  # TRL prints its logs; stdout carries only the result
        try:
            result = trainer.train(resume=not args.no_resume)
        finally:
            trainer.end()
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


def _apart_from_held_out(tasks: list[Any], eval_tasks: list[Any], train_seeds: list[int],
                         eval_seeds: list[int]) -> list[int]:  # fmt: skip
    """The training seeds whose games no held-out seed of the same text-world task makes (small generated
    worlds repeat across seeds: told apart by content, ``dreamgym.textworlds.seeds_apart``); other tasks'
    seeds as given."""
    from dreamgym.textworlds import is_text_world, seeds_apart

    held_ids = {task.task_id for task in eval_tasks}
    kept = list(train_seeds)
    for task in tasks:
        if is_text_world(task) and task.task_id in held_ids:
            kept = seeds_apart(task, kept, eval_seeds)
    if dropped := sorted(set(train_seeds) - set(kept)):
        print(f"note: training seeds {dropped} make held-out seeds' games; left out", file=sys.stderr)
    return kept


def _anchor_episodes(args: argparse.Namespace, tasks: list[Any], train_seeds: list[int]) -> list[Any]:
    """``--anchor-weight``'s demonstrations: the scripted demonstrator's real episodes in ``--store`` on the
    training tasks and seeds (``dreamgym collect --policy demonstrator`` writes them)."""
    import anyio

    from dreamgym.bridge import MiniWobDemonstrator
    from dreamgym.core.errors import UsageError
    from dreamgym.jobs import policy_episodes
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.textworlds import WalkthroughDemonstrator, is_text_world

    demonstrator = MiniWobDemonstrator.policy_id
    if tasks and all(is_text_world(task) for task in tasks):
        demonstrator = WalkthroughDemonstrator.policy_id

    async def read() -> list[Any]:
        if not args.store.exists():
            return []
        async with LmdbReplayStore(args.store, readonly=True) as store:
            ids = [task.task_id for task in tasks]
            return await policy_episodes(store, ids, demonstrator, seeds=train_seeds)

    episodes = anyio.run(read)
    if not episodes:
        raise UsageError(f"--anchor-weight anchors to the scripted demonstrator's episodes in {args.store} on the "
                         "training tasks and seeds, and it holds none: collect them first (dreamgym collect "
                         "--policy demonstrator --tasks ... --seeds ...)")  # fmt: skip
    return episodes
