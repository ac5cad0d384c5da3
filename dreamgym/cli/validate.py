"""``dreamgym validate``: the simulator against real steps, written as ``validation.json`` and ``report.html``.

Which store is which: ``--store`` holds the real steps to validate on
(collected, or recorded in shadow mode); retrieval reads ``--retrieval``,
by default the store the model was trained from (its metadata's ``store``)
when that exists, else ``--store``. ``--model default`` without ``--store``
validates on the offline default's held-out seeds. Retrieval never returns
the evaluated episode, a ``--held-out`` pair, or a pair the model's metadata
lists as held out.

``--live`` validates on a live site: it first plays ``--tasks`` there with
``--policy`` (scripted, random, a local model or a served chat model), into
``--store`` (a new store: a record of the run, not indexed), then predicts
every real step it played as on a stored collection, with the same figures
and report. What it plays never reaches retrieval: the (task, seed) pairs
of seeded tasks, tasks without seeds whole.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from dreamgym.cli._common import (
    RUN_TASKS_HELP,
    add_served_arguments,
    add_served_sim_arguments,
    add_site_argument,
    add_worker_arguments,
    check_served,
    experience_model_source,
    hold_outs,
    open_store,
    parse_tasks,
    served_backend,
)
from dreamgym.cli._config import add_config_file_option

__all__ = ["add_validate_command"]


def add_validate_command(commands: Any) -> None:
    """Register ``validate`` on the CLI's subparsers."""
    parser = commands.add_parser("validate", help="validate the simulator against real steps; writes a report")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="store of real steps to validate on (default with --model default: its held-out seeds)",
    )
    parser.add_argument(
        "--retrieval",
        type=Path,
        default=None,
        help="store retrieval reads (default: the model's training store if it exists, else --store)",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="trained model directory, or 'default' (with --sim-url: the served model's name)",
    )
    add_served_sim_arguments(parser, "--model")
    parser.add_argument(
        "--held-out",
        action="append",
        default=[],
        metavar="TASK[:SEED]",
        help="validate only these pairs and keep them out of retrieval; repeatable",
    )
    parser.add_argument(
        "--tasks",
        default=None,
        help=f"validate only these tasks ({RUN_TASKS_HELP}); tasks without seeds (webarena:) are also kept out "
        "of retrieval whole (default: every task of --store)",
    )
    add_site_argument(parser, episodes=False)
    parser.add_argument(
        "--limit", type=int, default=0, help="at most this many steps, whole episodes spread over the tasks (0: all)"
    )
    parser.add_argument("--open-loop", type=int, default=0, metavar="K", help="drift curve to depth K (0: none)")
    parser.add_argument("--ablations", action="store_true", help="also without retrieval, history, reasoning")
    add_served_arguments(parser, "judge", "rubric judge", max_new_tokens=200)
    parser.add_argument("--judge-episodes", type=int, default=8, help="episodes the judge scores")
    parser.add_argument("--concurrency", type=int, default=8, help="predictions in flight at once")
    parser.add_argument("--max-new-tokens", type=int, default=384, help="token budget of each local prediction")
    parser.add_argument("--out", type=Path, required=True, help="directory for validation.json and report.html")
    live = parser.add_argument_group("a live site (--live)")
    live.add_argument(
        "--live",
        action="store_true",
        help="first play --tasks on the live site into --store (a new store), then validate on it",
    )
    live.add_argument("--policy", choices=("demonstrator", "random", "chat", "local"), default="random")
    live.add_argument("--policy-model", default=None, help="model directory (local) or model name (chat)")
    live.add_argument("--openai-url", default=None, help="OpenAI-compatible /v1 URL for --policy chat")
    live.add_argument("--seeds", default="0", help="seeds of seeded tasks (MiniWoB++), e.g. '0-4'")
    live.add_argument("--episodes", type=int, default=2, help="episodes per task (and seed)")
    live.add_argument("--max-steps", type=int, default=6, help="step limit of a live episode")
    live.add_argument("--real-concurrency", type=int, default=2, help="live episodes at once")
    live.add_argument("--temperature", type=float, default=1.0, help="the policy's sampling temperature")
    live.add_argument("--policy-max-new-tokens", type=int, default=512, metavar="N",
                      help="token budget of each answer of a served policy (--policy chat)")  # fmt: skip
    live.add_argument("--policy-timeout", type=float, default=120.0, metavar="S",
                      help="seconds each request of a served policy may take (a CPU server may answer at about a "
                           "token a second)")  # fmt: skip
    add_worker_arguments(parser)
    add_config_file_option(parser)
    parser.set_defaults(run=_run_validate)  # fmt: skip


def _run_validate(args: argparse.Namespace) -> int:
    import logging

    import anyio

    from dreamgym.core.errors import ConfigError
    from dreamgym.jobs.sim_default import ensure_held_out
    from dreamgym.simulator import read_metadata
    from dreamgym.validate import write_report

    named: list[tuple[str, int | None]] = []
    named_out: list[tuple[str, int | None]] = []
    if args.tasks is not None:  # checked before anything is opened
        tasks, seeded = parse_tasks(args.tasks, args.site)
        named = [(task.task_id, None) for task in tasks]
        if not seeded:  # one start per task: any other episode of it would leak its pages
            named_out = list(named)
        elif args.live:  # the (task, seed) pairs played live now are held out
            from dreamgym.cli._common import parse_seeds

            named_out = [(task.task_id, seed) for task in tasks for seed in parse_seeds(args.seeds)]
    model_dir = experience_model_source(args, str(Path(args.model).expanduser()), "--model")
    if args.live:
        _check_live(args)
        anyio.run(_play_live, args)
    if args.store is None:
        if args.model != "default":
            raise ConfigError("--store is required with a model other than 'default': the store of real steps")
        args.store = anyio.run(ensure_held_out)
    meta = read_metadata(model_dir) if isinstance(model_dir, Path) else {}
    if args.retrieval is None:
        trained_on = Path(meta.get("store") or args.store).expanduser()
        args.retrieval = trained_on if (trained_on / "data.mdb").exists() else args.store
    chosen = hold_outs(args.held_out)
    held_out = list(dict.fromkeys([*chosen, *named_out, *((task, seed) for task, seed in meta.get("held_out", []))]))
    chosen += named
    check_served(args, "judge")  # before anything is opened; _validate opens it

    if not getattr(args, "verbose", False):  # each unusable answer in the open loop would log a line
        logging.getLogger("dreamgym.simulator").setLevel(logging.WARNING)
    report, repeated = anyio.run(_validate, args, model_dir, meta, chosen, held_out)
    json_path, html_path = write_report(report, args.out)
    _print(report)
    _print_repeated(repeated, model_dir)
    print(f"wrote {json_path} and {html_path}")
    return 0


def _print_repeated(repeated: int, model_dir: Any) -> None:
    """The experience model's retries that repeated the attempt before them, and what to change when any did."""
    from dreamgym.simulator.backends import repeated_retry_advice

    advice = f": {repeated_retry_advice(str(model_dir), getattr(model_dir, 'url', None))}" if repeated else ""
    print(f"experience-model retries that repeated the attempt before them: {repeated}{advice}", file=sys.stderr)


async def _validate(
    args: argparse.Namespace,
    model_dir: Any,
    meta: dict[str, Any],
    chosen: list[tuple[str, int | None]],
    held_out: list[tuple[str, int | None]],
) -> tuple[Any, int]:
    """The validation report, and the experience model's retries that repeated the attempt before them."""
    import anyio

    from dreamgym.core.protocols import Sampling
    from dreamgym.core.types import Step, decode_record
    from dreamgym.simulator import load_experience_model
    from dreamgym.validate import ValidationConfig, ablation_variants, validate

    async with AsyncExitStack() as stack:
        real = await stack.enter_async_context(open_store(args.store, readonly=True))
        retrieval = real
        if args.retrieval.resolve() != args.store.resolve():
            retrieval = await stack.enter_async_context(open_store(args.retrieval, readonly=True))
        records = await anyio.to_thread.run_sync(lambda: list(real.iter_records("steps")))
        steps = [decode_record(data, Step) for _, data in records]
        if chosen:
            steps = [s for s in steps if any(s.task_id == t and seed in (None, s.seed) for t, seed in chosen)]
            if not any(s.source == "real" for s in steps):
                from dreamgym.core.errors import UsageError

                asked = ", ".join(t if seed is None else f"{t}:{seed}" for t, seed in chosen[:5])
                raise UsageError(f"{args.store} holds no real step of {asked} (--tasks, --held-out)")
        served = not isinstance(model_dir, Path)  # a served model samples as its --sim-* flags say
        model = load_experience_model(
            model_dir, sampling=None if served else Sampling(max_new_tokens=args.max_new_tokens),
            max_attempts=args.sim_attempts,
        )  # fmt: skip
        variants = None
        if args.ablations:
            variants = ablation_variants(model, trained_with_reasoning=bool(meta.get("trained_with_reasoning")))
        judge, judge_sampling = served_backend(args, "judge") or (None, None)
        if judge is not None:
            stack.push_async_callback(judge.aclose)
        config = ValidationConfig(
            neighbours=max(model.config.template.neighbours, 1),
            exclude_task_seeds=tuple(held_out),
            limit=args.limit,
            open_loop=args.open_loop,
            concurrency=args.concurrency,
            judge_episodes=args.judge_episodes,
            judge_sampling=judge_sampling,
        )
        report = await validate(model, steps, store=retrieval, config=config, ablations=variants, judge=judge)
        return report, model.stats.repeated_retries


def _live_policy_args(args: argparse.Namespace) -> argparse.Namespace:
    """The run arguments of the live policy (a chat policy's budget and timeout from --policy-max-new-tokens and
    --policy-timeout: --max-new-tokens here is the experience model's)."""
    return argparse.Namespace(**{**vars(args), "max_new_tokens": args.policy_max_new_tokens, "stop": None,
                                 "timeout": args.policy_timeout, "server_concurrency": 8,
                                 "concurrency": args.real_concurrency})  # fmt: skip


def _check_live(args: argparse.Namespace) -> None:
    """What --live needs, before anything is opened.

    Raises:
        UsageError: No --tasks or --store, a store that already holds steps, or run arguments that cannot work.
    """
    from dreamgym.cli._run import check_run_arguments
    from dreamgym.core.errors import UsageError

    if args.tasks is None or args.store is None:
        raise UsageError("--live plays --tasks into --store: give both (a new store)")
    if (args.store / "data.mdb").exists():
        raise UsageError(f"--live writes a new store of the live run; {args.store} already holds one")
    if args.episodes < 1 or args.real_concurrency < 1:
        raise UsageError("--episodes and --real-concurrency must be >= 1")
    if args.policy_max_new_tokens < 1 or args.policy_timeout <= 0:
        raise UsageError("--policy-max-new-tokens must be >= 1 and --policy-timeout above 0")
    check_run_arguments(_live_policy_args(args))


async def _play_live(args: argparse.Namespace) -> None:
    """Play every task (and seed) ``--episodes`` times on the live site with the policy, into ``--store``."""
    from dreamgym.cli._common import parse_seeds, webarena_sites, worker_config
    from dreamgym.cli._run import fail_if_nothing_ran, run_policy, summary
    from dreamgym.jobs import StackSettings, mixed_groups, open_runtime, real_envs_for
    from dreamgym.replay import HashingEmbedder, StoreConfig
    from dreamgym.runtime import RuntimeConfig

    run = _live_policy_args(args)
    tasks, seeded = parse_tasks(args.tasks, args.site, max_steps=args.max_steps)
    seeds: list[int | None] = list(parse_seeds(args.seeds)) if seeded else [None]
    settings = StackSettings(
        store=args.store,
        sites=tuple(webarena_sites(run, tasks)),
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=args.real_concurrency),
        embedder=HashingEmbedder(64),  # a record of the run, never searched here: its tasks stay out of retrieval
        store_config=StoreConfig(auto_index=False),
        workers=worker_config(run),
        real_envs=real_envs_for(tasks),
    )
    async with open_runtime(settings, lambda limiter: run_policy(run, limiter)) as (runtime, _):
        results = await runtime.run_groups(
            mixed_groups(tasks, seeds, size=args.episodes, real_share=1.0), label="play the tasks live"
        )
    print(f"live: {summary(results)}")
    fail_if_nothing_ran(results)


def _print(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"one step on {report.steps} real steps ({report.episodes} episodes, {report.tasks} tasks)")
    columns = ("reward_accuracy", "done_accuracy", "similarity", "f1", "hallucination_rate", "failures", "salvaged")
    rows = {**report.one_step, **{k: v for k, v in report.ablations.items() if k != "full"}}
    for column in ("", "n", "reward", "done", "similarity", "F1", "hallucination", "unusable", "salvaged"):
        table.add_column(column)
    for name, summary in rows.items():
        if isinstance(summary, str):
            table.add_row(name, "n/a", *("" for _ in columns))
            continue
        row = summary.as_dict()
        table.add_row(name, str(summary.n), *(str(row[c]) if c in ("failures", "salvaged") else f"{row[c]:.3f}"
                                              for c in columns))  # fmt: skip
    console.print(table)
    if report.open_loop:
        drift = Table(title="open loop: similarity (F1) after k simulated steps")
        drift.add_column("k")
        drift.add_column("n")
        for name in report.open_loop:
            drift.add_column(name)
        for k, model_point in enumerate(report.open_loop["model"], 1):
            cells = [f"{p[k - 1].similarity:.3f} ({p[k - 1].f1:.3f})" for p in report.open_loop.values()]
            drift.add_row(str(k), str(model_point.n), *cells)
        console.print(drift)
