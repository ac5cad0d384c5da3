"""``dreamgym demo``: the main job, offline, on a small CPU machine, in minutes.

Its phases (:data:`PHASES`) are synchronous steps (those that need an event
loop run their own ``anyio.run``, so no browser or store outlives its loop,
and a synchronous trainer can drive its own runtime in between), each
reported as a progress phase (:mod:`dreamgym.core.progress`):

1. **collect** a real seed set on MiniWoB++ tasks in headless Chromium (a
   scripted demonstrator and a random explorer per (task, training seed))
   into the demo's replay store;
2. **train a demo-size experience model** on it (unless one is given), then
   **ground** the model in it: the fresh real transitions are embedded, and
   the model retrieves them as neighbours for every prediction;
3. **build the policy**: a tiny index policy whose tokenizer learns the seed
   set's pages, behaviour-cloned on its demonstrator episodes;
4. **evaluate** the policy on held-out real seeds, before training, in a
   store of its own (held-out pages never reach the simulator's retrieval,
   which also excludes every held-out (task, seed)); then score the
   simulator's one-step predictions of those held-out real steps (pages it
   never saw), beside always-0 and the majority class, and its fidelity
   beside copying the top retrieved change and keeping the page, on all
   steps and on those where the page changed (``dreamgym.validate``);
5. **roll out** groups, a share real and the rest on the simulator; every
   real step is shadowed by the simulator's prediction;
6. **train** the policy with ``dreamgym.trainer``: GRPO on mixed groups
   (``real_share`` real, the rest on the simulator once it has earned the
   task: ``sim_trust`` of its shadowed answers on the task's deciding real
   steps right, else the group is played real); every ``sim_refit_every``
   updates the experience model is refit on the store's real steps (the
   groups played so far among them) and must earn each task again;
7. **evaluate** again on the same held-out seeds; then **report**: a summary
   table and ``report.json`` / ``report.md`` with real and synthetic steps,
   the warm start, success before and after with n, a 95% interval and
   whether the one after clears the one before, the simulator's accuracy on
   held-out real steps (and on the shadowed rollout steps) with n and its
   baselines, and the wall-clock of each phase; and ``report.html``, one
   self-contained page with the verdict, the learning curve, the fidelity
   table and charts, and three shadowed real episodes with the real and the
   predicted pages side by side.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.progress import progress
from dreamgym.jobs._demo_figures import (
    EpisodeExample,
    UpdateRewards,
    fidelity_by_change,
    pick_examples,
    shadowed_episodes,
    training_curve,
)
from dreamgym.jobs._demo_policy import (
    TRAINING_SKIPPED,
    PolicyWeights,
    TrainOutcome,
    collect_demonstrations,
    prepare_policy,
    train_policy,
    training_record,
)
from dreamgym.jobs._demo_report import (
    DemoReport,
    RolloutFigures,
    ShadowScore,
    score_shadows,
    score_summary,
    summary_rows,
    summary_table,
    write_report,
)
from dreamgym.jobs._demo_settings import (
    DEMO_SIM_SIZE,
    DEMO_TASKS,
    DemoSettings,
    demo_sim_template,
    demo_sim_training,
    demo_tasks,
    held_out_pairs,
    held_out_steps,
    runtime_config,
)

if TYPE_CHECKING:
    from dreamgym.agents import LocalPolicy
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import FidelitySummary
    from dreamgym.trainer import EvalResult

__all__ = [
    "DEMO_SIM_SIZE",
    "DEMO_TASKS",
    "TRAINING_SKIPPED",
    "DemoReport",
    "DemoSettings",
    "PolicyWeights",
    "RolloutFigures",
    "ShadowScore",
    "TrainOutcome",
    "demo_sim_template",
    "demo_sim_training",
    "held_out_pairs",
    "run_demo",
    "summary_rows",
    "summary_table",
    "write_report",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

PHASES = ("1 collect", "2 train experience model", "2 ground", "3 policy", "4 evaluate before",
          "4 simulator on held-out steps", "5 rollouts", "6 train", "7 evaluate after")  # fmt: skip
"""The demo's phases, in order (the experience model is trained only when none is given)."""


# ---------------------------------------------------------------------- the job


def run_demo(settings: DemoSettings) -> DemoReport:
    """Run the seven phases and write ``report.json``, ``report.md`` and ``report.html`` under ``settings.out``.

    Raises:
        ConfigError: A model directory is missing (the message names the command that builds it).
    """
    given_sim = experience_model_dir(settings)
    given_policy = policy_model_dir(settings)
    for path in (settings.store_dir, settings.eval_store_dir):
        shutil.rmtree(path, ignore_errors=True)  # each run starts from empty stores
    phases: dict[str, float] = {}

    def timed(name: str, step: Callable[[], T]) -> T:
        log.info("demo: %s ...", name)
        began = time.perf_counter()
        result = step()
        phases[name] = time.perf_counter() - began
        log.info("demo: %s done in %.1f s", name, phases[name])
        return result

    with progress("dreamgym demo", total=len(PHASES), unit="phases") as demo:

        def phase(name: str, step: Callable[[], T]) -> T:
            demo.advance(0, note=name)
            result = timed(name, step)
            demo.advance()
            return result

        seed_set = phase("1 collect", lambda: anyio.run(_collect, settings))
        if given_sim is None:
            sim_dir = phase("2 train experience model", lambda: anyio.run(_train_experience_model, settings))
        else:
            sim_dir = given_sim
            demo.advance()
        grounding = phase("2 ground", lambda: anyio.run(_ground, settings, sim_dir))
        grounding["experience_model_kind"] = "given" if given_sim else "demo-size"
        seed_set = {**seed_set, "vectors": grounding.pop("vectors")}
        checks = tuple(grounding.pop("experience_model_checks", ()))
        weights, warm = phase("3 policy", lambda: prepare_policy(settings, given_policy, collect=False))
        before = phase("4 evaluate before", lambda: anyio.run(_evaluate, settings, weights, "before"))
        held_out, fidelity = phase(
            "4 simulator on held-out steps", lambda: anyio.run(_held_out_fidelity, settings, sim_dir)
        )
        rollouts, shadow, examples = phase("5 rollouts", lambda: anyio.run(_rollouts, settings, weights, sim_dir))
        trained = phase("6 train", lambda: train_policy(settings, weights, sim_dir=sim_dir))
        after_weights = trained.policy if trained is not None else weights
        after = phase("7 evaluate after", lambda: anyio.run(_evaluate, settings, after_weights, "after"))
        if trained is not None and trained.report is not None:
            trained.report(_tracker_figures(before, after, fidelity))
    store = anyio.run(_store_steps, settings.store_dir)
    curve = anyio.run(_training_curve, settings) if trained is not None else ()
    report = DemoReport(
        settings=settings.as_dict(),
        models={"policy": f"{weights.directory.name}@{weights.digest[:16]}", **grounding},
        seed_set=seed_set,
        warm_start=warm,
        before=before,
        rollouts=rollouts,
        shadow=shadow,
        held_out=held_out,
        training=training_record(trained),
        after=after,
        store=store,
        phases=phases,
        held_out_fidelity=fidelity,
        curve=curve,
        examples=examples,
        experience_model_checks=checks,
    )
    write_report(report, settings.out)
    return report


def _tracker_figures(
    before: EvalResult, after: EvalResult, fidelity: Mapping[str, Mapping[str, FidelitySummary]]
) -> dict[str, float]:
    """The demo's own figures for the trainer's trackers: held-out success before and after training with their
    95% intervals, and the simulator's held-out fidelity beside the baselines, by split (all under ``eval/``)."""
    figures: dict[str, float] = {}
    for label, result in (("before", before), ("after", after)):
        low, high = result.interval
        figures |= {f"eval/{label}/success_rate": result.success_rate, f"eval/{label}/success_ci95_low": low,
                    f"eval/{label}/success_ci95_high": high, f"eval/{label}/episodes": result.episodes}  # fmt: skip
    for split, rows in fidelity.items():
        for name, summary in rows.items():
            for metric in ("reward_accuracy", "done_accuracy", "similarity", "f1"):
                figures[f"eval/fidelity/{split.replace(' ', '_')}/{name}/{metric}"] = getattr(summary, metric)
    return figures


def experience_model_dir(settings: DemoSettings) -> Path | None:
    """The given experience model's directory; ``None`` when the demo trains a demo-size one.

    Raises:
        ConfigError: There is no model there; for the offline default, the message says how to build it.
    """
    from dreamgym.jobs.sim_default import default_model_dir, warn_if_outdated

    path = settings.sim_model
    if path is None:
        return None
    is_default = path == default_model_dir()
    if is_default:
        warn_if_outdated(path)
    if (path / "config.json").exists():
        return path
    if is_default:
        raise ConfigError(
            f"the offline default experience model is not built yet ({path}); build it once with "
            "`dreamgym sim build-default` (= `make sim-default`, `python -m dreamgym.jobs.sim_default`), "
            "or leave --sim-model out for a demo-size model trained on the seed set"
        )
    raise ConfigError(f"no experience model at {path}; train one with `dreamgym sim train` or pass another directory")


def policy_model_dir(settings: DemoSettings) -> Path | None:
    """The given policy model's directory; ``None`` when the demo builds a tiny index policy.

    Raises:
        ConfigError: There is no model there.
    """
    path = settings.policy_model
    if path is not None and not (path / "config.json").exists():
        raise ConfigError(f"no policy model at {path}; give a transformers causal LM directory")
    return path


# ---------------------------------------------------------------------- phases


async def _collect(settings: DemoSettings) -> dict[str, int]:
    """Phase 1: a demonstrator, ``explorers`` random and ``near_misses`` near-miss episodes per (task,
    training seed), real, into the store; then the demonstrator's episodes of ``demonstration_seeds`` into their
    own store (the warm start's, and phase 2's check of its experience model)."""
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import LmdbReplayStore, StoreConfig

    plan = CollectPlan(
        tasks=settings.tasks,
        seeds=settings.train_seeds,
        explorers=settings.explorers,
        near_misses=settings.near_misses,
        max_steps=settings.max_steps,
        contexts=settings.real_concurrency,
    )
    # Indexing waits for phase 2: embedding alongside would take the cores from Chromium.
    async with LmdbReplayStore(
        settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False)
    ) as store:
        steps = await collect_miniwob(store, plan)
        episodes = [e for name in settings.tasks for e in await _task_episodes(store, f"miniwob/{name}")]
    log.info("demo: seed set of %d real steps in %d episodes", steps, len(episodes))
    await collect_demonstrations(settings)
    return {"steps": steps, "episodes": len(episodes), "successes": sum(e.success for e in episodes)}


async def _task_episodes(store: LmdbReplayStore, task_id: str) -> list[Any]:
    seqs = await store.task_seqs(task_id, source="real")
    ids = {step.episode_id for step in await store.get_steps(seqs)}
    return [episode for episode_id in sorted(ids) if (episode := await store.get_episode(episode_id)) is not None]


async def _train_experience_model(settings: DemoSettings) -> Path:
    """Phase 2 without a given model: a demo-size experience model trained on the seed set, with the default
    recipe's template and no-op balance; the held-out (task, seed) pairs are left out of its examples and their
    neighbours (there are none in the seed set: a guard, not a filter)."""
    from dreamgym.jobs.sim_default import train_checked, train_on_store
    from dreamgym.replay import LmdbReplayStore

    recipe = {
        "recipe": "dreamgym.jobs.demo (demo-size)",
        "tasks": list(settings.tasks),
        "train_seeds": list(settings.train_seeds),
        "held_out_seeds": list(settings.held_out_seeds),
    }
    target = settings.out / "experience-model"
    training, template = demo_sim_training(settings), demo_sim_template(settings)
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        if settings.sim_builds == 1:
            return await train_on_store(store, target, training, held_out=held_out_pairs(settings), recipe=recipe,
                                        judge=settings.outcome_judge, template=template)  # fmt: skip
        kept, _ = await train_checked(store, target, training, builds=settings.sim_builds,
                                      held_out=held_out_pairs(settings), recipe=recipe, judge=settings.outcome_judge,
                                      template=template, check_episodes=await _demonstrations(settings),
                                      more_epochs=settings.sim_more_epochs)  # fmt: skip
        return kept


async def _demonstrations(settings: DemoSettings) -> list[list[Any]] | None:
    """The demonstrator's episodes of ``demonstration_seeds`` (pages the experience model never sees), or ``None``
    where there are none: phase 2 then checks its builds on the seed set."""
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import real_episodes

    if not settings.demonstration_seeds:
        return None
    async with LmdbReplayStore(settings.demonstrations_dir, readonly=True) as store:
        return await real_episodes(store)


async def _ground(settings: DemoSettings, sim_dir: Path) -> dict[str, Any]:
    """Phase 2: embed the seed set (the model's retrieval corpus) and load the model to check it answers from it."""
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model, read_metadata

    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        await store.flush()
        stats = await store.stats()
        model = load_experience_model(sim_dir, store=store)
        template = model.config.template
    log.info(
        "demo: %d real transitions embedded (%s) for %s to retrieve, %d per prediction",
        stats.vectors, stats.embedder, model.model_id, template.neighbours,
    )  # fmt: skip
    grounding = {"vectors": stats.vectors, "experience_model": model.model_id, "embedder": stats.embedder}
    checks = read_metadata(sim_dir).get("checks")
    return grounding | ({"experience_model_checks": checks} if checks else {})


async def _evaluate(settings: DemoSettings, weights: PolicyWeights, label: str) -> EvalResult:
    """Phases 4 and 7: one real episode per (task, held-out seed), in evaluation's own store."""
    from dreamgym.jobs import StackSettings, open_runtime
    from dreamgym.replay import HashingEmbedder, StoreConfig
    from dreamgym.trainer import evaluate

    policy = _policy_factory(weights, temperature=settings.eval_temperature, seed=settings.seed)
    # Evaluation's store is a record, never searched: a cheap embedder and no index.
    stack = StackSettings(
        store=settings.eval_store_dir,
        runtime=runtime_config(settings),
        embedder=HashingEmbedder(64),
        store_config=StoreConfig(auto_index=False),
    )
    async with open_runtime(stack, policy) as (runtime, _):
        tasks = demo_tasks(settings)  # run_groups stores them
        result = await evaluate(runtime, tasks, settings.held_out_seeds, label=label)
    low, high = result.interval
    log.info("demo: %s: %d/%d held-out episodes solved (95%% CI %.2f-%.2f)",
             label, result.successes, result.episodes, low, high)  # fmt: skip
    return result


async def _held_out_fidelity(
    settings: DemoSettings, sim_dir: Path
) -> tuple[ShadowScore, dict[str, dict[str, FidelitySummary]]]:
    """Phase 4, then: the simulator's one-step predictions of the held-out real steps evaluation played.

    The model never trained on those seeds, and its retrieval (from the
    demo's store) leaves out every held-out (task, seed): the accuracy says
    how well it predicts pages it has not seen, on the states the policy visits.
    ``dreamgym.validate`` scores it beside the two baselines (copy the top
    retrieved transition's change, keep the page), on all the steps and by
    whether the real page changed. Returns the model's counts beside always-0
    and the majority class, and that table.
    """
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model
    from dreamgym.validate import ValidationConfig, validate

    steps = await held_out_steps(settings)
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        model = load_experience_model(sim_dir, store=store)
        config = ValidationConfig(
            neighbours=model.config.template.neighbours, exclude_task_seeds=held_out_pairs(settings), worst_cases=0
        )
        report = await validate(model, steps, store=store, config=config)
    score = score_summary(report.one_step["model"], steps, report.deciding["model"])
    log.info("demo: simulator right on %d/%d held-out rewards (always-0 %d, majority class %d), on %d/%d deciding",
             score.reward_correct, score.n, score.zero_reward_correct, score.majority_reward_correct,
             score.deciding_correct, score.deciding)  # fmt: skip
    return score, fidelity_by_change(report)


async def _rollouts(
    settings: DemoSettings, weights: PolicyWeights, sim_dir: Path
) -> tuple[RolloutFigures, ShadowScore, tuple[EpisodeExample, ...]]:
    """Phase 5: mixed groups; the real ones shadowed by the simulator, whose predictions are then scored,
    and three of the shadowed episodes kept to show step by step."""
    from dreamgym.jobs import StackSettings, mixed_groups, open_runtime

    policy = _policy_factory(weights, temperature=settings.temperature, seed=settings.seed + 1)
    stack = StackSettings(
        store=settings.store_dir,
        sim_model=sim_dir,
        exclude_task_seeds=held_out_pairs(settings),
        embedder=settings.embedder,
        runtime=runtime_config(settings),
    )
    async with open_runtime(stack, policy) as (runtime, _):
        tasks = demo_tasks(settings)  # run_groups stores them
        groups = mixed_groups(
            tasks, settings.train_seeds, size=settings.group_size, real_share=settings.real_share,
            shadow=True, count=settings.rollout_groups, seed=settings.seed,
        )  # fmt: skip
        results = await runtime.run_groups(groups, label="mixed rollouts (real ones shadowed)")
        figures = RolloutFigures.of(results, runtime.stats.snapshot())
        shadowed = await shadowed_episodes(runtime.store, results)
    shadow = score_shadows(shadowed)
    log.info("demo: rollouts: %d real and %d synthetic steps; simulator right on %d/%d shadowed rewards",
             figures.real_steps, figures.synthetic_steps, shadow.reward_correct, shadow.n)  # fmt: skip
    return figures, shadow, pick_examples(shadowed)


async def _training_curve(settings: DemoSettings) -> tuple[UpdateRewards, ...]:
    """After phase 6: each update's played episodes by side (the demo's store) and TRL's reward (``metrics.jsonl``)."""
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(settings.store_dir, readonly=True) as store:
        return await training_curve(store, settings.out / "train" / "metrics.jsonl")


async def _store_steps(path: Path) -> dict[str, int]:
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        return dict((await store.stats()).steps)


# ---------------------------------------------------------------------- helpers


def _policy_factory(weights: PolicyWeights, *, temperature: float, seed: int) -> Callable[[Any], LocalPolicy]:
    return lambda limiter: weights.policy(limiter, temperature=temperature, seed=seed)
