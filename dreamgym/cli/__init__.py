"""``dreamgym``: the command line. Thin: each subcommand parses arguments and calls the library.

Heavy imports (torch, transformers, lmdb) happen inside the commands, so
``dreamgym --help`` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from dreamgym.cli._config import apply_config_file
    from dreamgym.core.errors import DreamgymError, UsageError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(argv)
    try:
        apply_config_file(parser, argv)  # a --config file's flags become the command's defaults
    except UsageError as exc:
        print(f"dreamgym: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    console = _setup_logging(args.verbose)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2

    from dreamgym.cli._progress import BarListener
    from dreamgym.core.progress import listening

    try:
        with BarListener(console) as bars, listening(bars):
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
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    from dreamgym.cli.demo import add_demo_command
    from dreamgym.cli.replay import add_replay_command

    add_demo_command(commands)
    add_replay_command(commands)
    from dreamgym.cli.collect import add_collect_command
    from dreamgym.cli.rollout import add_rollout_command
    from dreamgym.cli.sim import add_sim_commands
    from dreamgym.cli.train import add_train_command
    from dreamgym.cli.validate import add_validate_command

    add_collect_command(commands)
    add_rollout_command(commands)
    add_sim_commands(commands)
    command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    add_train_command(commands, config_flags=command == "train")
    add_validate_command(commands)
    return parser


def _version() -> str:
    """The installed package's version (``pyproject.toml``'s), or ``unknown`` when dreamgym runs uninstalled."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dreamgym")
    except PackageNotFoundError:
        return "unknown"


def _setup_logging(verbose: bool) -> Any:
    """Log to a rich console on stderr (a command's stdout carries only its result: JSON with --json); the
    progress bars draw on the same console, below the log lines. Returns the console."""
    from rich.console import Console
    from rich.logging import RichHandler

    console = Console(stderr=True)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, rich_tracebacks=False)],
    )
    for noisy in ("httpx", "filelock", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return console
