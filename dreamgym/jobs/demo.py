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
   (``real_share`` real, the rest on the simulator);
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
from dreamgym.core.progress import progress
from dreamgym.core.protocols import Embedder  # at run time: the command line reads DemoSettings' field types
from dreamgym.jobs._demo_figures import (
    EpisodeExample,
    UpdateRewards,
    fidelity_by_change,
    pick_examples,
    shadowed_episodes,
    training_curve,
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
from dreamgym.simulator import ScratchModelConfig, SimTrainConfig

if TYPE_CHECKING:
    from dreamgym.agents import LocalPolicy
    from dreamgym.core.types import Step, Task
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.simulator import FidelitySummary
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

DEMO_TASKS = ("click-checkboxes", "click-option", "login-user", "enter-password")
"""MiniWoB++ tasks with a scripted demonstrator on which a warm-started tiny policy is neither hopeless nor
perfect and has a decision left to learn (which named choice comes when, which text goes where): those of
``benchmarks/results/learning_curve.json``."""
TRAINING_SKIPPED = "train_updates is 0"
PHASES = ("1 collect", "2 train experience model", "2 ground", "3 policy", "4 evaluate before",
          "4 simulator on held-out steps", "5 rollouts", "6 train", "7 evaluate after")  # fmt: skip
"""The demo's phases, in order (the experience model is trained only when none is given)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoSettings:
    """What the demo runs. The defaults finish in about ten minutes on 2 CPU cores once setup has built its caches.

    Example:
        >>> DemoSettings(tasks=("click-button",), train_seeds=(0,), held_out_seeds=(1000,), rollout_groups=2)
    """

    tasks: tuple[str, ...] = DEMO_TASKS
    """MiniWoB++ task names; each needs a scripted demonstrator (``dreamgym.bridge.DEMONSTRATORS``)."""
    train_seeds: tuple[int, ...] = tuple(range(40))
    """Seeds of the real seed set and of the rollouts."""
    held_out_seeds: tuple[int, ...] = tuple(range(1000, 1010))
    """Seeds evaluated before and after training: never collected, rolled out or retrieved.
    The defaults are among the offline default model's held-out seeds too."""
    explorers: int = 1
    """Random-explorer episodes per (task, training seed) in the seed set, beside one demonstrator episode."""
    near_misses: int = 1
    """Near-miss episodes per (task, training seed) in the seed set (the demonstrator on a goal wrong in one
    detail: one box or one text, then Submit): they teach the experience model what separates a success from a
    failure."""
    group_size: int = 8
    """Episodes per rollout group (GRPO's G)."""
    rollout_groups: int = 4
    """Rollout groups in phase 5, cycling through (task, training seed)."""
    real_share: float = 0.5
    """Share of rollout and training groups run on real pages (shadowed by the simulator); the rest are
    synthetic."""
    max_steps: int = 6
    """Step limit of every episode."""
    real_concurrency: int = 2
    """Real episodes (browser contexts) at once."""
    temperature: float = 0.5
    """The policy's sampling temperature in rollouts and training (above 0, so a group's episodes differ; at 1
    the sampled policy learnt while its greedy readout did not follow)."""
    eval_temperature: float = 0.0
    """The policy's temperature in evaluation: 0 takes its best action, so before and after
    differ only by training (and by pages that are not deterministic)."""
    policy_model: Path | None = None
    """A transformers causal LM directory to start the policy from (given label tokens if it has none);
    ``None``: a tiny index policy (:func:`dreamgym.trainer.tiny_index_policy`) built on the seed set's pages."""
    warm_epochs: float = 3.0
    """Epochs of behaviour cloning on the seed set's demonstrator episodes before the first evaluation
    (0 skips the warm start)."""
    sim_model: Path | None = None
    """An experience model's directory (the offline default: ``dreamgym sim build-default``); ``None``: a
    demo-size model trained in phase 2 on the seed set (:data:`DEMO_SIM_SIZE`, ``sim_epochs``)."""
    sim_epochs: float = 3.0
    """Epochs of the demo-size experience model over the seed set's examples (about 48 s an epoch on the
    default seed set's ~1,000 examples on 2 cores; unused with ``sim_model``)."""
    out: Path = Path(".cache/demo")
    """Where the stores and the report go (the stores are replaced on each run)."""
    train_updates: int = 6
    """GRPO updates in phase 6 (0 skips training; about 40 s each at the defaults on 2 cores)."""
    train_groups_per_update: int = 4
    """Groups (of ``group_size`` episodes) per update; ``real_share`` of them real."""
    learning_rate: float = 5e-4
    """GRPO's learning rate: of every weight of the tiny policy, of the LoRA adapters of a given model."""
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
        for name in ("explorers", "near_misses", "max_steps", "real_concurrency"):
            if getattr(self, name) < (0 if name in ("explorers", "near_misses") else 1):
                raise ConfigError(f"DemoSettings.{name} is out of range: {getattr(self, name)}")
        if self.group_size < 1 or self.rollout_groups < 1:
            raise ConfigError("DemoSettings.group_size and rollout_groups must be >= 1")
        if self.sim_epochs <= 0 or self.warm_epochs < 0:
            raise ConfigError("DemoSettings.sim_epochs must be > 0 and warm_epochs >= 0")
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
        weights, warm = phase("3 policy", lambda: _prepare_policy(settings, given_policy))
        before = phase("4 evaluate before", lambda: anyio.run(_evaluate, settings, weights, "before"))
        held_out, fidelity = phase(
            "4 simulator on held-out steps", lambda: anyio.run(_held_out_fidelity, settings, sim_dir)
        )
        rollouts, shadow, examples = phase("5 rollouts", lambda: anyio.run(_rollouts, settings, weights, sim_dir))
        trained = phase("6 train", lambda: _train(settings, weights, sim_dir=sim_dir))
        after_weights = trained.policy if trained is not None else weights
        after = phase("7 evaluate after", lambda: anyio.run(_evaluate, settings, after_weights, "after"))
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
        training=_training_record(trained),
        after=after,
        store=store,
        phases=phases,
        held_out_fidelity=fidelity,
        curve=curve,
        examples=examples,
    )
    write_report(report, settings.out)
    return report


def experience_model_dir(settings: DemoSettings) -> Path | None:
    """The given experience model's directory; ``None`` when the demo trains a demo-size one.

    Raises:
        ConfigError: There is no model there; for the offline default, the message says how to build it.
    """
    from dreamgym.jobs.sim_default import default_model_dir

    path = settings.sim_model
    if path is None or (path / "config.json").exists():
        return path
    if path == default_model_dir():
        raise ConfigError(
            f"the offline default experience model is not built yet ({path}); build it once with "
            "`dreamgym sim build-default` (= `make sim-default`, `python -m dreamgym.jobs.sim_default`), "
            "or leave --sim-model out for a demo-size model trained on the seed set"
        )
    raise ConfigError(f"no experience model at {path}; train one with `dreamgym sim train` or pass another directory")


DEMO_SIM_SIZE = ScratchModelConfig(vocab_size=2000, hidden_size=128, layers=2, intermediate_size=384)
"""The demo-size experience model: a 2-layer Llama of width 128 (about 0.8M parameters) trained from scratch on
the seed set in phase 2, where the offline default (4 layers of 256 on 18 tasks) takes many times longer."""


def demo_sim_training(settings: DemoSettings) -> SimTrainConfig:
    """How phase 2 trains the demo-size experience model."""
    return SimTrainConfig(base="scratch", epochs=settings.sim_epochs, max_length=1536, scratch=DEMO_SIM_SIZE)


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
    training seed), real, into the store."""
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
    return {"steps": steps, "episodes": len(episodes), "successes": sum(e.success for e in episodes)}


async def _task_episodes(store: LmdbReplayStore, task_id: str) -> list[Any]:
    seqs = await store.task_seqs(task_id, source="real")
    ids = {step.episode_id for step in await store.get_steps(seqs)}
    return [episode for episode_id in sorted(ids) if (episode := await store.get_episode(episode_id)) is not None]


async def _train_experience_model(settings: DemoSettings) -> Path:
    """Phase 2 without a given model: a demo-size experience model trained on the seed set, with the default
    recipe's template and no-op balance; the held-out (task, seed) pairs are left out of its examples and their
    neighbours (there are none in the seed set: a guard, not a filter)."""
    from dreamgym.jobs.sim_default import train_on_store
    from dreamgym.replay import LmdbReplayStore

    recipe = {
        "recipe": "dreamgym.jobs.demo (demo-size)",
        "tasks": list(settings.tasks),
        "train_seeds": list(settings.train_seeds),
        "held_out_seeds": list(settings.held_out_seeds),
    }
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        return await train_on_store(
            store,
            settings.out / "experience-model",
            demo_sim_training(settings),
            held_out=held_out_pairs(settings),
            recipe=recipe,
        )


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


def _prepare_policy(settings: DemoSettings, given: Path | None) -> tuple[PolicyWeights, dict[str, Any]]:
    """Phase 3: the policy, before any RL: a tiny index policy whose tokenizer learns the seed set's pages (or
    the given model, with label tokens), behaviour-cloned on the seed set's demonstrator episodes
    (``warm_epochs``), saved under ``out/policy``. Returns it and what the warm start did."""
    import torch

    from dreamgym.agents import add_index_tokens
    from dreamgym.simulator import weights_digest
    from dreamgym.trainer import WarmStartConfig, demonstrations, tiny_index_policy, warm_start

    torch.manual_seed(settings.seed)
    episodes = anyio.run(_demonstrator_episodes, settings)
    tasks = {task.task_id: task for task in _tasks(settings)}
    if given is None:
        pages = [(tasks[step.task_id], page) for episode in episodes for step in episode
                 for page in (step.observation, step.next_observation)]  # fmt: skip
        model, tokenizer = tiny_index_policy(pages, seed=settings.seed)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(given))
        tokenizer = AutoTokenizer.from_pretrained(str(given))
        add_index_tokens(model, tokenizer)
    directory = settings.out / "policy"
    draft = PolicyWeights(directory=directory, model=model, tokenizer=tokenizer, digest="")
    record: dict[str, Any] = {"base": "tiny index policy" if given is None else str(given)}
    if settings.warm_epochs > 0:
        policy = draft.policy(anyio.CapacityLimiter(1), temperature=0.0, seed=settings.seed)
        examples, skipped = demonstrations(policy, episodes, list(tasks.values()))
        config = WarmStartConfig(
            epochs=settings.warm_epochs, learning_rate=1e-3, batch_size=4, seed=settings.seed, lm_weight=1.0
        )
        fit = warm_start(policy, examples, config)
        record.update(
            episodes=len(episodes), examples=fit.examples, skipped_steps=skipped, epochs=settings.warm_epochs,
            updates=fit.updates, first_loss=round(fit.first_loss, 4), last_loss=round(fit.last_loss, 4),
            label_accuracy=round(fit.accuracy, 4),
        )  # fmt: skip
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    weights = PolicyWeights(directory=directory, model=model, tokenizer=tokenizer, digest=weights_digest(directory))
    return weights, record


async def _demonstrator_episodes(settings: DemoSettings) -> list[list[Step]]:
    """The seed set's demonstrator episodes, each its steps in order."""
    from dreamgym.bridge import MiniWobDemonstrator
    from dreamgym.replay import LmdbReplayStore

    episodes: dict[str, list[Step]] = {}
    async with LmdbReplayStore(settings.store_dir, readonly=True) as store:
        for name in settings.tasks:
            for step in await store.get_steps(await store.task_seqs(f"miniwob/{name}", source="real")):
                if step.policy_id == MiniWobDemonstrator.policy_id:
                    episodes.setdefault(step.episode_id, []).append(step)
    return [sorted(steps, key=lambda step: step.step_index) for steps in episodes.values()]


async def _evaluate(settings: DemoSettings, weights: PolicyWeights, label: str) -> EvalResult:
    """Phases 4 and 7: one real episode per (task, held-out seed), in evaluation's own store."""
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
        tasks = _tasks(settings)  # run_groups stores them
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
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import load_experience_model
    from dreamgym.validate import ValidationConfig, validate

    async with LmdbReplayStore(
        settings.eval_store_dir, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False)
    ) as held:
        steps: list[Step] = []
        for name in settings.tasks:
            steps += await held.get_steps(await held.task_seqs(f"miniwob/{name}", source="real"))
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder) as store:
        model = load_experience_model(sim_dir, store=store)
        config = ValidationConfig(
            neighbours=model.config.template.neighbours, exclude_task_seeds=held_out_pairs(settings), worst_cases=0
        )
        report = await validate(model, steps, store=store, config=config)
    score = score_summary(report.one_step["model"], steps)
    log.info("demo: simulator right on %d/%d held-out rewards (always-0 %d, majority class %d)",
             score.reward_correct, score.n, score.zero_reward_correct, score.majority_reward_correct)  # fmt: skip
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
        runtime=_runtime_config(settings),
    )
    async with open_runtime(stack, policy) as (runtime, _):
        tasks = _tasks(settings)  # run_groups stores them
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


def _train(settings: DemoSettings, weights: PolicyWeights, *, sim_dir: Path) -> TrainOutcome | None:
    """Phase 6: GRPO on mixed groups (``real_share`` real; LoRA on a given model), through ``dreamgym.trainer``.

    The trainer drives its own runtime (Chromium, the grounded simulator, the
    demo's store) through a portal and closes it before returning; training
    steps go to the demo's store with their provenance. The
    weights (the tiny policy's, or a given model's adapters) are trained in place on
    ``weights.model``; the after-evaluation plays them.
    ``None`` when ``train_updates`` is 0.
    """
    if settings.train_updates == 0:
        return None
    from dreamgym.jobs import StackSettings, stack_sides
    from dreamgym.runtime import RuntimeConfig
    from dreamgym.trainer import LoraSettings, TrainConfig, Trainer

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
        resample_flat=2,  # a group whose episodes all scored alike teaches nothing: play it again as other draws
        seed=settings.seed,
        report_to=(),
        lora=None if settings.policy_model is None else LoraSettings(),  # the tiny policy trains every weight
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


def _training_record(trained: TrainOutcome | None) -> dict[str, Any]:
    if trained is None:
        return {"status": "skipped", "reason": TRAINING_SKIPPED}
    return {"status": "trained", "policy": str(trained.policy.directory), "metrics": dict(trained.metrics)}
