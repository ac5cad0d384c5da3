"""``dreamgym collect``: run a policy on real tasks, in groups, into a store; groups it already holds are skipped."""

from __future__ import annotations

import argparse
from typing import Any

from dreamgym.cli._common import webarena_sites
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

__all__ = ["add_collect_command"]


def add_collect_command(commands: Any) -> None:
    """Register ``collect`` on the CLI's subparsers."""
    collect = commands.add_parser("collect", help="run a policy on real tasks (Chromium) into a store")
    add_run_arguments(collect)
    collect.add_argument(
        "--again",
        action="store_true",
        help="run every (task, seed) group, even those the store already holds finished episodes of",
    )
    add_config_file_option(collect)
    collect.set_defaults(run=_run_collect)


def _run_collect(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.jobs import collected

    sites = webarena_sites(args, check_run_arguments(args))  # the answer judge's check too, before anything opens

    async def go() -> tuple[list[Any], int]:
        async with open_run(args, sites, simulator=False) as (runtime, _):
            groups = run_groups(args, real_share=1.0)
            done = 0
            if not args.again:
                groups, done = await collected(runtime.store, groups, runtime.policy.policy_id)
            return (await drive(runtime, groups, label="collect") if groups else []), done

    results, done = anyio.run(go)
    print(summary(results) + (f"; skipped {done} groups the store already holds (--again runs them)" if done else ""))
    fail_if_nothing_ran(results)
    return 0
