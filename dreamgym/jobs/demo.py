"""``dreamgym demo``: the main job, offline, on a small CPU machine, in minutes.

Seven phases, each a synchronous step (those that need an event loop run
their own ``anyio.run``, so no browser or store outlives its loop, and a
synchronous trainer can drive its own runtime in between):

1. **collect** a small real seed set on MiniWoB++ tasks in headless Chromium
   (a scripted demonstrator and a random explorer per (task, training seed))
   into the demo's replay store;
2. **ground** the offline experience model in it: embed the fresh real
   transitions, which the model retrieves as neighbours for every prediction;
3. **evaluate** the policy on held-out real seeds, before training, in a
   store of its own (held-out pages never reach the simulator's retrieval,
   which also excludes every held-out (task, seed)); then score the
   simulator's one-step predictions of those held-out real steps (pages it
   never saw), beside always-0 and the majority class;
4. **roll out** groups, a share real and the rest on the simulator; every
   real step is shadowed by the simulator's prediction;
5. **train** the policy briefly with ``dreamgym.trainer``: GRPO with LoRA on
   mixed groups (``real_share`` real, the rest on the simulator);
6. **evaluate** again on the same held-out seeds;
7. **report**: a summary table and ``report.json`` / ``report.md`` with real
   and synthetic steps, success before and after with n and a 95% interval,
   the simulator's reward accuracy on held-out real steps (and on the
   shadowed rollout steps) with n and its baselines, and the wall-clock of
   each phase.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Embedder  # at run time: the command line reads DemoSettings' field types
from dreamgym.jobs._demo_report import (
    DemoReport,
    RolloutFigures,
    ShadowScore,
    score_predictions,
    score_shadows,
    summary_rows,
    summary_table,
    write_report,
)

if TYPE_CHECKING:
    from dreamgym.agents import LocalPolicy
    from dreamgym.core.protocols import ReplayStore
    from dreamgym.core.types import Task
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import EvalResult

__all__ = [
    "DEMO_TASKS",
    "DemoReport",
    "DemoSettings",
    "PolicyWeights",
    "RolloutFigures",
    "ShadowScore",
    "TrainOutcome",
    "run_demo",
    "summary_rows",
    "summary_table",
    "write_report",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEMO_TASKS = ("click-button", "click-checkboxes", "enter-text", "focus-text")
"""Short MiniWoB++ tasks with a scripted demonstrator, on which SmolLM2-135M is neither hopeless nor perfect."""
TRAINING_SKIPPED = "train_updates is 0"


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoSettings:
    """What the demo runs. The defaults finish in about ten minutes on 2 CPU cores once setup has built its caches.

    Example:
        >>> DemoSettings(tasks=("click-button",), train_seeds=(0,), held_out_seeds=(1000,), rollout_groups=2)
    """

    tasks: tuple[str, ...] = DEMO_TASKS
    """MiniWoB++ task names; each needs a scripted demonstrator (``dreamgym.bridge.DEMONSTRATORS``)."""
    train_seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of the real seed set and of the rollouts."""
    held_out_seeds: tuple[int, ...] = (1000, 1001, 1002)
    """Seeds evaluated before and after training: never collected, rolled out or retrieved.
    The defaults are among the offline default model's held-out seeds too."""
    explorers: int = 1
    """Random-explorer episodes per (task, training seed) in the seed set, beside one demonstrator episode."""
    group_size: int = 4
    """Episodes per rollout group (GRPO's G)."""
    rollout_groups: int = 8
    """Rollout groups in phase 4, cycling through (task, training seed)."""
    real_share: float = 0.25
    """Share of rollout groups run on real pages (shadowed by the simulator); the rest are synthetic."""
    max_steps: int = 5
    """Step limit of every episode."""
    real_concurrency: int = 2
    """Real episodes (browser contexts) at once."""
    temperature: float = 1.0
    """The policy's sampling temperature in rollouts (above 0, so a group's episodes differ)."""
    eval_temperature: float = 0.0
    """The policy's temperature in evaluation: 0 takes its best action, so before and after
    differ only by training (and by pages that are not deterministic)."""
    policy_model: Path | None = None
    """The policy's model directory; ``None``: SmolLM2-135M-Instruct as setup converted it."""
    sim_model: Path | None = None
    """The experience model's directory; ``None``: the offline default (``make sim-default``)."""
    out: Path = Path(".cache/demo")
    """Where the stores and the report go (the stores are replaced on each run)."""
    train_updates: int = 3
    """GRPO updates in phase 5 (0 skips training): a brief run, to show the loop end to end."""
    train_groups_per_update: int = 2
    """Groups (of ``group_size`` episodes) per update; ``real_share`` of them real."""
    learning_rate: float = 1e-4
    """Of the LoRA adapters."""
    seed: int = 0
    """Seeds the policy's sampling and which rollout groups are real."""
    embedder: Embedder | None = field(default=None, compare=False)
    """Embedder of the demo's store; ``None``: MiniLM when installed."""

    def __post_init__(self) -> None:
        from dreamgym.bridge import DEMONSTRATORS

        if not self.tasks or not self.train_seeds or not self.held_out_seeds:
            raise ConfigError("DemoSettings needs at least one task, one training seed and one held-out seed")
        unknown = [name for name in self.tasks if name not in DEMONSTRATORS]
        if unknown:
            raise ConfigError(
                f"tasks {unknown} have no scripted demonstrator to collect the seed set with; "
                f"choose among {sorted(DEMONSTRATORS)}"
            )
        if set(self.train_seeds) & set(self.held_out_seeds):
            raise ConfigError("held-out seeds must differ from training seeds, or evaluation measures memory")
        for name in ("explorers", "max_steps", "real_concurrency"):
            if getattr(self, name) < (0 if name == "explorers" else 1):
                raise ConfigError(f"DemoSettings.{name} is out of range: {getattr(self, name)}")
        if self.group_size < 1 or self.rollout_groups < 1:
            raise ConfigError("DemoSettings.group_size and rollout_groups must be >= 1")
        if self.train_updates < 0 or self.train_groups_per_update < 1 or self.learning_rate <= 0:
            raise ConfigError(
                "DemoSettings.train_updates must be >= 0, train_groups_per_update >= 1, learning_rate > 0"
            )
        if not 0.0 <= self.real_share <= 1.0:
            raise ConfigError(f"DemoSettings.real_share must be in [0, 1], got {self.real_share}")

    @property
    def store_dir(self) -> Path:
        """The demo's replay store: the seed set, the rollouts, the shadow predictions."""
        return self.out / "store"

    @property
    def eval_store_dir(self) -> Path:
        """Evaluation's own store, never searched by the simulator."""
        return self.out / "eval-store"

    def as_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "embedder"}
        return {key: str(value) if isinstance(value, Path) else value for key, value in values.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyWeights:
    """A policy model loaded once; each phase wraps it in a :class:`LocalPolicy` made in its own event loop."""

    directory: Path
    model: Any
    tokenizer: Any
    digest: str

    @classmethod
    def load(cls, directory: Path) -> PolicyWeights:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from dreamgym.agents import add_index_tokens
        from dreamgym.simulator import weights_digest

        model = AutoModelForCausalLM.from_pretrained(str(directory))
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        digest = weights_digest(directory)
        if add_index_tokens(model, tokenizer):
            digest = f"{digest[:12]}+labels"
        return cls(directory=directory, model=model, tokenizer=tokenizer, digest=digest)

    def policy(self, limiter: anyio.CapacityLimiter, *, temperature: float, seed: int) -> LocalPolicy:
        """The ``index`` policy over the page's listed candidates, sharing ``limiter`` with the other torch work.

        It draws the label token of one candidate from its full softmax, so
        what it records is exactly what GRPO trains (a chooser is not
        trainable). The candidates are listed in the prompt, so the system
        message need not list the action definitions.
        """
        from dreamgym.agents import LocalPolicy, LocalPolicyConfig

        config = LocalPolicyConfig(mode="index", temperature=temperature, seed=seed, list_actions=False)
        return LocalPolicy(
            self.model, self.tokenizer, name=self.directory.name, digest=self.digest, config=config, limiter=limiter
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainOutcome:
    """What the train phase hands back: the trained policy and the trainer's figures."""

    policy: PolicyWeights
    """The trained weights; the second evaluation plays them."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """``train/...`` figures (steps, real and synthetic steps used, loss...)."""


# ---------------------------------------------------------------------- the job


def run_demo(settings: DemoSettings) -> DemoReport:
    """Run the seven phases and write ``report.json`` and ``report.md`` under ``settings.out``.

    Raises:
        ConfigError: A model directory is missing (the message names the command that builds it).
    """
    sim_dir = experience_model_dir(settings)
    policy_dir = policy_model_dir(settings)
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

    seed_set = timed("1 collect", lambda: anyio.run(_collect, settings))
    grounding = timed("2 ground", lambda: anyio.run(_ground, settings, sim_dir))
    seed_set = {**seed_set, "vectors": grounding.pop("vectors")}
    weights = timed("load policy", lambda: PolicyWeights.load(policy_dir))
    before = timed("3 evaluate before", lambda: anyio.run(_evaluate, settings, weights, "before"))
    held_out = timed("3 simulator on held-out steps", lambda: anyio.run(_held_out_fidelity, settings, sim_dir))
    rollouts, shadow = timed("4 rollouts", lambda: anyio.run(_rollouts, settings, weights, sim_dir))
    trained = timed("5 train", lambda: _train(settings, weights, sim_dir=sim_dir))
    after_weights = trained.policy if trained is not None else weights
    after = timed("6 evaluate after", lambda: anyio.run(_evaluate, settings, after_weights, "after"))
    store = anyio.run(_store_steps, settings.store_dir)
    report = DemoReport(
        settings=settings.as_dict(),
        models={"policy": f"{policy_dir.name}@{weights.digest[:16]}", **grounding},
        seed_set=seed_set,
        before=before,
        rollouts=rollouts,
        shadow=shadow,
        held_out=held_out,
        training=_training_record(trained),
        after=after,
        store=store,
        phases=phases,
    )
    write_report(report, settings.out)
    return report


def experience_model_dir(settings: DemoSettings) -> Path:
    """The experience model's directory.

    Raises:
        ConfigError: There is no model there; for the default, the message says how to build it.
    """
    from dreamgym.jobs.sim_default import default_model_dir

    path = settings.sim_model or default_model_dir()
    if (path / "config.json").exists():
        return path
    if settings.sim_model is None:
        raise ConfigError(
            f"the offline default experience model is not built yet ({path}); build it once with "
            "`make sim-default` (= `.venv/bin/python -m dreamgym.jobs.sim_default`, about an hour on 2 cores), "
            "or pass --sim-model DIR"
        )
    raise ConfigError(f"no experience model at {path}; train one with `dreamgym sim train` or pass another directory")


def policy_model_dir(settings: DemoSettings) -> Path:
    """The policy's directory: the given one, or SmolLM2 from the setup's cache.

    Raises:
        ConfigError: There is no model there.
    """
    from dreamgym.offline import smollm2_checkpoint

    path = settings.policy_model or smollm2_checkpoint()
    if not (path / "config.json").exists():
        raise ConfigError(f"no policy model at {path}; give a transformers chat model directory")
    return path


# ---------------------------------------------------------------------- phases


async def _collect(settings: DemoSettings) -> dict[str, int]:
    """Phase 1: a demonstrator and ``explorers`` random episodes per (task, training seed), real, into the store."""
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import LmdbReplayStore, StoreConfig

    plan = CollectPlan(
        tasks=settings.tasks,
        seeds=settings.train_seeds,
        explorers=settings.explorers,
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
    return {"steps": steps, "episodes": len(episodes), "successes": sum(e.success for e in episodes)}


async def _task_episodes(store: LmdbReplayStore, task_id: str) -> list[Any]:
    seqs = await store.task_seqs(task_id, source="real")
    ids = {step.episode_id for step in await store.get_steps(seqs)}
    return [episode for episode_id in sorted(ids) if (episode := await store.get_episode(episode_id)) is not None]


async def _ground(settings: DemoSettings, sim_dir: Path) -> dict[str, Any]:
    """Phase 2: embed the seed set (the model's retrieval corpus) and load the model to check it answers from it."""
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model

    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        await store.flush()
        stats = await store.stats()
        model = load_experience_model(sim_dir, store=store)
        template = model.config.template
    log.info(
        "demo: %d real transitions embedded (%s) for %s to retrieve, %d per prediction",
        stats.vectors, stats.embedder, model.model_id, template.neighbours,
    )  # fmt: skip
    return {"vectors": stats.vectors, "experience_model": model.model_id, "embedder": stats.embedder}


async def _evaluate(settings: DemoSettings, weights: PolicyWeights, label: str) -> EvalResult:
    """Phases 3 and 6: one real episode per (task, held-out seed), in evaluation's own store."""
    from dreamgym.jobs import StackSettings, open_runtime
    from dreamgym.replay import HashingEmbedder, StoreConfig
    from dreamgym.trainer import evaluate

    policy = _policy_factory(weights, temperature=settings.eval_temperature, seed=settings.seed)
    # Evaluation's store is a record, never searched: a cheap embedder and no index.
    stack = StackSettings(
        store=settings.eval_store_dir,
        runtime=_runtime_config(settings),
        embedder=HashingEmbedder(64),
        store_config=StoreConfig(auto_index=False),
    )
    async with open_runtime(stack, policy) as (runtime, _):
        tasks = await _put_tasks(runtime.store, settings)
        result = await evaluate(runtime, tasks, settings.held_out_seeds, label=label)
    low, high = result.interval
    log.info("demo: %s: %d/%d held-out episodes solved (95%% CI %.2f-%.2f)",
             label, result.successes, result.episodes, low, high)  # fmt: skip
    return result


async def _held_out_fidelity(settings: DemoSettings, sim_dir: Path) -> ShadowScore:
    """Phase 3, then: the simulator's one-step predictions of the held-out real steps evaluation played.

    The model never trained on those seeds, and its retrieval (from the
    demo's store) leaves out every held-out (task, seed): the accuracy says
    how well it predicts pages it has not seen, on the states the policy visits.
    """
    from dreamgym.core.types import Step
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import load_experience_model, predict_steps, teacher_forced_queries

    async with LmdbReplayStore(
        settings.eval_store_dir, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False)
    ) as held:
        steps: list[Step] = []
        for name in settings.tasks:
            steps += await held.get_steps(await held.task_seqs(f"miniwob/{name}", source="real"))
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        model = load_experience_model(sim_dir, store=store)
        queries = await teacher_forced_queries(
            steps, store=store, neighbours=model.config.template.neighbours,
            exclude_task_seeds=held_out_pairs(settings),
        )  # fmt: skip
        made = await predict_steps(model, queries)
    score = score_predictions([step for step, _ in queries], made.predictions)
    log.info("demo: simulator right on %d/%d held-out rewards (always-0 %d, majority class %d)",
             score.reward_correct, score.n, score.zero_reward_correct, score.majority_reward_correct)  # fmt: skip
    return score


async def _rollouts(
    settings: DemoSettings, weights: PolicyWeights, sim_dir: Path
) -> tuple[RolloutFigures, ShadowScore]:
    """Phase 4: mixed groups; the real ones shadowed by the simulator, whose predictions are then scored."""
    from dreamgym.jobs import StackSettings, mixed_groups, open_runtime

    policy = _policy_factory(weights, temperature=settings.temperature, seed=settings.seed + 1)
    stack = StackSettings(
        store=settings.store_dir,
        sim_model=sim_dir,
        exclude_task_seeds=held_out_pairs(settings),
        embedder=settings.embedder,
        runtime=_runtime_config(settings),
    )
    async with open_runtime(stack, policy) as (runtime, _):
        tasks = await _put_tasks(runtime.store, settings)
        groups = mixed_groups(
            tasks, settings.train_seeds, size=settings.group_size, real_share=settings.real_share,
            shadow=True, count=settings.rollout_groups, seed=settings.seed,
        )  # fmt: skip
        results = await runtime.run_groups(groups)
        figures = RolloutFigures.of(results, runtime.stats.snapshot())
        shadow = await score_shadows(runtime.store, results)
    log.info("demo: rollouts: %d real and %d synthetic steps; simulator right on %d/%d shadowed rewards",
             figures.real_steps, figures.synthetic_steps, shadow.reward_correct, shadow.n)  # fmt: skip
    return figures, shadow


def _train(settings: DemoSettings, weights: PolicyWeights, *, sim_dir: Path) -> TrainOutcome | None:
    """Phase 5: GRPO on mixed groups (``real_share`` real) with LoRA, through ``dreamgym.trainer``.

    The trainer drives its own runtime (Chromium, the grounded simulator, the
    demo's store) through a portal and closes it before returning; training
    steps go to the demo's store with their provenance. The adapters are
    trained in place on ``weights.model``; the after-evaluation plays them.
    ``None`` when ``train_updates`` is 0.
    """
    if settings.train_updates == 0:
        return None
    from dreamgym.jobs import StackSettings, stack_sides
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import TrainConfig, Trainer

    out = settings.out / "train"
    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(
        mode="mixed",
        updates=settings.train_updates,
        output_dir=out,
        group_size=max(2, settings.group_size),
        groups_per_update=settings.train_groups_per_update,
        learning_rate=settings.learning_rate,
        real_share=settings.real_share,
        seed=settings.seed,
        report_to=(),
    )
    stack = StackSettings(
        store=settings.store_dir,
        eval_store=out / "eval-store",
        sim_model=sim_dir,
        exclude_task_seeds=held_out_pairs(settings),
        runtime=RuntimeConfig(max_steps=settings.max_steps, real_concurrency=settings.real_concurrency),
        embedder=settings.embedder,
    )
    policy = weights.policy(anyio.CapacityLimiter(1), temperature=settings.temperature, seed=settings.seed)
    trainer = Trainer(
        config,
        policy=policy,
        tasks=_tasks(settings),
        open_sides=stack_sides(stack),
        train_seeds=settings.train_seeds,
    )
    result = trainer.train(resume=False)
    state = result.state
    losses = [row["train/loss"] for row in _metric_rows(out) if "train/loss" in row]
    trained = PolicyWeights(
        directory=result.final_dir,
        model=trainer.grpo.model,
        tokenizer=weights.tokenizer,
        digest=f"{weights.digest[:12]}+lora-u{state.update}",
    )
    metrics = {
        "train/updates": float(state.update),
        "train/real_steps": float(state.real_steps),
        "train/synthetic_steps": float(state.synthetic_steps),
        "train/real_groups": float(state.real_groups),
        "train/synthetic_groups": float(state.synthetic_groups),
        "train/dropped_groups": float(state.dropped_groups),
        "train/seconds": result.seconds,
        "train/rollout_seconds": state.rollout_seconds,
        **({"train/last_loss": float(losses[-1])} if losses else {}),
    }
    return TrainOutcome(policy=trained, metrics=metrics)


def _metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    import json

    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tasks(settings: DemoSettings) -> list[Task]:
    from dreamgym.bridge import miniwob_tasks

    return miniwob_tasks(list(settings.tasks), settings.max_steps)


async def _store_steps(path: Path) -> dict[str, int]:
    from dreamgym.replay import LmdbReplayStore

    async with LmdbReplayStore(path, readonly=True) as store:
        return dict((await store.stats()).steps)


# ---------------------------------------------------------------------- helpers


def held_out_pairs(settings: DemoSettings) -> tuple[tuple[str, int | None], ...]:
    """Every held-out (task id, seed): retrieval must never return them (the leakage rule)."""
    from dreamgym.jobs import held_out

    return held_out([f"miniwob/{name}" for name in settings.tasks], settings.held_out_seeds)


def _runtime_config(settings: DemoSettings) -> RuntimeConfig:
    from dreamgym.runtime import RuntimeConfig

    return RuntimeConfig(max_steps=settings.max_steps, real_concurrency=settings.real_concurrency)


def _policy_factory(weights: PolicyWeights, *, temperature: float, seed: int) -> Callable[[Any], LocalPolicy]:
    return lambda limiter: weights.policy(limiter, temperature=temperature, seed=seed)


async def _put_tasks(store: ReplayStore, settings: DemoSettings) -> list[Task]:
    from dreamgym.bridge import miniwob_tasks

    tasks = miniwob_tasks(settings.tasks, settings.max_steps)
    for task in tasks:
        await store.put_task(task)
    return tasks


def _training_record(trained: TrainOutcome | None) -> dict[str, Any]:
    if trained is None:
        return {"status": "skipped", "reason": TRAINING_SKIPPED}
    return {"status": "trained", "policy": str(trained.policy.directory), "metrics": dict(trained.metrics)}
