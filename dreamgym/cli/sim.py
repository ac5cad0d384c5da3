"""``dreamgym sim ...``: train, build and evaluate experience models (see ``dreamgym.simulator``)."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from dreamgym.cli._common import (
    RUN_TASKS_HELP,
    add_served_arguments,
    add_served_sim_arguments,
    add_site_argument,
    experience_model_source,
    hold_outs,
    open_store,
    parse_tasks,
    served_backend,
)
from dreamgym.cli._config import add_config_file_option

__all__ = ["add_sim_commands"]


def add_sim_commands(commands: Any) -> None:
    """Register ``sim train``, ``sim build-default``, ``sim eval`` and ``sim check`` on the CLI's subparsers."""
    sim = commands.add_parser("sim", help="train, build and evaluate experience models")
    sub = sim.add_subparsers(title="sim commands", metavar="ACTION", required=True)

    train = sub.add_parser("train", help="fine-tune an experience model on a store's real transitions")
    train.add_argument("store", type=Path, help="replay store of real transitions")
    train.add_argument("-o", "--out", type=Path, required=True, help="directory the model is written to")
    train.add_argument("--base", default="scratch", help="'scratch', 'smollm2' or a local model directory")
    train.add_argument("--full", action="store_true", help="fine-tune every weight instead of LoRA adapters")
    train.add_argument("--epochs", type=float, default=3.0)
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--lr", type=float, default=None, help="learning rate (default depends on the base)")
    train.add_argument("--max-steps", type=int, default=-1, help="stop after this many optimizer steps")
    train.add_argument("--max-length", type=int, default=2048,
                       help="the longest example, in tokens: longer ones are left out, counted in a warning "
                            "(a text world's prompt can pass 2,048; the model's positions bound it) "
                            "(default: 2048)")  # fmt: skip
    train.add_argument("--device", default="auto",
                       help="where it trains: auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda, cuda:N "
                            "or mps (default: auto)")  # fmt: skip
    train.add_argument("--dtype", default="auto",
                       help="the passes' precision: auto (the weights as loaded, float32 on the CPU), float32, or "
                            "bfloat16 / float16 (mixed precision, on CUDA only) (default: auto)")  # fmt: skip
    train.add_argument("--history", type=int, default=1, help="past steps in the prompt (H)")
    train.add_argument("--neighbours", type=int, default=2, help="retrieved real transitions in the prompt (k)")
    train.add_argument("--output", choices=("diff", "state"), default="diff", help="predict a diff or the full page")
    train.add_argument("--past-actions", action="store_true",
                       help="name every earlier action of the episode before the action (what a step's end may "
                            "depend on beyond the --history steps)")  # fmt: skip
    train.add_argument("--target-line", action="store_true",
                       help="repeat the page's line of the element the action targets after the action (the line "
                            "a diff usually starts with, next to the answer)")  # fmt: skip
    train.add_argument("--target-alias", action="store_true",
                       help="show the element the action works on as [e0] in prompt and answer (read back to the "
                            "page's own id), so that a small model need not copy the action's id")  # fmt: skip
    train.add_argument("--relabel-ids", type=float, default=0.0, metavar="SHARE",
                       help="train this share of the examples with their element ids permuted among their pages' "
                            "own, prompt and answer alike, so the model reads which element the action names "
                            "(default: 0)")  # fmt: skip
    train.add_argument("--split", choices=("punctuation", "whitespace"), default=None,
                       help="how the scratch model's tokenizer cuts text before its merges: punctuation (GPT-2's "
                            "rule, the default) or whitespace (each run of non-space characters whole: fewer "
                            "tokens per page, faster training and prediction); --base scratch only")  # fmt: skip
    add_served_arguments(train, "teacher", "reasoning teacher", max_new_tokens=1024)
    train.add_argument("--hold-out", action="append", default=[], metavar="TASK[:SEED]",
                       help="leave a (task, seed) out of examples and retrieval; repeatable")  # fmt: skip
    train.add_argument(
        "--tasks",
        default=None,
        help=f"train on these tasks only ({RUN_TASKS_HELP}); the store's other tasks are held out of examples "
        "and retrieval, and the model's metadata lists them (default: all)",
    )
    add_site_argument(train, episodes=False)
    add_config_file_option(train)
    train.set_defaults(run=_run_train)

    default = sub.add_parser("build-default", help="collect MiniWoB++ and train the offline default model")
    default.add_argument("--force", action="store_true", help="rebuild even when the model exists")
    default.set_defaults(run=_run_build_default)

    evaluate = sub.add_parser("eval", help="one-step fidelity on real transitions, beside two baselines")
    evaluate.add_argument("store", type=Path, nargs="?", default=None,
                          help="store the simulator retrieves from (with --model default: the default's)")  # fmt: skip
    evaluate.add_argument("--steps", type=Path, default=None,
                          help="store of the real steps to predict (needed unless both store and model are the "
                               "default's, whose held-out seeds it then uses)")  # fmt: skip
    evaluate.add_argument("--held-out", action="append", default=[], metavar="TASK[:SEED]",
                          help="also keep a (task, seed) out of retrieval, as in validate; repeatable")  # fmt: skip
    evaluate.add_argument("--model", default="default",
                          help="local model directory, a Hugging Face id, or 'default' (with --sim-url: the served "
                               "model's name)")  # fmt: skip
    evaluate.add_argument("--limit", type=int, default=0, help="evaluate at most this many steps (0: all)")
    evaluate.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    evaluate.add_argument("--parity", type=int, default=0, metavar="N",
                          help="with --sim-url: instead of scoring, ask the server N prompts of --steps greedily "
                               "beside the same model in process, and check whether it samples and honours seed, stop "
                               "strings and structured output (one table)")  # fmt: skip
    evaluate.add_argument(
        "--parity-local",
        type=Path,
        default=None,
        metavar="DIR",
        help="the served model's directory, for --parity (default: --model, when it is one)",
    )
    add_served_sim_arguments(evaluate, "--model")
    add_config_file_option(evaluate)
    evaluate.set_defaults(run=_run_eval)

    check = sub.add_parser("check", help="a build's greedy first answers to real steps, teacher-forced, per task; "
                           "exit 3 below the bar")  # fmt: skip
    check.add_argument("store", type=Path, help="the store the model trained on and retrieves from")
    check.add_argument("--model", type=Path, required=True, help="the experience model's directory")
    check.add_argument("--episodes", type=Path, default=None,
                       help="a store of real episodes on pages the model never trained on, to ask (default: "
                            "STORE's own, the seed set it trained on: a weaker check)")  # fmt: skip
    check.add_argument("--steps-per-task", type=int, default=120, help="most steps asked per task")
    check.add_argument("--every", type=int, default=1, help="ask every N-th real episode of a task")
    check.add_argument("--min-clean", type=float, default=0.975,
                       help="share of first answers applied as written that every task must reach")  # fmt: skip
    check.add_argument("--hold-out", action="append", default=[], metavar="TASK[:SEED]",
                       help="also keep a (task, seed) out of the steps asked and retrieval (the model's own "
                            "held-out pairs always are); repeatable")  # fmt: skip
    check.add_argument("--json", action="store_true", help="print the check as one JSON object")
    add_config_file_option(check)
    check.set_defaults(run=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    """``sim check``: :func:`dreamgym.simulator.check_build` from the command line; exit 3 when the build fails the
    bar (1 is an error's, 2 a usage error's)."""
    import anyio

    from dreamgym.core.errors import UsageError
    from dreamgym.simulator import CheckConfig, check_build, load_experience_model, read_metadata

    if not args.model.is_dir():
        raise UsageError(f"--model {args.model}: no model directory there")
    config = CheckConfig(steps_per_task=args.steps_per_task, every=args.every, min_clean=args.min_clean)
    held_out = [
        *hold_outs(args.hold_out),
        *((task, seed) for task, seed in read_metadata(args.model).get("held_out", [])),
    ]

    async def go() -> Any:
        from dreamgym.simulator import real_episodes

        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(open_store(args.store, readonly=True))
            episodes = None
            if args.episodes is not None and args.episodes.resolve() != args.store.resolve():
                asked = await stack.enter_async_context(open_store(args.episodes, readonly=True))
                episodes = await real_episodes(asked)
            model = load_experience_model(args.model)  # no call cache: the store stays read-only
            return await check_build(model, store, config, exclude_task_seeds=held_out, episodes=episodes)

    result = anyio.run(go)
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{args.model} on {args.store}: first answers applied as written (bar {config.min_clean})")
        for column in ("task", "asked", "clean", "share", "unusable"):
            table.add_column(column)
        for task_id, asked in result.asked.items():
            table.add_row(task_id, str(asked), str(result.clean[task_id]), f"{result.share(task_id):.3f}",
                          str(result.unusable.get(task_id, 0)))  # fmt: skip
        Console().print(table)
        print(f"{'passed' if result.passed else 'failed'}: worst task {result.worst:.3f}", file=sys.stderr)
    return 0 if result.passed else 3


def _real_steps(store: Any) -> list[Any]:
    """Every real step of a store, in commit order."""
    from dreamgym.core.types import Step, decode_record

    steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
    return [step for step in steps if step.source == "real"]


async def _others(store: Any, selected: set[str], spec: str) -> list[tuple[str, None]]:
    """Every task of the store's real episodes outside ``selected``, each held out whole.

    Raises:
        UsageError: The store holds no real episode of the selected tasks.
    """
    from dreamgym.core.errors import UsageError

    stored = set(await store.task_ids(source="real"))
    if not stored & selected:
        shown = ", ".join(sorted(stored)[:5]) or "nothing"
        raise UsageError(f"--tasks {spec!r}: the store holds no real episode of these tasks (it holds {shown})")
    return [(task_id, None) for task_id in sorted(stored - selected)]


def _base(name: str) -> str:
    if name == "smollm2":
        from dreamgym.offline import smollm2_checkpoint

        return str(smollm2_checkpoint())
    return name


def _run_train(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.core.errors import UsageError
    from dreamgym.simulator import (
        ScratchModelConfig,
        SimTrainConfig,
        TemplateConfig,
        annotate_reasoning,
        build_sft_examples,
        train_experience_model,
    )

    if args.split is not None and args.base != "scratch":
        raise UsageError(f"--split shapes a scratch model's tokenizer; --base {args.base} brings its own")
    held_out = hold_outs(args.hold_out)
    selected = None
    if args.tasks is not None:  # checked before the store is opened
        selected = {task.task_id for task in parse_tasks(args.tasks, args.site)[0]}
    teacher, teacher_sampling = served_backend(args, "teacher") or (None, None)
    template = TemplateConfig(
        history=args.history,
        neighbours=args.neighbours,
        reasoning=teacher is not None,
        output=args.output,
        past_actions=args.past_actions,
        target_line=args.target_line,
        target_alias=args.target_alias,
    )
    config = SimTrainConfig(
        base=_base(args.base), lora=not args.full, epochs=args.epochs, batch_size=args.batch_size,
        learning_rate=args.lr, max_steps=args.max_steps, max_length=args.max_length, device=args.device,
        dtype=args.dtype, relabel_ids=args.relabel_ids,
        scratch=ScratchModelConfig() if args.split is None else ScratchModelConfig(split=args.split),
    )  # fmt: skip

    async def examples() -> list[Any]:
        async with open_store(args.store, readonly=True) as store:
            if selected is not None:
                held_out.extend(await _others(store, selected, args.tasks))
            reasoning = None
            if teacher is not None:
                from dreamgym.simulator import real_episodes

                reasoning = await annotate_reasoning(teacher, await real_episodes(store), sampling=teacher_sampling)
                await teacher.aclose()
            return await build_sft_examples(store, template, exclude_task_seeds=held_out, reasoning=reasoning)

    built = anyio.run(examples)
    extra = {"store": str(args.store), "held_out": held_out}
    out = train_experience_model(built, args.out, config, template=template, extra_metadata=extra)
    print(f"trained {out} on {len(built)} examples ({template.template_id})")
    return 0


def _run_build_default(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.jobs.sim_default import build_default

    path = anyio.run(lambda: build_default(force=args.force))
    print(f"offline default experience model: {path}")
    return 0


async def _parity(
    model: Any, steps: list[Any], store: Any, held_out: list[tuple[str, int | None]], local_dir: Path | None
) -> Any:
    """:func:`~dreamgym.simulator.backends.check_server` on the experience-model prompts of ``steps``, beside
    the model of ``local_dir`` in process (when given)."""
    import anyio

    from dreamgym.simulator import teacher_forced_queries
    from dreamgym.simulator.backends import LocalBackend, check_server

    template = model.config.template
    queries = await teacher_forced_queries(steps, store=store, neighbours=template.neighbours,
                                           exclude_task_seeds=held_out)  # fmt: skip
    prompts = [template.messages(query) for _, query in queries]
    local = None if local_dir is None else await anyio.to_thread.run_sync(LocalBackend.load, local_dir)
    try:
        return await check_server(model.backend, prompts, local=local,
                                  max_new_tokens=model.config.sampling.max_new_tokens)  # fmt: skip
    finally:
        await model.backend.aclose()
        if local is not None:
            await local.aclose()


def _print_parity(check: dict[str, Any], shown: str, *, json_lines: bool) -> None:
    from dreamgym.simulator.backends import ServerCheck

    if json_lines:
        print(json.dumps(check))
        return
    from rich.console import Console
    from rich.table import Table

    fields = {k: v for k, v in check.items() if k != "identical_share"}
    table = Table(title=f"served model {shown} beside the same model in process")
    for column in ("check", "server", "what to set"):
        table.add_column(column)
    for row in ServerCheck(**fields).rows():
        table.add_row(*row)
    Console(width=max(Console().width, 160)).print(table)  # the advice column stays legible


def _directory(name: str) -> Path | None:
    path = Path(name).expanduser()
    return path if path.is_dir() else None


def _parity_local(args: argparse.Namespace) -> Path | None:
    """The served model's directory (``--parity-local``, else ``--model`` when it is one), checked.

    Raises:
        UsageError: ``--parity`` without ``--sim-url``, below 0, or a ``--parity-local`` that is no directory.
    """
    from dreamgym.core.errors import UsageError

    if args.parity < 0:
        raise UsageError(f"--parity N takes a number of prompts >= 1, got {args.parity}")
    if args.parity and not args.sim_url:
        raise UsageError("--parity checks a served model: give --sim-url URL and --model NAME")
    if args.parity_local is not None and not args.parity_local.is_dir():
        raise UsageError(f"--parity-local {args.parity_local}: no model directory there")
    local: Path | None = args.parity_local
    return local


def _with_template(source: Any, meta: dict[str, Any]) -> Any:
    """The served model asked in the template its directory records it was trained with."""
    from dataclasses import replace

    from dreamgym.simulator import TemplateConfig

    recorded = meta.get("template")
    return replace(source, template=TemplateConfig(**recorded)) if recorded else source


def _run_eval(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.core.errors import UsageError
    from dreamgym.jobs.sim_default import default_store_dir, ensure_held_out
    from dreamgym.simulator import load_experience_model, one_step_fidelity, read_metadata

    for value in args.held_out:
        if Path(value).is_dir():
            raise UsageError(
                f"--held-out {value}: give TASK[:SEED] pairs here; the store of steps to predict is --steps"
            )
    chosen = hold_outs(args.held_out)
    local_dir = _parity_local(args)
    defaults = args.model == "default" and args.store is None and not args.sim_url
    if args.steps is None and not defaults:
        raise UsageError("give --steps STORE, the real steps to predict (only the offline default has its own)")
    source = experience_model_source(args, args.model, "--model")  # a served model with --sim-url
    if isinstance(source, Path) and not source.is_dir():
        raise UsageError(f"--model {args.model}: no model directory at {source}")
    if args.store is None and not defaults:
        raise UsageError("give the STORE the simulator retrieves from (only the offline default has its own)")
    args.store = args.store or default_store_dir()
    if args.steps is None:
        args.steps = anyio.run(ensure_held_out)
        print(f"predicting the offline default's held-out steps ({args.steps})", file=sys.stderr)
    meta = read_metadata(source) if isinstance(source, Path) else {}
    if not isinstance(source, Path) and (local_dir := local_dir or _directory(args.model)) is not None:
        meta = read_metadata(local_dir)  # the served model's own directory: its template and held-out pairs
        source = _with_template(source, meta)
    held_out = [*chosen, *((task, seed) for task, seed in meta.get("held_out", []))]
    shown = source.name if isinstance(source, Path) else f"{source.model} at {source.url}"

    async def go() -> tuple[dict[str, Any], int]:
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(open_store(args.store, readonly=True))
            same = args.steps.resolve() == args.store.resolve()
            real = store if same else await stack.enter_async_context(open_store(args.steps, readonly=True))
            steps = await anyio.to_thread.run_sync(_real_steps, real)
            if not steps:
                raise UsageError(f"--steps {args.steps} holds no real steps to predict")
            if args.limit:
                keep = {s.episode_id for s in steps[: args.limit]}
                steps = [s for s in steps if s.episode_id in keep]
            model = load_experience_model(source, max_attempts=args.sim_attempts)
            k = model.config.template.neighbours
            if args.parity:
                check = await _parity(model, steps[: args.parity], store, held_out, local_dir)
                return check.as_dict(), 0
            results = await one_step_fidelity(model, steps, store=store, neighbours=k, exclude_task_seeds=held_out)
            return results, model.stats.repeated_retries

    results, repeated = anyio.run(go)
    if args.parity:
        _print_parity(results, shown, json_lines=args.json)
        return 0
    if repeated:
        from dreamgym.simulator.backends import repeated_retry_advice

        print(f"{repeated} retries came back with the text of the attempt before them: "
              f"{repeated_retry_advice(shown, getattr(source, 'url', None))}", file=sys.stderr)  # fmt: skip
    if args.json:
        for summary in results.values():
            print(json.dumps({**summary.as_dict(), "repeated_retries": repeated if summary.name == "model" else 0}))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"one-step fidelity on {args.steps} (model {shown})")
    columns = ("reward_accuracy", "done_accuracy", "exact_match", "similarity", "f1", "hallucination_rate")
    for column in ("", "n", *columns, "failures", "salvaged", "repeated retries", "s/step"):
        table.add_column(column)
    for summary in results.values():
        row = summary.as_dict()
        table.add_row(summary.name, str(summary.n), *(f"{row[c]:.3f}" for c in columns), str(summary.failures),
                      str(summary.salvaged), str(repeated) if summary.name == "model" else "-",
                      f"{summary.seconds_per_step:.3f}")  # fmt: skip
    Console().print(table)
    return 0
