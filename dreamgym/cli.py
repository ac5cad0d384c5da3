"""``dreamgym``: the command line. Thin: each subcommand parses arguments and calls the library.

Heavy imports (torch, transformers, lmdb) happen inside the commands, so
``dreamgym --help`` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dreamgym._cli_common import embedder_named, open_store
from dreamgym._cli_config import add_config_file_option

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from dreamgym._cli_config import apply_config_file
    from dreamgym.core.errors import DreamgymError, UsageError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(argv)
    try:
        apply_config_file(parser, argv)  # a --config file's flags become the command's defaults
    except UsageError as exc:
        print(f"dreamgym: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2

    try:
        return int(args.run(args) or 0)
    except UsageError as exc:
        print(f"dreamgym: error: {exc}", file=sys.stderr)
        return 2
    except DreamgymError as exc:
        print(f"dreamgym: error: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # a task group's: our own error inside it is still one line
        ours = first_own_error(group)
        if ours is None:
            raise
        print(f"dreamgym: error: {ours}", file=sys.stderr)
        return 2 if isinstance(ours, UsageError) else 1
    except KeyboardInterrupt:
        print("dreamgym: interrupted; every committed record is kept", file=sys.stderr)
        return 130


def first_own_error(exc: BaseException) -> Exception | None:
    """The first of dreamgym's own errors in ``exc`` or the exception groups it nests (anyio's task groups
    wrap what their tasks raise); ``None`` when there is none."""
    from dreamgym.core.errors import DreamgymError

    if isinstance(exc, DreamgymError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := first_own_error(inner)) is not None:
                return found
    return None


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``train``'s many settings only when ``argv`` runs ``train`` (they import torch)."""
    parser = argparse.ArgumentParser(prog="dreamgym", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    demo = commands.add_parser("demo", help="the main job, offline: collect, simulate, roll out, evaluate, report")
    _demo_arguments(demo)
    add_config_file_option(demo)
    demo.set_defaults(run=_run_demo)

    replay = commands.add_parser("replay", help="inspect and move replay stores")
    sub = replay.add_subparsers(title="replay commands", metavar="ACTION", required=True)
    stats = sub.add_parser("stats", help="counts, index state and map size of a store")
    stats.add_argument("path", type=Path)
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(run=_run_stats)
    check = sub.add_parser("check", help="walk every page and record of a store; exit 1 if anything is damaged")
    check.add_argument("path", type=Path)
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(run=_run_check)
    export = sub.add_parser("export", help="write a store's records as JSONL")
    export.add_argument("path", type=Path)
    export.add_argument("-o", "--output", type=Path, required=True)
    export.set_defaults(run=_run_export)
    imp = sub.add_parser("import", help="add the records of a JSONL export to a store (created if missing)")
    imp.add_argument("path", type=Path)
    imp.add_argument("input", type=Path)
    imp.add_argument("--embedder", default=None, help="embedder for a new store (e.g. minilm, hashing-256)")
    imp.add_argument("--no-index", action="store_true", help="do not wait for embedding before exiting")
    imp.set_defaults(run=_run_import)
    reindex = sub.add_parser("reindex", help="drop and rebuild a store's vectors and index")
    reindex.add_argument("path", type=Path)
    reindex.add_argument("--embedder", default=None, help="re-embed with this embedder (default: the recorded one)")
    reindex.set_defaults(run=_run_reindex)

    from dreamgym._cli_run import add_run_commands
    from dreamgym._cli_sim import add_sim_commands
    from dreamgym._cli_train import add_train_command
    from dreamgym._cli_validate import add_validate_command

    add_run_commands(commands)
    add_sim_commands(commands)
    command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    add_train_command(commands, config_flags=command == "train")
    add_validate_command(commands)
    return parser


def _setup_logging(verbose: bool) -> None:
    from rich.console import Console
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        # logs go to stderr: a command's stdout carries only its result (JSON with --json)
        handlers=[RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)],
    )
    for noisy in ("httpx", "filelock", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run_stats(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    import anyio

    from dreamgym.core.errors import StoreCorruptError
    from dreamgym.replay._check import check_store_isolated

    async def go() -> Any:
        async with open_store(args.path, readonly=True) as store:
            return await store.stats()

    # counts alone say nothing of damaged pages, and a damaged branch page can crash the reader: walk them first
    pages = check_store_isolated(args.path, pages_only=True) if (Path(args.path) / "data.mdb").is_file() else None
    if pages is not None and not pages.ok:
        more = f" (and {len(pages.problems) - 1} more)" if len(pages.problems) > 1 else ""
        raise StoreCorruptError(
            f"the store at {args.path} is damaged: {pages.problems[0]}{more}; "
            f"`dreamgym replay check {args.path}` lists the damage"
        )
    stats = anyio.run(go)
    if args.json:
        print(json.dumps(dataclasses.asdict(stats)))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"replay store {args.path}", show_header=False)
    for field in dataclasses.fields(stats):
        table.add_row(field.name, str(getattr(stats, field.name)))
    Console().print(table)
    return 0


def _run_check(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from dreamgym.replay._check import check_store_isolated

    report = check_store_isolated(args.path)
    if args.json:
        print(json.dumps(dataclasses.asdict(report)))
    else:
        walked = ", ".join(f"{n} {db}" for db, n in report.records.items() if n)
        print(f"{args.path}: read {walked or 'nothing'}" + ("" if report.checksummed else " (format 1: no checksums)"))
        for note in report.notes:
            print(f"note: {note}")
        for problem in report.problems:
            print(f"damaged: {problem}", file=sys.stderr)
        print(
            "the store is damaged" if report.problems else "no damage found",
            file=sys.stderr if report.problems else sys.stdout,
        )
    return 0 if report.ok else 1


def _run_export(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.replay import export_jsonl

    async def go() -> int:
        async with open_store(args.path, readonly=True) as store:
            return await export_jsonl(store, args.output)

    lines = anyio.run(go)
    print(f"wrote {lines} records to {args.output}")
    return 0


def _run_import(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.replay import import_jsonl
    from dreamgym.replay.export import check_export_file

    check_export_file(args.input)  # a bad file is refused before a store is opened (or created)

    async def go() -> dict[str, int]:
        async with open_store(args.path, embedder=embedder_named(args.embedder)) as store:
            counts = await import_jsonl(store, args.input)
            if not args.no_index:
                await store.flush()
            return counts

    counts = anyio.run(go)
    skipped = counts.pop("skipped", 0)
    print("imported " + ", ".join(f"{n} {kind}s" for kind, n in counts.items())
          + (f"; skipped {skipped} steps already in the store" if skipped else ""))  # fmt: skip
    return 0


def _run_reindex(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.replay import StoreConfig

    embedder = embedder_named(args.embedder)

    async def go() -> Any:
        # Open with the recorded embedder; reindex switches to the new one.
        async with open_store(args.path, config=StoreConfig(auto_index=False)) as store:
            await store.reindex(embedder)
            return await store.stats()

    stats = anyio.run(go)
    print(f"reindexed {stats.vectors} steps with {stats.embedder} (dim {stats.dim})")
    return 0


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """Every :class:`~dreamgym.jobs.demo.DemoSettings` field is a flag, its docstring the help."""
    from dreamgym._cli_config import add_config_flags
    from dreamgym.jobs.demo import DemoSettings

    helps = {
        "tasks": "comma-separated MiniWoB++ tasks with a scripted demonstrator (miniwob: prefix optional)",
        "sim_model": "the experience model's directory; 'default' (or unset): the offline default (make sim-default)",
    }
    add_config_flags(demo, DemoSettings, skip=("embedder",), helps=helps)
    demo.add_argument("--embedder", default=None, help="embedder of the demo's store (default: MiniLM)")


def demo_settings(args: argparse.Namespace) -> Any:
    """The :class:`~dreamgym.jobs.demo.DemoSettings` of a parsed ``dreamgym demo`` (its flags over the
    ``--config`` file over the defaults).

    Raises:
        UsageError: A value of the wrong kind; ConfigError: settings DemoSettings refuses.
    """
    from dreamgym._cli_config import build_config, given_values
    from dreamgym.jobs.demo import DemoSettings

    chosen = given_values(args, DemoSettings)
    if "tasks" in chosen:
        chosen["tasks"] = tuple(name.removeprefix("miniwob:").removeprefix("miniwob/") for name in chosen["tasks"])
    if chosen.get("sim_model") == Path("default"):
        chosen["sim_model"] = None
    return build_config(DemoSettings, chosen, {"embedder": embedder_named(args.embedder)}, where="demo")


def _run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dreamgym.jobs.demo import run_demo, summary_table

    settings = demo_settings(args)
    report = run_demo(settings)
    console = Console()
    console.print(summary_table(report))
    console.print(f"report: {settings.out / 'report.md'} and {settings.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
