"""``dreamgym replay stats|check|view|export|import|reindex``: inspect, look at and move replay stores."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dreamgym.cli._common import embedder_named, open_store

__all__ = ["add_replay_command"]


def add_replay_command(commands: Any) -> None:
    """Register ``replay`` and its actions on the CLI's subparsers."""
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
    view = sub.add_parser("view", help="write a store's episodes as one HTML page (steps, pages, shadow diffs)")
    view.add_argument("path", type=Path)
    view.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    view.add_argument("--task", action="append", default=[], metavar="PATTERN",
                      help="task id or shell pattern (miniwob/click-*); repeat for several")  # fmt: skip
    view.add_argument("--source", choices=("real", "synthetic"), default=None)
    view.add_argument("--policy", default="", help="episodes whose policy id contains this")
    view.add_argument("--model", default="", help="episodes whose experience model id contains this")
    view.add_argument("--min-reward", type=float, default=None, help="episodes with an outcome reward at least this")
    view.add_argument("--max-reward", type=float, default=None, help="episodes with an outcome reward at most this")
    view.add_argument("--limit", type=int, default=200, help="at most this many episodes, the newest first")
    view.set_defaults(run=_run_view)
    export = sub.add_parser("export", help="write a store's records as JSONL, or its episodes and steps as Parquet")
    export.add_argument("path", type=Path)
    export.add_argument("-o", "--output", type=Path, required=True,
                        help="the JSONL file, or the folder of episodes.parquet and steps.parquet")  # fmt: skip
    export.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    export.add_argument("--push-to-hub", default=None, metavar="REPO_ID",
                        help="with --format parquet, also push both to this Hugging Face dataset repo")  # fmt: skip
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


def _run_view(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.replay.viewer import ViewCounts, ViewFilter, trajectory_page

    filters = ViewFilter(
        tasks=tuple(args.task), source=args.source, policy=args.policy, experience_model=args.model,
        min_reward=args.min_reward, max_reward=args.max_reward, limit=args.limit,
    )  # fmt: skip

    async def go() -> tuple[str, ViewCounts]:
        async with open_store(args.path, readonly=True) as store:
            return await trajectory_page(store, filters, title=f"dreamgym trajectories: {args.path}")

    html, counts = anyio.run(go)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(html, encoding="utf-8")
    print(f"wrote {args.out}: {counts.shown} of {counts.matched} matching episodes ({counts.episodes} in the store), "
          f"{counts.shadowed_steps} steps beside the simulator's prediction")  # fmt: skip
    return 0


def _run_export(args: argparse.Namespace) -> int:
    import anyio

    from dreamgym.core.errors import ConfigError
    from dreamgym.replay import export_jsonl, export_parquet

    if args.push_to_hub and args.format != "parquet":
        raise ConfigError("--push-to-hub needs --format parquet")

    async def go() -> Any:
        async with open_store(args.path, readonly=True) as store:
            if args.format == "parquet":
                return await export_parquet(store, args.output)
            return await export_jsonl(store, args.output)

    written = anyio.run(go)
    if args.format == "jsonl":
        print(f"wrote {written} records to {args.output}")
        return 0
    print(f"wrote {written['episodes']} episodes and {written['steps']} steps to {args.output}/"
          "{episodes,steps}.parquet")  # fmt: skip
    if args.push_to_hub:  # one dataset repository, a configuration each (their columns differ)
        from datasets import load_dataset

        for name in ("episodes", "steps"):
            data = load_dataset("parquet", data_files=str(args.output / f"{name}.parquet"), split="train")
            data.push_to_hub(args.push_to_hub, config_name=name)
        print(f"pushed to https://huggingface.co/datasets/{args.push_to_hub} (configurations episodes and steps)")
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
