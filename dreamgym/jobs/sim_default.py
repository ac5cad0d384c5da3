"""The offline default experience model for MiniWoB++, and the recipe that builds it.

A fresh machine with no keys and no GPU gets a working experience model this
way (``make sim-default`` = ``python -m dreamgym.jobs.sim_default``, once; a
second run finds the model and returns, unless it was trained with another
recipe than today's, see :func:`build_default`):

1. collect real transitions in headless Chromium: on each task that has a
   scripted demonstrator, for each training seed, one demonstrator episode
   and one random-explorer episode (successes, failures and detours);
2. build SFT examples from them with the default prompt template
   (history 1, retrieval 2, the earlier actions named, no reasoning — no
   teacher is reachable offline),
   with the held-out seeds left out of examples and retrieval;
3. train a small model from scratch with ``dreamgym.simulator``'s SFT
   pipeline: SmolLM2-135M takes ~2 s per synthetic step on these prompts on
   2 cores, so even a perfect SmolLM2 gives less fidelity per second than
   the small model measured (see the README).

The model lands in ``<cache>/sim-miniwob`` (and its store of real transitions
in ``<cache>/sim-miniwob-data``); the held-out seeds are recorded in the
model's metadata so evaluations keep away from its training data.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from dreamgym.agents import RandomExplorer
from dreamgym.bridge import (
    DEMONSTRATORS,
    NONDETERMINISTIC,
    BrowserConfig,
    BrowserEnv,
    BrowserPool,
    MiniWobDemonstrator,
    MiniWobSite,
    NearMissDemonstrator,
)
from dreamgym.core.protocols import Embedder, Policy
from dreamgym.core.types import Observation, Step
from dreamgym.offline import cache_dir
from dreamgym.replay import LmdbReplayStore
from dreamgym.runtime import GroupSpec, Runtime, RuntimeConfig
from dreamgym.simulator import (
    METADATA_FILE,
    BuildCheck,
    CheckConfig,
    ScratchModelConfig,
    SFTExample,
    SimTrainConfig,
    TemplateConfig,
    answer_text,
    build_sft_examples,
    check_build,
    fit_store_judge,
    load_experience_model,
    read_metadata,
    recipe_changes,
    train_experience_model,
)

__all__ = [
    "DEFAULT_TASKS",
    "HELD_OUT_SEEDS",
    "CollectPlan",
    "balance",
    "build_default",
    "collect_miniwob",
    "default_model_dir",
    "default_store_dir",
    "ensure_held_out",
    "held_out_pairs",
    "held_out_store_dir",
    "kept_build",
    "no_op_answer",
    "outdated",
    "train_checked",
    "train_on_store",
    "warn_if_outdated",
]

log = logging.getLogger(__name__)

DEFAULT_TASKS = tuple(sorted(name for name in DEMONSTRATORS if name not in NONDETERMINISTIC))
"""MiniWoB++ tasks the default model is trained on: those with a scripted demonstrator."""
TRAIN_SEEDS = range(0, 24)
HELD_OUT_SEEDS = range(1000, 1010)
"""Seeds never collected for training: evaluations of the default model use these."""
DEFAULT_TEMPLATE = TemplateConfig(history=1, neighbours=2, reasoning=False, output="diff", past_actions=True)
"""The offline default's prompt: one step of history, two retrieved real transitions, the episode's earlier actions
named on one line (``past_actions``: a click ends click-button-sequence only when a click came before it, which one
step of history does not always show), no reasoning (no teacher is reachable offline), a diff. Until 2026-12-05
the default prompted without the earlier actions (``experience/v1:h1:k2:direct:diff``)."""
DEFAULT_TRAINING = SimTrainConfig(
    base="scratch",
    epochs=2,
    max_length=1536,
    loop="plain",
    group_by_length=False,
    share_prefix=True,
    dtype="bfloat16",
    scratch=ScratchModelConfig(split="whitespace"),
    outcome_weight=3.0,
)
"""How the default is trained: 2 epochs of random batches of 8 on dreamgym's plain loop (micro-batches of like
length, logits for the answer only), the system message run once per micro-batch, bfloat16 passes where the CPU
has bfloat16 units (float32 elsewhere), a tokenizer that keeps each run of non-space characters whole
(``ScratchModelConfig.split="whitespace"``: 35% fewer tokens than GPT-2's rule), and the answer's reward and end
weighed three times its page in the loss (``outcome_weight``). It replaced TRL's loop with GPT-2's split and no
weighting on 2026-12-05, after ``benchmarks/sim_build.py`` built both in one run on a 2-core CPU without bfloat16
units: 955 s against 4,294 s, collection and examples included (4.50 times faster), and on the same 1,013 held-out
steps reward 0.906 against 0.895, termination 0.940 against 0.920, on the steps where the page changed line
similarity 0.827 against 0.818 and element F1 0.842 against 0.832 (``benchmarks/results/sim_build.json``). A second
seed of this recipe met the same bars (``benchmarks/results/sim_ablation.json``: ``candidate-acts-words-outcome-3``
and ``-seed1``)."""


def held_out_pairs(tasks: Sequence[str] = DEFAULT_TASKS) -> list[tuple[str, int]]:
    """The (task id, seed) pairs an evaluation holds out: every one of ``tasks`` on every held-out seed. What the
    default's recipe records and what its examples (and every benchmark's) leave out."""
    return [(f"miniwob/{name}", seed) for name in tasks for seed in HELD_OUT_SEEDS]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectPlan:
    """Which real episodes to collect."""

    tasks: Sequence[str] = DEFAULT_TASKS
    seeds: Sequence[int] = TRAIN_SEEDS
    demonstrator: bool = True
    explorers: int = 1
    """Random-explorer episodes per (task, seed)."""
    near_misses: int = 0
    """Near-miss episodes per (task, seed) (:class:`~dreamgym.bridge.NearMissDemonstrator`: the demonstrator on a
    goal wrong in one detail): failures that look like successes but for that detail."""
    max_steps: int = 8
    contexts: int = 2
    """Episodes in flight at once (browser contexts)."""
    skipped: list[str] = field(default_factory=list)


def default_model_dir() -> Path:
    return cache_dir() / "sim-miniwob"


def default_store_dir() -> Path:
    return cache_dir() / "sim-miniwob-data" / "store"


def held_out_store_dir() -> Path:
    return cache_dir() / "sim-miniwob-data" / "held-out"


async def ensure_held_out(path: Path | None = None, *, embedder: Embedder | None = None) -> Path:
    """A store of real episodes on the held-out seeds (collected once), for evaluating the default model."""
    path = path or held_out_store_dir()
    async with LmdbReplayStore(path, embedder=embedder) as store:
        if (await store.stats()).steps.get("real", 0) == 0:
            await collect_miniwob(store, CollectPlan(seeds=HELD_OUT_SEEDS))
    return path


async def collect_miniwob(store: LmdbReplayStore, plan: CollectPlan) -> int:
    """Run the plan's real episodes into ``store`` through the runtime; returns the number of steps committed.

    Each (task, seed, policy) is a real group of one episode; an episode that
    fails is recorded with its error and the collection goes on.
    """
    site = MiniWobSite()
    groups: list[GroupSpec] = []
    for name in plan.tasks:
        task = site.task(name, max_steps=plan.max_steps)
        await store.put_task(task)
        for seed in plan.seeds:
            policies: list[Policy] = [MiniWobDemonstrator()] if plan.demonstrator else []
            policies.extend(RandomExplorer(seed * 7919 + n) for n in range(plan.explorers))
            policies.extend(NearMissDemonstrator(seed=seed * 104729 + n) for n in range(plan.near_misses))
            groups.extend(GroupSpec(task=task, seed=seed, source="real", policy=p) for p in policies)
    config = RuntimeConfig(max_steps=plan.max_steps, real_concurrency=plan.contexts)
    try:
        async with (
            BrowserPool(BrowserConfig(processes=1)) as pool,
            Runtime(
                policy=MiniWobDemonstrator(),
                store=store,
                config=config,
                real_env=lambda: BrowserEnv(pool, sites=[site]),
            ) as runtime,
        ):
            results = await runtime.run_groups(groups, label="collect real episodes")
    finally:
        site.close()
    return sum(len(rollout.steps) for result in results for rollout in result.rollouts)


async def build_default(
    *,
    force: bool = False,
    plan: CollectPlan | None = None,
    train: SimTrainConfig | None = None,
    embedder: Embedder | None = None,
    out: Path | None = None,
) -> Path:
    """Collect (if the store is empty), build examples and train the default model; returns its directory.

    A model already there is returned as it is when its metadata records the recipe asked for (``train``, else
    :data:`DEFAULT_TRAINING`, with :data:`DEFAULT_TEMPLATE`); one trained otherwise (a default built before the
    recipe changed) is rebuilt, and kept at ``<directory>.previous`` once the new one is complete. ``force``
    rebuilds in any case. The store is reused: collection happens only when it holds no real step.
    """
    target = out or default_model_dir()
    config = train or DEFAULT_TRAINING
    replaced: Path | None = None
    if (target / "config.json").exists() and not force:
        changes = outdated(target, config)
        if not changes:
            return target
        replaced = target.with_name(target.name + ".previous")
        log.warning(
            "the experience model in %s was trained with another recipe (%s); rebuilding it, the old one goes to %s",
            target, "; ".join(changes), replaced,
        )  # fmt: skip
    store_dir = default_store_dir() if out is None else out.with_name(out.name + "-data") / "store"
    plan = plan or CollectPlan()
    started = time.perf_counter()
    async with LmdbReplayStore(store_dir, embedder=embedder) as store:
        if (await store.stats()).steps.get("real", 0) == 0:
            steps = await collect_miniwob(store, plan)
            log.info("collected %d real steps in %.0f s", steps, time.perf_counter() - started)
        held_out = held_out_pairs(plan.tasks)
        recipe = {
            "recipe": "dreamgym.jobs.sim_default",
            "store": str(store_dir),
            "tasks": list(plan.tasks),
            "train_seeds": list(plan.seeds),
            "held_out_seeds": list(HELD_OUT_SEEDS),
            "held_out": held_out,
        }
        return await train_on_store(store, target, config, held_out=held_out, recipe=recipe, replaced=replaced)


def outdated(model: Path, config: SimTrainConfig = DEFAULT_TRAINING) -> list[str]:
    """How the recipe the model in ``model`` was trained with differs from ``config`` and :data:`DEFAULT_TEMPLATE`
    (``"name: then -> now"`` each, from its ``dreamgym_model.json``); empty when it is that recipe."""
    meta = read_metadata(model)
    return recipe_changes(meta.get("config"), config, recorded_template=meta.get("template"), template=DEFAULT_TEMPLATE)


def warn_if_outdated(model: Path) -> None:
    """Log a warning when the offline default in ``model`` predates the default's recipe (it still runs)."""
    if (model / "config.json").exists() and (changes := outdated(model)):
        log.warning(
            "the offline default experience model in %s was built with an older recipe (%s); "
            "`dreamgym sim build-default` rebuilds it with today's",
            model, "; ".join(changes),
        )  # fmt: skip


async def train_on_store(
    store: LmdbReplayStore,
    target: Path,
    config: SimTrainConfig,
    *,
    held_out: Sequence[tuple[str, int | None]],
    recipe: Mapping[str, object],
    replaced: Path | None = None,
    judge: bool = True,
    template: TemplateConfig = DEFAULT_TEMPLATE,
    exclude_episodes: Sequence[str] = (),
) -> Path:
    """Train an experience model on the store's real transitions with ``template`` (the default's), into ``target``.

    The store's pending transitions are embedded first (retrieval gives each
    example its neighbours); examples of the ``held_out`` (task, seed) pairs
    and of ``exclude_episodes`` are left out, as their neighbours are; no-op steps are sampled down
    (:func:`balance`). With ``judge``, an outcome judge (:class:`~dreamgym.simulator.OutcomeJudge`) is fit on
    the same real steps and saved with the model, so the model's rewards and ends are the judge's. The model is written
    beside ``target`` and renamed onto it when complete, so a run cut short leaves no half model there; a model
    already at ``target`` is deleted then, or moved to ``replaced`` when that is given.
    """
    await store.flush()
    examples = balance(
        await build_sft_examples(store, template, exclude_task_seeds=held_out, exclude_episodes=exclude_episodes)
    )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    await anyio.to_thread.run_sync(
        lambda: train_experience_model(examples, partial, config, template=template, extra_metadata=recipe)
    )
    if judge:
        judged = await fit_store_judge(store, exclude_task_seeds=held_out, exclude_episodes=exclude_episodes)
        judged.save(partial)
    if replaced is not None and target.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        target.rename(replaced)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


async def train_checked(
    store: LmdbReplayStore,
    target: Path,
    config: SimTrainConfig,
    *,
    builds: int,
    check: CheckConfig | None = None,
    held_out: Sequence[tuple[str, int | None]],
    recipe: Mapping[str, object],
    judge: bool = True,
    template: TemplateConfig = DEFAULT_TEMPLATE,
    exclude_episodes: Sequence[str] = (),
    check_episodes: Sequence[Sequence[Step]] | None = None,
    more_epochs: float = 0.0,
    more_learning_rate: float | None = None,
) -> tuple[Path, list[dict[str, object]]]:
    """:func:`train_on_store`, then :func:`~dreamgym.simulator.check_build` on ``check_episodes`` (real episodes
    on pages it never trained on; default: the store's seed set it trained on); while the build fails the check,
    train again, at most ``builds`` builds in all: with the next training seed (``config.seed + 1``, ...), or,
    with ``more_epochs`` above 0, the last build trained that many epochs more on the same examples, from its own
    weights, at ``more_learning_rate`` (``None``: half ``config``'s).

    The first build that passes is kept at ``target``; where none does, the one whose worst task answered the
    most first answers clean (the earliest of equals). The other builds are deleted. Returns the kept model and
    every build's check (its training seed, the epochs it was trained in all, ``kept``, and
    :meth:`~dreamgym.simulator.BuildCheck.as_dict`'s fields), also written into the kept model's metadata
    (``checks``). With ``builds`` 1 the one build is checked and kept whatever its check says.
    """
    if builds < 1:
        raise ValueError(f"builds must be at least 1, got {builds}")
    if more_epochs < 0:
        raise ValueError(f"more_epochs must be at least 0, got {more_epochs}")
    check = check or CheckConfig()
    checks: list[tuple[Path, BuildCheck, int, float]] = []
    try:
        for attempt in range(builds):
            built = target.with_name(f"{target.name}.build{attempt}")
            last = None if attempt == 0 or more_epochs == 0 else (checks[-1][0], checks[-1][3])
            training, epochs = next_training(config, attempt, last, more_epochs, more_learning_rate)
            seed = training.seed
            await train_on_store(
                store, built, training, held_out=held_out, judge=judge, template=template,
                exclude_episodes=exclude_episodes, recipe={**recipe, "seed": seed, "epochs": epochs},
            )  # fmt: skip
            result = await _check(built, store, check, judge, held_out, exclude_episodes, check_episodes)
            checks.append((built, result, seed, epochs))
            where = "the seed set" if check_episodes is None else "the check's episodes"
            log.info("experience model, training seed %d, %g epochs: worst task %.3f of first answers clean on %s (%s)",
                     seed, epochs, result.worst, where,
                     "passed" if result.passed else f"below {check.min_clean}")  # fmt: skip
            if result.passed:
                break
        kept = kept_build([result for _, result, _, _ in checks])
        report = [
            {"seed": seed, "epochs": epochs, "kept": n == kept, **result.as_dict()}
            for n, (_, result, seed, epochs) in enumerate(checks)
        ]
        metadata_path = checks[kept][0] / METADATA_FILE
        metadata = json.loads(metadata_path.read_text())
        metadata_path.write_text(json.dumps({**metadata, "checks": report}, indent=1))
        shutil.rmtree(target, ignore_errors=True)
        checks[kept][0].rename(target)
    finally:  # the builds not kept, or every build where the run was cut short
        for attempt in range(builds):
            shutil.rmtree(target.with_name(f"{target.name}.build{attempt}"), ignore_errors=True)
    return target, report


def next_training(
    config: SimTrainConfig,
    attempt: int,
    last: tuple[Path, float] | None,
    more_epochs: float,
    more_learning_rate: float | None,
) -> tuple[SimTrainConfig, float]:
    """How :func:`train_checked` trains its ``attempt``-th build, and the epochs that build will have had in all:
    ``config`` with training seed ``config.seed + attempt`` where ``last`` is ``None``; else the last build
    (its directory, its epochs) trained ``more_epochs`` more from its own weights, with its seed, at
    ``more_learning_rate`` (``None``: half ``config``'s)."""
    if last is None:
        return dataclasses.replace(config, seed=config.seed + attempt), config.epochs
    directory, epochs = last
    rate = config.lr / 2 if more_learning_rate is None else more_learning_rate
    further = dataclasses.replace(config, base=str(directory), lora=False, epochs=more_epochs, seed=config.seed,
                                  learning_rate=rate)  # fmt: skip
    return further, epochs + more_epochs


async def _check(
    built: Path,
    store: LmdbReplayStore,
    check: CheckConfig,
    judge: bool,
    held_out: Sequence[tuple[str, int | None]],
    exclude_episodes: Sequence[str],
    episodes: Sequence[Sequence[Step]] | None,
) -> BuildCheck:
    model = load_experience_model(built, judge=judge)  # no call cache in the store: its answers are not kept
    try:
        return await check_build(model, store, check, exclude_task_seeds=held_out, exclude_episodes=exclude_episodes,
                                 episodes=episodes)  # fmt: skip
    finally:
        await model.backend.aclose()


def kept_build(checks: Sequence[BuildCheck]) -> int:
    """Which of a run's checked builds :func:`train_checked` keeps: the first that passed, else the one whose worst
    task is best (the earliest of equals)."""
    passed = [n for n, check in enumerate(checks) if check.passed]
    return passed[0] if passed else max(range(len(checks)), key=lambda n: (checks[n].worst, -n))


NO_OP_SHARE = 0.2
"""Most of a random explorer's steps change nothing (a scroll on a page that does not scroll); the share of examples
kept for them (more where, with ``contrast``, the informative ones alone are more: :func:`balance`)."""


def balance(
    examples: list[SFTExample], *, no_op_share: float = NO_OP_SHARE, seed: int = 0, contrast: bool = False
) -> list[SFTExample]:
    """Keep every example whose step changes the page, ends the episode or earns reward; sample the no-ops.

    Training cost on 2 cores is set by tokens, and thousands of near-identical
    "nothing happened" examples teach little that a few hundred do not. By
    default the no-ops are a random sample, all tasks and actions together,
    of ``no_op_share`` of the examples (the offline default's and the demo's
    recipe). With ``contrast``, a no-op of an action that on the same task
    changes the page elsewhere (clicking ONE before TWO in
    click-button-sequence, typing into a field that ignores it) is always
    kept — it is the contrast the model must learn, or it answers the way the
    action's other examples end — grouped by task and action name, and the
    rest (scrolls, mostly) are sampled to fill the share; where the kept ones
    alone exceed it, none of the rest is added. Measured on the faster
    candidate's recipe it fixed none of the termination errors it was meant
    for (``benchmarks/results/sim_ablation.json``, ``candidate-contrast``), so
    it is not the default.
    """
    no_op = no_op_answer()
    acting = {(e.task_id, e.action_name) for e in examples if e.completion != no_op} if contrast else set()
    rest = [e for e in examples if e.completion != no_op]
    kept = [e for e in examples if e.completion == no_op and (e.task_id, e.action_name) in acting]
    others = [e for e in examples if e.completion == no_op and (e.task_id, e.action_name) not in acting]
    budget = int(no_op_share * len(rest) / (1 - no_op_share))
    return rest + kept + random.Random(seed).sample(others, max(0, min(len(others), budget - len(kept))))


def no_op_answer() -> str:
    """The default template's answer for a step that changed nothing, earned nothing and did not end."""
    return answer_text(DEFAULT_TEMPLATE, observation=_EMPTY, next_observation=_EMPTY, reward=0.0, done=False)


_EMPTY = Observation(state="[e1] generic")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.perf_counter()
    path = anyio.run(lambda: build_default(force="--force" in sys.argv))
    print(f"setup: default experience model {time.perf_counter() - started:6.1f} s  ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
