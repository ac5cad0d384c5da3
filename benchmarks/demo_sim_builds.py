"""Does a change to the demo-size experience model's recipe pay open loop? Each recipe built twice, the spread beside.

    python benchmarks/demo_sim_builds.py --from .cache/demo [--recipe demo --recipe target-line ...] [--builds 2]
        [--first-seed 0] [--out DIR] [--episodes DIR] [--seeds 2000-2029] [--commit-results [--name NAME]]

Each ``--recipe`` is trained ``--builds`` times (training seeds ``--first-seed``, the next, ...) as
the demo's phase 2 trains it (:func:`dreamgym.jobs._demo_settings.demo_sim_training`,
the kept demo's settings), on the kept demo's **seed set** only: the real
episodes its scripted demonstrators and random explorers played (the store
also holds the real episodes training played later; they give no example and
are never retrieved, as in phase 2). The held-out (task, seed) pairs stay out.
Every build gets the kept model's saved outcome judge (fit on the same seed
set in phase 2), so builds differ only in their language model.

Each build is then scored as ``benchmarks/open_loop_outcomes.py`` scores a
model (arm ``judge+copy``, the demo's: the judge's reward and end, the diff's
context and removal lines kept to the page's) on the same validation episodes
(``--episodes``, collected there once: the demonstrator, the near miss, the
warm start and the trained policy on seeds ``--seeds``, within 2000-2199). It
prints each build's per-task rows, then per recipe and task the mean over its
builds of the first answers applied with nothing overruled, those kept as
written (no rule rewrote their page either), the real wins and the real losses
paid open loop, with every build's value and the spread (max
minus min), against the first recipe's mean (the baseline).

Recipes:

- ``demo``: today's (``dreamgym.jobs.sim_default.DEFAULT_TEMPLATE``);
- ``target-line``: the same, the action's target element's page line repeated
  after the action (``TemplateConfig.target_line``);
- ``epochs-3``: three epochs in place of the demo's ``sim_epochs`` (2);
- ``layers-3``: a third layer on the demo-size model (``dreamgym.jobs._demo_settings.DEMO_SIM_SIZE``);
  ``layers-4``: a third and a fourth;
- ``words``: its tokenizer keeps each run of non-space characters whole (``ScratchModelConfig.split="whitespace"``,
  the offline default's: an element id such as ``[e5]`` is one pre-token, not four);
- ``relabel``: half the examples trained with their element ids permuted
  (``SimTrainConfig.relabel_ids=0.5``);
- ``wide``: the demo-size model one and a half times as wide (hidden size 192
  for 128, feed-forward 576 for 384), about twice its parameters;
- ``alias``: the action's element shown as ``[e0]`` in prompt and answer
  (``TemplateConfig.target_alias``);
- ``batch-4``: batches of 4 examples for the demo's 8 (twice the optimizer
  steps over the same tokens);
- ``lr-2e-3``: twice the learning rate of a model trained from scratch (1e-3);
- ``bf16``: the passes in mixed bfloat16 on a CPU that computes in it (``SimTrainConfig.dtype``, the offline
  default's; the demo-size model trains in float32).

Recipes joined by ``+`` are applied left to right (``alias+words+layers-3``:
each lever at once); the build is named after the joined name.

Builds already in ``--out`` (same recipe, seed and kept demo) are reused.
``--commit-results`` writes ``benchmarks/results/NAME.json`` (default
``demo_sim_builds``) with the date, the commit and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _report as report
import anyio
import open_loop_outcomes as olo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCRIPTED = ("miniwob-demonstrator", "near-miss-demonstrator", "random-explorer")
"""The policies of a demo's seed set (phase 1); a trained policy's episodes carry its own id."""


def _demo(template: Any, config: Any) -> tuple[Any, Any]:
    return template, config


def _target_line(template: Any, config: Any) -> tuple[Any, Any]:
    return dataclasses.replace(template, target_line=True), config


def _epochs_3(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, epochs=3.0)


def _layers_3(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, scratch=dataclasses.replace(config.scratch, layers=3))


def _layers_4(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, scratch=dataclasses.replace(config.scratch, layers=4))


def _words(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, scratch=dataclasses.replace(config.scratch, split="whitespace"))


def _wide(template: Any, config: Any) -> tuple[Any, Any]:
    scratch = dataclasses.replace(config.scratch, hidden_size=192, intermediate_size=576)
    return template, dataclasses.replace(config, scratch=scratch)


def _relabel(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, relabel_ids=0.5)


def _alias(template: Any, config: Any) -> tuple[Any, Any]:
    return dataclasses.replace(template, target_alias=True), config


def _batch_4(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, batch_size=4)


def _lr_2e_3(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, learning_rate=2e-3)


def _bf16(template: Any, config: Any) -> tuple[Any, Any]:
    return template, dataclasses.replace(config, dtype="bfloat16")


RECIPES: dict[str, Callable[[Any, Any], tuple[Any, Any]]] = {
    "demo": _demo, "target-line": _target_line, "epochs-3": _epochs_3, "layers-3": _layers_3, "layers-4": _layers_4,
    "words": _words, "relabel": _relabel, "wide": _wide, "alias": _alias, "batch-4": _batch_4, "lr-2e-3": _lr_2e_3,
    "bf16": _bf16,
}  # fmt: skip
"""Each recipe's template and training, from the demo's."""


def compose(name: str) -> Callable[[Any, Any], tuple[Any, Any]]:
    """The recipe ``name`` names: one of :data:`RECIPES`, or several joined by ``+`` (``alias+words``), applied
    left to right."""
    parts = name.split("+")
    unknown = [part for part in parts if part not in RECIPES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown recipe {unknown[0]!r} in {name!r}: each part is one of {', '.join(RECIPES)}"
        )

    def composed(template: Any, config: Any) -> tuple[Any, Any]:
        for part in parts:
            template, config = RECIPES[part](template, config)
        return template, config

    return composed


FIGURES = (
    ("first answers applied, nothing overruled", "first_answer_clean_share"),
    ("first answers kept as written (no rule rewrote the page)", "first_answer_kept_share"),
    ("real wins paid open loop", "wins_share_paid_open_loop"),
    ("real losses paid open loop", "losses_share_paid_open_loop"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--recipe", action="append", type=_recipe_name,
                        help="a recipe to build, or several joined by '+' (alias+words); repeatable; the first "
                             "is the baseline (default: every recipe)")  # fmt: skip
    parser.add_argument("--builds", type=int, default=2, help="builds per recipe (training seeds 0, 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first build's training seed (builds take the next ones)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "demo_sim_builds",
                        help="where the builds are written (and reused)")  # fmt: skip
    parser.add_argument("--episodes", type=Path, default=ROOT / ".cache" / "bench" / "open_loop",
                        help="the validation episodes (open_loop_outcomes.py's; collected there once)")  # fmt: skip
    parser.add_argument("--seeds", default="2000-2029", help="validation seeds (within 2000-2199)")
    parser.add_argument("--temperature", type=float, default=0.5, help="the policies' sampling temperature")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="demo_sim_builds", help="the results file's name, without .json")
    args = parser.parse_args()
    recipes = args.recipe or list(RECIPES)
    if args.builds < 1:
        parser.error("--builds must be at least 1")
    if args.first_seed < 0:
        parser.error("--first-seed must be at least 0")
    if not (args.kept / "experience-model" / "config.json").exists():
        parser.error(f"no finished demo at {args.kept} (its experience-model is missing)")
    seeds = olo._seeds(parser, args.seeds)
    results: dict[str, Any] = report.provenance() | {"settings": report.settings(args)}
    episodes = anyio.run(olo._collect, args.kept, args.episodes, seeds, olo._demo_policies(args.kept),
                         args.temperature)  # fmt: skip
    rows: list[dict[str, Any]] = []
    per_build: dict[str, list[dict[str, dict[str, Any]]]] = {}
    for recipe in recipes:
        for seed in range(args.first_seed, args.first_seed + args.builds):
            build = anyio.run(_build, args.kept, args.out, recipe, seed)
            task_rows = score(args.kept, build, episodes)
            for row in task_rows:
                row.update(recipe=recipe, build_seed=seed)
            rows += task_rows
            per_build.setdefault(recipe, []).append({row["task"]: row for row in task_rows})
    rows += _summary(per_build, recipes)
    if args.commit_results:
        path = RESULTS / f"{args.name}.json"
        path.write_text(json.dumps({**results, "rows": rows}, indent=1) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _recipe_name(name: str) -> str:
    compose(name)  # raises argparse's error for an unknown part
    return name


def _summary(per_build: dict[str, list[dict[str, dict[str, Any]]]], recipes: list[str]) -> list[dict[str, Any]]:
    """Per recipe, task and figure: the mean over builds, each build's value and the spread, against the first
    recipe's mean."""
    rows = []
    baseline = recipes[0]
    for recipe in recipes:
        for task in per_build[recipe][0]:
            for label, key in FIGURES:
                values = [build[task][key] for build in per_build[recipe]]
                base = [build[task][key] for build in per_build[baseline]]
                if None in values or None in base:
                    continue
                rows.append(report.emit(
                    f"{label} ({recipe}, {task}; mean of {len(values)} builds)", sum(values) / len(values),
                    "fraction", f"{baseline} recipe's mean", sum(base) / len(base),
                    recipe=recipe, task=task, summary=key, builds=values, spread=round(max(values) - min(values), 4),
                    baseline_builds=base, baseline_spread=round(max(base) - min(base), 4),
                ))  # fmt: skip
    return rows


def score(kept: Path, build: Path, episodes: Any) -> list[dict[str, Any]]:
    """``build``'s per-task rows (and ``all``'s) replaying the validation ``episodes`` open loop, with the kept
    demo's judge and the copy guard, as ``open_loop_outcomes.py`` replays them."""
    counts, judge = anyio.run(olo._replay, kept, build, True, True, episodes)
    task_rows = olo._rows(counts, build, True, judge, True)
    for row in task_rows:
        row["wins_share_paid_open_loop"] = row["value"]
    return task_rows


async def _build(kept: Path, out: Path, recipe: str, seed: int, more_epochs: float = 0.0) -> Path:
    """One build of ``recipe`` with training seed ``seed`` on the kept demo's seed set, reused where done; with
    ``more_epochs``, that build trained so many epochs more from its own weights, as
    :func:`dreamgym.jobs.sim_default.train_checked` trains a build that failed its check (``next_training``)."""
    from dreamgym.jobs._demo_settings import demo_sim_training, held_out_pairs
    from dreamgym.jobs.sim_default import DEFAULT_TEMPLATE, next_training, train_on_store
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import JUDGE_FILE, real_episodes

    recorded = json.loads((kept / "report.json").read_text())
    demo = dataclasses.replace(olo._settings(kept), sim_epochs=float(recorded["settings"]["sim_epochs"]),
                               sim_outcome_weight=float(recorded["settings"]["sim_outcome_weight"]))  # fmt: skip
    template, config = compose(recipe)(DEFAULT_TEMPLATE, dataclasses.replace(demo_sim_training(demo), seed=seed))
    target = out / f"{recipe}-seed{seed}"
    if more_epochs > 0:
        first = await _build(kept, out, recipe, seed)
        config, _ = next_training(config, 1, (first, config.epochs), more_epochs, None)
        target = first.with_name(f"{first.name}-more{more_epochs:g}@{config.lr:g}")
    stamp = target / "build.json"
    wanted = {"kept": str(kept.resolve()), "recipe": recipe, "seed": seed, "template_id": template.template_id}
    if more_epochs > 0:
        wanted["more_epochs"] = more_epochs
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        print(f"reusing the build at {target}", file=sys.stderr)
        return target
    # The build reads a copy of the kept store: building embeds what is pending, and the kept demo stays as it was.
    store_copy = out / "store"
    if not store_copy.exists():
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(demo.store_dir, store_copy.with_name("store.partial"), dirs_exist_ok=True)
        store_copy.with_name("store.partial").rename(store_copy)
    async with LmdbReplayStore(store_copy, embedder=demo.embedder) as store:
        episodes = await real_episodes(store)
        later = tuple(episode[0].episode_id for episode in episodes if episode[0].policy_id not in SCRIPTED)
        seed_set = len(episodes) - len(later)
        if seed_set != recorded["seed_set"]["episodes"]:
            raise SystemExit(f"{kept}'s store has {seed_set} seed-set episodes, its report {recorded['seed_set']}")
        await train_on_store(
            store, target, config, held_out=held_out_pairs(demo), judge=False, template=template,
            exclude_episodes=later,
            recipe={"recipe": f"benchmarks/demo_sim_builds.py ({recipe})", "kept": str(kept), "seed": seed,
                    "more_epochs": more_epochs},
        )  # fmt: skip
    shutil.copy(kept / "experience-model" / JUDGE_FILE, target / JUDGE_FILE)
    stamp.write_text(json.dumps(wanted))
    return target


if __name__ == "__main__":
    raise SystemExit(main())
