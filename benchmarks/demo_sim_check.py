"""What does checking each build on its seed set, and training the next seed while it fails, buy the demo?

    python benchmarks/demo_sim_check.py --from .cache/demo [--recipe alias+layers-4] [--runs 4] [--attempts 2]
        [--out DIR] [--episodes DIR] [--seeds 2000-2029] [--validated RESULTS.json ...]
        [--commit-results [--name demo_sim_check]]

Builds of one experience-model recipe that differ only in their training seed
differ in how often their greedy first answer applies unsteered on validation
episodes (``benchmarks/demo_sim_builds.py``). ``dreamgym demo --sim-builds N``
checks each build on its own seed set (:func:`dreamgym.simulator.check_build`,
bar ``CheckConfig.min_clean``) and trains the next training seed while it fails
(:func:`dreamgym.jobs.sim_default.train_checked`). This measures that procedure.

Run ``r`` (``--runs`` of them) is the procedure as phase 2 runs it with training
seed ``r * attempts``: builds ``r * attempts``, the next, ... (at most
``--attempts``), the first that passes kept, else the best checked. Every build
needed is trained as ``demo_sim_builds.py`` trains it (``--recipe``, on the kept
demo's seed set, reused from ``--out``), checked with the library's check (the
kept demo's demonstrations asked, its store's seed set retrieved, nothing later), and scored
open loop on the validation episodes (``--episodes``, as ``demo_sim_builds.py``
scores it; a build's per-task rows may instead come from a committed
``demo_sim_builds`` results file given with ``--validated``, the same recipe,
seed and episodes).

With ``--more-epochs E`` a run is the procedure of ``dreamgym demo
--sim-more-epochs E``: run ``r`` trains seed ``r``, and while its build fails
the check trains that build E epochs more from its own weights, once
(``--attempts`` 2; the continuation scored open loop too).

Per run it prints the builds checked and the kept build's per-task figures;
then every build of the runs' seeds is checked (those a run did not need
too), and the share of the builds the check passes that meet the bar below is
set beside the share of those it fails that do; then, against the baseline of
the same runs keeping their first build unchecked: the share of runs whose kept build meets issue 49's item 2 on every
demo task (first answers applied unsteered >= 0.95, real wins paid open loop
>= 0.90, real losses paid <= 0.05), the lowest first-answer share of a kept
build, and the builds trained per run (each a fit of about 150 s for four
layers on 2 cores, each check about a minute).
``--commit-results`` writes ``benchmarks/results/NAME.json`` with the date, the
commit and the command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import _report as report
import anyio
import demo_sim_builds as builds
import open_loop_outcomes as olo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BAR = {"first_answer_clean_share": (0.95, "at least"), "wins_share_paid_open_loop": (0.90, "at least"),
       "losses_share_paid_open_loop": (0.05, "at most")}  # fmt: skip
"""Issue 49's item 2, per demo task."""


Build = tuple[int, float]
"""A build: its training seed, and the epochs it was trained past its first fit (``--more-epochs``)."""


def meets_bar(task_rows: dict[str, dict[str, Any]]) -> bool:
    """Whether every task's row meets :data:`BAR` (the ``all`` row is not a task)."""
    for task, row in task_rows.items():
        if task == "all":
            continue
        for key, (bar, way) in BAR.items():
            value = row[key]
            if (value < bar) if way == "at least" else (value > bar):
                return False
    return True


async def check(kept: Path, out: Path, model_dir: Path) -> Any:
    """The library's check of one build, as phase 2 runs it: the kept demo's demonstrations (``demonstration_seeds``,
    pages the build never trained on) asked, a copy of its store's seed set retrieved (every later episode left
    out), the held-out pairs left out."""
    from dreamgym.jobs._demo_settings import held_out_pairs
    from dreamgym.replay import LmdbReplayStore, StoreConfig
    from dreamgym.simulator import CheckConfig, check_build, load_experience_model, real_episodes

    settings = olo._settings(kept)
    async with LmdbReplayStore(out / "store", embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        later = [e[0].episode_id for e in await real_episodes(store) if e[0].policy_id not in builds.SCRIPTED]
        async with LmdbReplayStore(settings.demonstrations_dir, readonly=True) as shown:
            demonstrations = await real_episodes(shown)
        model = load_experience_model(model_dir)
        result = await check_build(model, store, CheckConfig(), exclude_task_seeds=held_out_pairs(settings),
                                   exclude_episodes=later, episodes=demonstrations)  # fmt: skip
    return result


def _validated(paths: list[Path], recipe: str) -> dict[int, dict[str, dict[str, Any]]]:
    """Per training seed, the per-task rows of ``recipe``'s builds in committed ``demo_sim_builds`` files."""
    found: dict[int, dict[str, dict[str, Any]]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if row.get("recipe") == recipe and "build_seed" in row:
                found.setdefault(row["build_seed"], {})[row["task"]] = row
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--recipe", default="alias+layers-4", type=builds._recipe_name,
                        help="the recipe built (demo_sim_builds.py's names)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=4, help="runs of the procedure (disjoint training seeds)")
    parser.add_argument("--attempts", type=int, default=2, help="most builds per run (dreamgym demo --sim-builds)")
    parser.add_argument("--more-epochs", type=float, default=0.0,
                        help="train a failing build this many epochs more in place of a new seed "
                             "(dreamgym demo --sim-more-epochs)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "demo_sim_builds",
                        help="where the builds are written (and reused; demo_sim_builds.py's)")  # fmt: skip
    parser.add_argument("--episodes", type=Path, default=ROOT / ".cache" / "bench" / "open_loop",
                        help="the validation episodes (open_loop_outcomes.py's; collected there once)")  # fmt: skip
    parser.add_argument("--seeds", default="2000-2029", help="validation seeds (within 2000-2199)")
    parser.add_argument("--temperature", type=float, default=0.5, help="the policies' sampling temperature")
    parser.add_argument("--validated", type=Path, action="append", default=[],
                        help="a demo_sim_builds results file scoring builds of --recipe (repeatable)")  # fmt: skip
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="demo_sim_check", help="the results file's name, without .json")
    args = parser.parse_args()
    if args.runs < 1 or args.attempts < 1 or args.more_epochs < 0:
        parser.error("--runs and --attempts must be at least 1, --more-epochs at least 0")
    if args.more_epochs > 0 and args.attempts > 2:  # a third attempt would continue the first build, not the second
        parser.error("--more-epochs measures one continuation a run: --attempts at most 2")
    if not (args.kept / "experience-model" / "config.json").exists():
        parser.error(f"no finished demo at {args.kept} (its experience-model is missing)")
    seeds = olo._seeds(parser, args.seeds)
    results: dict[str, Any] = report.provenance() | {"settings": report.settings(args)}
    validated = _validated(args.validated, args.recipe)
    from dreamgym.jobs.sim_default import kept_build

    episodes = None
    checks: dict[Build, Any] = {}
    scores: dict[Build, dict[str, dict[str, Any]]] = {}

    def build(key: Build) -> tuple[Any, dict[str, dict[str, Any]]]:
        nonlocal episodes
        seed, more = key
        if key not in checks:
            model_dir = anyio.run(builds._build, args.kept, args.out, args.recipe, seed, more)
            checks[key] = anyio.run(check, args.kept, args.out, model_dir)
            if seed in validated and more == 0:
                scores[key] = validated[seed]
            else:
                if episodes is None:
                    episodes = anyio.run(olo._collect, args.kept, args.episodes, seeds, olo._demo_policies(args.kept),
                                         args.temperature)  # fmt: skip
                scores[key] = {row["task"]: row for row in builds.score(args.kept, model_dir, episodes)}
            print(json.dumps({"build_seed": seed, "more_epochs": more, "check": checks[key].as_dict()}), flush=True)
        return checks[key], scores[key]

    def attempt_of(run: int, attempt: int) -> Build:
        """A run's ``attempt``-th build: the next training seed, or with ``--more-epochs`` its first one further."""
        if args.more_epochs > 0:
            return run, attempt * args.more_epochs
        return run * args.attempts + attempt, 0.0

    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    kept_rows: list[dict[str, dict[str, Any]]] = []
    first_rows: list[dict[str, dict[str, Any]]] = []
    trained: list[int] = []
    for run in range(args.runs):
        run_checks: list[Any] = []
        for attempt in range(args.attempts):
            run_checks.append(build(attempt_of(run, attempt))[0])
            if run_checks[-1].passed:
                break
        kept = attempt_of(run, kept_build(run_checks))
        kept_rows.append(scores[kept])
        first_rows.append(scores[attempt_of(run, 0)])
        trained.append(len(run_checks))
        per_task = {task: {key: row[key] for key in BAR} for task, row in scores[kept].items()}
        checked = [{"seed": attempt_of(run, n)[0], "more_epochs": attempt_of(run, n)[1], **c.as_dict()}
                   for n, c in enumerate(run_checks)]  # fmt: skip
        runs.append({"run": run, "builds_checked": checked, "kept_seed": kept[0], "kept_more_epochs": kept[1],
                     "kept_meets_bar": meets_bar(scores[kept]), "kept_per_task": per_task})  # fmt: skip
        print(json.dumps(runs[-1]), flush=True)
    how = f", a failing one trained {args.more_epochs:g} epochs more" if args.more_epochs > 0 else ""
    met = sum(map(meets_bar, kept_rows)) / args.runs
    first_met = sum(map(meets_bar, first_rows)) / args.runs
    rows.append(report.emit(
        f"runs whose kept build meets item 2 on every task ({args.recipe}, at most {args.attempts} builds checked"
        f"{how})",
        met, "fraction", "the same runs keeping their first build unchecked", first_met, runs=args.runs,
    ))  # fmt: skip

    def lowest(chosen: list[dict[str, dict[str, Any]]]) -> float:
        return min(row["first_answer_clean_share"] for rows in chosen for task, row in rows.items() if task != "all")

    rows.append(report.emit(
        f"lowest first-answer share applied unsteered on a demo task, over the runs' kept builds ({args.recipe}{how})",
        lowest(kept_rows), "fraction", "the same over the runs' first builds", lowest(first_rows), runs=args.runs,
    ))  # fmt: skip
    # Every build of the runs' seeds, those a run did not need too: how the check's verdict and the bar agree.
    # (Trained further, a run's builds are those it trained: a build that passed has no continuation.)
    every = [attempt_of(run, n) for run in range(args.runs) for n in range(args.attempts)]
    if args.more_epochs > 0:
        every = sorted(checks)
    for key in every:
        build(key)
    table = [{"seed": key[0], "more_epochs": key[1], "check_worst": round(checks[key].worst, 4),
              "check_passed": checks[key].passed, "meets_bar": meets_bar(scores[key])} for key in every]  # fmt: skip
    passed = [row for row in table if row["check_passed"]]
    failed = [row for row in table if not row["check_passed"]]
    rows.append(report.emit(
        "builds the check passes that meet item 2", sum(r["meets_bar"] for r in passed) / max(1, len(passed)),
        "fraction", "builds it fails that meet item 2", sum(r["meets_bar"] for r in failed) / max(1, len(failed)),
        passed=len(passed), failed=len(failed), builds=table,
    ))  # fmt: skip
    rows.append(report.emit(
        f"builds trained per run (mean{how})", sum(trained) / args.runs, "builds", "one build, unchecked", 1.0,
        per_run=trained,
    ))  # fmt: skip
    if args.commit_results:
        path = RESULTS / f"{args.name}.json"
        path.write_text(json.dumps({**results, "runs": runs, "rows": rows}, indent=1) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
