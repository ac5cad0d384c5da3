"""``dreamgym demo``: the main job, offline (:mod:`dreamgym.jobs.demo`), its flags made from DemoSettings."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dreamgym.cli._common import embedder_named
from dreamgym.cli._config import add_config_file_option

__all__ = ["add_demo_command", "demo_settings"]


def add_demo_command(commands: Any) -> None:
    """Register ``demo`` on the CLI's subparsers."""
    demo = commands.add_parser("demo", help="the main job, offline: collect, simulate, roll out, evaluate, report")
    _demo_arguments(demo)
    add_config_file_option(demo)
    demo.set_defaults(run=_run_demo)


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """Every :class:`~dreamgym.jobs.demo.DemoSettings` field is a flag, its docstring the help."""
    from dreamgym.cli._config import add_config_flags
    from dreamgym.jobs.demo import DemoSettings

    helps = {
        "tasks": "comma-separated MiniWoB++ tasks with a scripted demonstrator (miniwob: prefix optional)",
        "sim_model": "an experience model's directory, or 'default': the offline default (dreamgym sim "
        "build-default); unset: a demo-size model trained on the seed set",
    }
    add_config_flags(demo, DemoSettings, skip=("embedder",), helps=helps)
    demo.add_argument("--embedder", default=None, help="embedder of the demo's store (default: MiniLM)")


def demo_settings(args: argparse.Namespace) -> Any:
    """The :class:`~dreamgym.jobs.demo.DemoSettings` of a parsed ``dreamgym demo`` (its flags over the
    ``--config`` file over the defaults).

    Raises:
        UsageError: A value of the wrong kind; ConfigError: settings DemoSettings refuses.
    """
    from dreamgym.cli._config import build_config, given_values
    from dreamgym.jobs.demo import DemoSettings

    chosen = given_values(args, DemoSettings)
    if "tasks" in chosen:
        chosen["tasks"] = tuple(name.removeprefix("miniwob:").removeprefix("miniwob/") for name in chosen["tasks"])
    if chosen.get("sim_model") == Path("default"):
        from dreamgym.jobs.sim_default import default_model_dir

        chosen["sim_model"] = default_model_dir()
    return build_config(DemoSettings, chosen, {"embedder": embedder_named(args.embedder)}, where="demo")


def _run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dreamgym.jobs.demo import run_demo, summary_table

    settings = demo_settings(args)
    report = run_demo(settings)
    console = Console()
    console.print(summary_table(report))
    out = settings.out
    console.print(f"report: {out / 'report.html'} (a page to open), {out / 'report.md'} and {out / 'report.json'}")
    return 0
