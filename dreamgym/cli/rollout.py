"""``dreamgym rollout``: synthetic or mixed groups into a store, real steps optionally shadowed by the simulator."""

from __future__ import annotations

import argparse
from typing import Any

from dreamgym.cli._common import add_served_sim_arguments, webarena_sites
from dreamgym.cli._config import add_config_file_option
from dreamgym.cli._run import (
    add_run_arguments,
    check_run_arguments,
    drive,
    fail_if_nothing_ran,
    open_run,
    run_groups,
    summary,
)

__all__ = ["add_rollout_command"]


def add_rollout_command(commands: Any) -> None:
    """Register ``rollout`` on the CLI's subparsers."""
    rollout = commands.add_parser("rollout", help="synthetic or mixed rollouts into a store")
    add_run_arguments(rollout)
    rollout.add_argument("--real-share", type=float, default=0.0, help="share of groups run on real pages")
    rollout.add_argument("--shadow", action="store_true", help="predict every real step with the simulator too")
    rollout.add_argument(
        "--sim-model",
        default="default",
        help="experience model directory, or 'default' (with --sim-url: the served model's name)",
    )
    add_served_sim_arguments(rollout, "--sim-model")
    add_config_file_option(rollout)
    rollout.set_defaults(run=_run_rollout)


def _run_rollout(args: argparse.Namespace) -> int:
    import anyio

    sites = webarena_sites(args, check_run_arguments(args))  # the answer judge's check too, before anything opens

    async def go() -> list[Any]:
        async with open_run(args, sites, simulator=True) as (runtime, _):
            return await drive(
                runtime, run_groups(args, real_share=args.real_share, shadow=args.shadow), label="rollout"
            )

    results = anyio.run(go)
    print(summary(results))
    fail_if_nothing_ran(results)
    return 0
