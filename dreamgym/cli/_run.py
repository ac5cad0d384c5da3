"""What ``dreamgym collect`` and ``dreamgym rollout`` share: their arguments and checks, the policy, the stack,
the live panel and the summary."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from dreamgym.cli._common import (
    RUN_TASKS_HELP,
    add_site_argument,
    add_worker_arguments,
    embedder_named,
    experience_model_source,
    parse_seeds,
    run_tasks,
    worker_config,
)

__all__ = [
    "add_run_arguments",
    "check_run_arguments",
    "drive",
    "fail_if_nothing_ran",
    "open_run",
    "run_groups",
    "run_policy",
    "summary",
]

POLICIES = ("demonstrator", "random", "chat", "local")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path, required=True, help="replay store (created if missing)")
    parser.add_argument("--tasks", default="demo", help=RUN_TASKS_HELP)
    add_site_argument(parser)
    parser.add_argument("--seeds", default="0-3", help="seeds, e.g. '0-9' or '1,5,7'; one group per (task, seed)")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per group (G)")
    parser.add_argument("--policy", choices=POLICIES, default="demonstrator")
    parser.add_argument("--policy-model", default=None, help="model directory (local) or model name (chat)")
    parser.add_argument("--openai-url", default=None, help="OpenAI-compatible /v1 URL for --policy chat")
    served = parser.add_argument_group("a served policy (--policy chat)")
    served.add_argument("--max-new-tokens", type=int, default=512, help="token budget of each answer")
    served.add_argument("--stop", action="append", default=None, metavar="TEXT",
                        help="a stop string the server ends answers at (default: </action>); repeatable, "
                             "at most 4")  # fmt: skip
    served.add_argument("--timeout", type=float, default=120.0, help="seconds each request may take")
    served.add_argument("--server-concurrency", type=int, default=8, help="requests in flight at once")
    parser.add_argument("--temperature", type=float, default=1.0, help="the policy's sampling temperature")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2, help="real episodes (browser contexts) at once")
    parser.add_argument("--embedder", default=None, help="embedder of a new store (default: MiniLM when installed)")
    add_worker_arguments(parser)


def check_run_arguments(args: argparse.Namespace) -> list[Any]:
    """Check ``--seeds``, ``--tasks`` and ``--site`` before anything is opened; the tasks.

    Raises:
        UsageError: Any of them cannot work (the message says which and why).
    """
    from dreamgym.core.errors import UsageError

    parse_seeds(args.seeds)
    worker_config(args)
    tasks, _ = run_tasks(args)
    if getattr(args, "policy", None) == "chat":
        if not args.policy_model:
            raise UsageError("--policy chat needs --policy-model NAME (and --openai-url for a local server)")
        if args.max_new_tokens < 1 or args.timeout <= 0 or args.server_concurrency < 1:
            raise UsageError("--max-new-tokens and --server-concurrency must be >= 1 and --timeout above 0")
        if args.stop is not None and len(args.stop) > 4:
            raise UsageError(f"--stop: OpenAI-compatible servers take at most 4 stop strings, got {len(args.stop)}")
    if getattr(args, "policy", None) == "demonstrator" and not _text_worlds(args):
        from dreamgym.bridge.demonstrators import DEMONSTRATORS

        names = [task.task_id.removeprefix("miniwob/") for task in tasks]
        if missing := [name for name in names if name not in DEMONSTRATORS]:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise UsageError(f"--tasks {args.tasks!r}: no scripted demonstrator for {shown}; give another --policy "
                             "(random, local, chat), or --tasks demonstrated")  # fmt: skip
    return tasks


def run_policy(args: argparse.Namespace, limiter: Any) -> Any:
    """The policy ``--policy`` names, with its settings (a local model shares ``limiter``'s torch slots)."""
    if args.policy == "demonstrator" and _text_worlds(args):
        from dreamgym.textworlds import WalkthroughDemonstrator

        return WalkthroughDemonstrator(seeds=parse_seeds(args.seeds))
    if args.policy == "demonstrator":
        from dreamgym.bridge import MiniWobDemonstrator

        return MiniWobDemonstrator()
    if args.policy == "random":
        from dreamgym.agents import RandomExplorer

        return RandomExplorer(0)
    if args.policy == "chat":
        from dreamgym.agents import ChatAgent, ChatAgentConfig
        from dreamgym.core.protocols import Sampling
        from dreamgym.simulator import OpenAIBackend

        backend = OpenAIBackend(model=args.policy_model, base_url=args.openai_url, timeout_s=args.timeout,
                                max_concurrency=args.server_concurrency)  # fmt: skip
        stop = tuple(args.stop) if args.stop is not None else ("</action>",)
        sampling = Sampling(temperature=args.temperature, max_new_tokens=args.max_new_tokens, stop=stop)
        return ChatAgent(backend, ChatAgentConfig(sampling=sampling))
    from dreamgym.agents import LocalPolicy, LocalPolicyConfig
    from dreamgym.offline import smollm2_checkpoint

    path = args.policy_model or str(smollm2_checkpoint())
    return LocalPolicy.load(path, config=LocalPolicyConfig(temperature=args.temperature), limiter=limiter)


def open_run(
    args: argparse.Namespace, sites: Sequence[Any], *, simulator: bool
) -> AbstractAsyncContextManager[tuple[Any, Any]]:
    """Open the store, the browsers, the policy and (for rollouts) the simulator; yields (runtime, sides)."""
    from dreamgym.jobs import StackSettings, open_runtime, real_envs_for
    from dreamgym.runtime import RuntimeConfig

    concurrency = 1 if args.reset_command else args.concurrency  # a reset serves one episode at a time
    settings = StackSettings(
        store=args.store,
        sim_model=experience_model_source(args, args.sim_model, "--sim-model") if simulator else None,
        sim_attempts=getattr(args, "sim_attempts", None) if simulator else None,
        embedder=embedder_named(args.embedder),
        sites=tuple(sites),
        runtime=RuntimeConfig(max_steps=args.max_steps, real_concurrency=concurrency),
        workers=worker_config(args),
        real_envs=real_envs_for(run_tasks(args)[0]),
    )
    return open_runtime(settings, lambda limiter: run_policy(args, limiter))


def _text_worlds(args: argparse.Namespace) -> bool:
    return str(args.tasks).strip().startswith("textworld:")


def run_groups(args: argparse.Namespace, *, real_share: float, shadow: bool = False) -> list[Any]:
    """One group per (task, seed), or per task where tasks have no seeds; ``real_share`` of them real
    (exactly, spread out), shadowed if asked."""
    from dreamgym.jobs import mixed_groups

    tasks, seeded = run_tasks(args)
    seeds: list[int | None] = list(parse_seeds(args.seeds)) if seeded else [None]
    return mixed_groups(tasks, seeds, size=args.group_size, real_share=real_share, shadow=shadow)


async def drive(runtime: Any, groups: Sequence[Any], *, label: str) -> list[Any]:
    """Run the groups under a progress bar named ``label`` (episodes done, solved, time left), then print the
    runtime's counters as a table."""
    from rich.console import Console
    from rich.table import Table

    results: list[Any] = await runtime.run_groups(groups, label=label)
    table = Table(title="dreamgym runtime", show_header=False)
    for key, value in runtime.stats.snapshot().as_metrics().items():
        table.add_row(key, f"{value:.2f}" if isinstance(value, float) else str(value))
    Console(stderr=True).print(table)
    return results


def summary(results: Sequence[Any]) -> str:
    episodes = [e for r in results for e in r.episodes]
    by_source: dict[str, list[Any]] = {}
    for result in results:
        by_source.setdefault(result.source, []).extend(result.episodes)
    parts = [
        f"{source}: {sum(e.success for e in eps)}/{len(eps)} episodes succeeded, {sum(e.num_steps for e in eps)} steps"
        for source, eps in sorted(by_source.items())
    ]
    inconsistent = sum(not r.consistent for r in results)
    return (
        f"{len(results)} groups, {len(episodes)} episodes; "
        + "; ".join(parts)
        + (f"; {inconsistent} groups with differing starts" if inconsistent else "")
    )


def fail_if_nothing_ran(results: Sequence[Any]) -> None:
    """A job whose every episode the infrastructure ended (a dead server, a deadline every call
    outlives) has nothing to show: say why, and exit non-zero.

    Raises:
        DreamgymError: Every episode was cut.
    """
    from collections import Counter

    from dreamgym.core.errors import DreamgymError

    episodes = [episode for result in results for episode in result.episodes]
    if not episodes or any(not episode.cut_reason for episode in episodes):
        return
    reasons = Counter(episode.cut_reason for episode in episodes).most_common()
    errors = Counter(episode.error.strip().splitlines()[0] for episode in episodes if episode.error.strip())
    why = f"; the most common error: {errors.most_common(1)[0][0]}" if errors else ""
    raise DreamgymError(f"every one of the {len(episodes)} episodes was ended by the infrastructure, not the policy ("
                        + ", ".join(f"{n} {reason}" for reason, n in reasons) + f"){why}")  # fmt: skip
