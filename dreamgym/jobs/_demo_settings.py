"""What ``dreamgym demo`` runs: its settings, its tasks and the helpers every phase shares."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Embedder  # at run time: the command line reads DemoSettings' field types
from dreamgym.simulator import ScratchModelConfig, SimTrainConfig, TemplateConfig

if TYPE_CHECKING:
    from dreamgym.core.types import Step, Task
    from dreamgym.runtime import RuntimeConfig

__all__ = ["DEMO_SIM_SIZE", "DEMO_TASKS", "DemoSettings", "demo_sim_template", "demo_sim_training", "demo_tasks",
           "held_out_pairs", "held_out_steps", "runtime_config"]  # fmt: skip

DEMO_TASKS = ("click-checkboxes", "click-option", "login-user", "enter-password")
"""MiniWoB++ tasks with a scripted demonstrator on which a warm-started tiny policy is neither hopeless nor
perfect and has a decision left to learn (which named choice comes when, which text goes where): those of
``benchmarks/results/learning_curve.json``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoSettings:
    """What the demo runs. The defaults took 9 min 15 s on a 2-core AMD EPYC without bfloat16 units, after 89 s
    of setup from a fresh clone (``benchmarks/results/first_run.json`` at b35fd2f: 37 s of it the refit); 11 min
    50 s on a slow draw of the machine, after 2 min 20 s of setup (at 437e062).

    Example:
        >>> DemoSettings(tasks=("click-button",), train_seeds=(0,), held_out_seeds=(1000,), rollout_groups=2)
    """

    tasks: tuple[str, ...] = DEMO_TASKS
    """MiniWoB++ task names; each needs a scripted demonstrator (``dreamgym.bridge.DEMONSTRATORS``)."""
    train_seeds: tuple[int, ...] = tuple(range(40))
    """Seeds of the real seed set and of the rollouts."""
    held_out_seeds: tuple[int, ...] = tuple(range(1000, 1040))
    """Seeds evaluated before and after training: never collected, rolled out or retrieved (40 seeds × 4 tasks:
    n = 160, so a 95% interval spans about ±0.075). The offline default never trained on them either. With 20
    seeds (n = 80, ±0.1) the intervals of the last four first runs overlapped though three of them had learnt
    seed by seed (24 vs 9 pairs, p = 0.014, at 7e84dba); each evaluation of 80 more episodes costs about 22 s,
    and the held-out fidelity phase (phase 4) scores twice the steps."""
    demonstration_seeds: tuple[int, ...] = tuple(range(40, 80))
    """More seeds whose demonstrator episodes only the warm start clones, beside the seed set's: collected in phase
    3 into their own store (``OUT/demonstrations``), so the experience model trains on the seed set alone (phase 2
    unchanged) and the policy gets 80 seeds of demonstrations, as ``learning_curve.json``'s did. With the seed
    set's 40 alone, one epoch of cloning left click-option and login-user at 0 of 20 before RL, and GRPO cannot
    learn a task it never solves (every group flat)."""
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
    real_share: float = 0.25
    """Share of rollout and training groups run on real pages (shadowed by the simulator); the rest are drawn
    synthetic, and the trust gate (``sim_trust``) plays a drawn synthetic group on real pages until the simulator
    has earned its task. A quarter, the DreamGym setting of a little real data beside much synthetic (0.5 until
    2026-12-06, when the outcome judge made the simulator's rewards right open loop)."""
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
    warm_epochs: float = 1.0
    """Epochs of behaviour cloning on the seed set's demonstrator episodes before the first evaluation
    (0 skips the warm start). One epoch leaves the policy most of its tasks to learn (3 solved 68 of the 80
    held-out episodes before any RL in ``first_run.json`` of 9a36050, and RL then had little to show). Where
    it starts depends on the demonstrations' pages (the tiny policy's tokenizer is learnt from them), and
    since b35fd2f those are the same in every run, so one commit gives one warm start (84/160 twice there);
    before, each run's port and a reused page's leftover focus moved it (136/160, then 108/160, at ea89a7e)."""
    sim_model: Path | None = None
    """An experience model's directory (the offline default: ``dreamgym sim build-default``); ``None``: a
    demo-size model trained in phase 2 on the seed set (:data:`DEMO_SIM_SIZE`, ``sim_epochs``)."""
    sim_epochs: float = 2.0
    """Epochs of the demo-size experience model over the seed set's examples (unused with ``sim_model``): 2 train
    it in 60–110 s on 2 cores, as fast as the machine runs that day (3 took 131–205 s with the seed set's
    embedding, over the first run's budget on a slow day: ``first_run.json`` at e4be055). The refit midway through
    training (``sim_refit_every``) continues it on the states the policy visits; the gate reads only that."""
    sim_outcome_weight: float = 1.0
    """How many times each token of the demo-size model's answered reward and end counts in its loss beside the
    page's (``SimTrainConfig.outcome_weight``; unused with ``sim_model``). Measured on the held-out deciding steps
    (what the trust gate reads; ``benchmarks/demo_sim_arms.py``), it helped on one draw and hurt on another: on a
    seed set alone 30 moved the model from 0.50 and 0.26 (two training seeds) to 0.54 and 0.61
    (``demo_sim_arms.json``); on a seed set plus a finished demo's real training groups, from 0.93 to 0.64
    (``demo_sim_arms_draw2.json``). So the demo weighs every token alike."""
    sim_layers: int = 2
    """Layers of the demo-size experience model (:data:`DEMO_SIM_SIZE`'s width; unused with ``sim_model``). With
    the alias on, eight of twelve four-layer builds applied 0.95 of their greedy first answers unsteered on every
    demo task, against one of four two-layer builds (``demo_sim_builds_alias_layers*.json``); a fit takes about
    twice as long, and phase 6 took 301 s against 240 s (``demo_sides_layers4.json``'s kept demo against
    ``first_run.json``). From that demo's warm start and build, synthetic-only training gained 0.98 of real-only's
    mean over three draws."""
    sim_alias: bool = False
    """Train the demo-size experience model with the page's ids shown as aliases (``TemplateConfig.target_alias``;
    unused with ``sim_model``)."""
    sim_builds: int = 1
    """Most builds of the demo-size experience model phase 2 trains (unused with ``sim_model``). Above 1, each
    build is checked (:func:`dreamgym.simulator.check_build`, under a minute) on the demonstrations of
    ``demonstration_seeds`` (pages it never trained on; without them, on its seed set) and the next training seed
    trained while it fails (:func:`dreamgym.jobs.sim_default.train_checked`); the report's
    ``experience_model_checks`` holds every check. 1: one build, unchecked."""
    sim_more_epochs: float = 0.0
    """With ``sim_builds`` above 1: train a build that fails its check this many epochs more, from its own weights
    at half its learning rate, in place of a new build with the next training seed (0). Over twelve four-layer
    ``[e0]`` builds (``demo_sim_more.json``), one epoch more (about half a build's time) took three of six failing
    builds over the check's bar, not the two that fell far; 9 of 12 runs kept a build that meets issue 49's
    first-answer bar on validation, against 8 of 12 keeping the first build."""
    outcome_judge: bool = True
    """Fit an outcome judge (:class:`dreamgym.simulator.OutcomeJudge`) beside the demo-size experience model and
    each refit, so that its rewards and ends are the judge's (unused with ``sim_model``, whose directory decides).
    On 30 validation seeds, replaying 480 real episodes open loop, the judge paid 288 of the 290 real wins and none
    of the 190 losses, where the demo-size model's own answers paid 10 and 12
    (``benchmarks/results/open_loop_outcomes.json``); False: the model's own reward and end, as before 2026-12-06."""
    sim_refit_every: int = 10
    """Every this many training updates (at the defaults, once: after update 10 of 20), the experience model trains
    on more: ``sim_refit_epochs`` passes over every real step of the demo's store (the seed set, the rollouts and
    the real training groups played so far: the states the policy visits now), continuing from the model in use
    (``TrainConfig.sim_refit_every``, :func:`dreamgym.trainer.sft_refit`); the held-out pairs stay out. The
    refitted model has earned nothing yet: the trust gate reads its own shadowed answers only. Trained on the seed
    set alone, the demo-size model gets 0.26-0.61 of the held-out deciding steps right, far below the gate;
    continued for half a pass over a store that also holds a finished demo's real training groups, 0.96
    (``benchmarks/results/demo_sim_refit.json``). 0 never refits."""
    sim_refit_epochs: float = 0.5
    """Passes of each refit over the store's real steps (half a pass did as well as one in
    ``demo_sim_refit.json``, in half the time)."""
    out: Path = Path(".cache/demo")
    """Where the stores and the report go (the stores are replaced on each run)."""
    train_updates: int = 20
    """GRPO updates in phase 6 (0 skips training; 10-15 s each at the defaults on 2 cores): one optimizer step
    each, so with ``train_groups_per_update`` it sets how many steps the same episodes buy. 20 rather than the
    24 of the runs below, to keep the first run under 15 minutes on a slow day; most of the learning comes early
    (from first-run7's warm start, 47/80, six updates ended at 67/80, a one-off ``demo_arms.py`` arm). From one kept
    warm start (51/80 held-out before; ``benchmarks/probes/demo_arms.py``), 12 updates of four groups ended at 55, 38,
    52 and 24 of 80 over four runs (and the demo itself, 47), 24 updates of two groups at 63 and 50 in about
    the same time (``demo_arms_warm_start.json``; the 50 a one-off): the same episodes, twice the steps. The
    first run at these defaults went 33/80 -> 60/80, intervals apart (``first_run.json`` at 01db013), the next
    48/80 -> 63/80, intervals overlapping (at 97cbc5a, one round of flat-group replays). With the
    seed set's demonstrations alone, neither 8 nor 12 updates of four groups showed learning (13/80 -> 24/80 at
    87738b1, 24/80 -> 20/80 at 5219d50, 16/80 -> 23/80 at e2df1dc: ``first_run.json`` of each)."""
    sim_trust: float = 0.9
    """The simulator plays a task's training groups only once its shadowed answers on that task's deciding real
    steps (an episode ended or a reward was paid) are this often right (``TrainConfig.sim_trust``); until then
    the group is played on real pages. 0 trusts it from the start: a policy then learns whatever the demo-size
    simulator pays for wrongly (on these tasks: Submit on an untouched form) and gets worse on real pages."""
    step_cost: float = 0.0
    """Taken from an episode's outcome reward per step it took, in training only (``TrainConfig.step_cost``): of
    two wins the shorter is taught, and a step that does nothing (a scroll on a page that does not scroll) costs
    something."""
    train_groups_per_update: int = 2
    """Groups (of ``group_size`` episodes) per update; ``real_share`` of them real."""
    micro_batch_size: int = 1
    """Episodes per forward/backward pass of an update (``TrainConfig.micro_batch_size``): one at a time, each
    cut to its own length, is the same gradient as the update's episodes in one padded pass, three times sooner
    on 2 cores (``benchmarks/results/train_passes.json``); 0 takes them in one pass."""
    resample_flat: int = 1
    """Rounds per update in which a training group whose episodes all scored alike (it teaches nothing) is
    played again as another draw (``TrainConfig.resample_flat``); 0 keeps every group as drawn. From one kept
    warm start (33/80 before), two rounds replayed 39 groups beside the 48 drawn and ended at 58/80 in 428 s
    of training, one round replayed 26 and ended at 61/80 in 310 s (one run each, at 1efc532 and da4af0f)."""
    anchor_weight: float = 1.0
    """Weight of the behaviour-cloning anchor in each GRPO update (``TrainConfig.anchor_weight``): the mean
    cross-entropy among the labels of 16 of the warm start's demonstrations (training seeds only), drawn afresh
    each update. It speaks for tasks the warm start already solves, whose groups are flat and replayed away,
    while the other tasks' updates move the weights they share: without it, enter-password went from 34 to 9 of
    40 held-out seeds in ``first_run.json`` at 74e4ef3, and from 40 to 26 in ``paired_eval_replay.json``. From
    that run's warm start (60/160), 20 updates ended at 131 and 127 of 160 with the anchor (enter-password 40
    of 40) and at 99 and 116 without (seeds 0 and 1; ``demo_arms_anchor.json``, docs/findings.md); the first
    run with it went 93/160 -> 132/160 (``first_run.json`` at 016f935). 0: GRPO alone."""
    learning_rate: float = 5e-4
    """GRPO's learning rate: of every weight of the tiny policy, of the LoRA adapters of a given model."""
    seed: int = 0
    """Seeds the policy's sampling and which rollout groups are real."""
    report_to: tuple[str, ...] = ()
    """Trackers the training phase logs to, as ``dreamgym train --report-to`` (``tensorboard``; ``trackio`` or
    ``wandb`` where installed), under ``OUT/train``: TRL's figures, the trainer's, and the demo's own
    evaluations before and after and its simulator's held-out fidelity (under ``eval/``). Empty: only
    ``metrics.jsonl`` and the report."""
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
        if (set(self.train_seeds) | set(self.demonstration_seeds)) & set(self.held_out_seeds):
            raise ConfigError(
                "held-out seeds must differ from training and demonstration seeds, or evaluation measures memory"
            )
        may_be_zero = ("explorers", "near_misses", "resample_flat", "sim_refit_every")
        for name in (*may_be_zero, "max_steps", "real_concurrency"):
            if getattr(self, name) < (0 if name in may_be_zero else 1):
                raise ConfigError(f"DemoSettings.{name} is out of range: {getattr(self, name)}")
        if self.group_size < 1 or self.rollout_groups < 1:
            raise ConfigError("DemoSettings.group_size and rollout_groups must be >= 1")
        if self.sim_layers < 1 or self.sim_builds < 1:
            raise ConfigError(
                f"DemoSettings.sim_layers and sim_builds must be >= 1, got {self.sim_layers}, {self.sim_builds}"
            )
        if self.sim_more_epochs < 0:
            raise ConfigError(f"DemoSettings.sim_more_epochs must be >= 0, got {self.sim_more_epochs}")
        if self.sim_epochs <= 0 or self.sim_refit_epochs <= 0 or self.warm_epochs < 0 or self.sim_outcome_weight <= 0:
            raise ConfigError(
                "DemoSettings.sim_epochs, sim_refit_epochs and sim_outcome_weight must be > 0 and warm_epochs >= 0"
            )
        if self.train_updates < 0 or self.train_groups_per_update < 1 or self.learning_rate <= 0:
            raise ConfigError(
                "DemoSettings.train_updates must be >= 0, train_groups_per_update >= 1, learning_rate > 0"
            )
        episodes = self.train_groups_per_update * max(2, self.group_size)
        if self.micro_batch_size < 0 or (self.micro_batch_size and episodes % self.micro_batch_size):
            raise ConfigError(
                f"DemoSettings.micro_batch_size must divide the {episodes} episodes of an update, or be 0; "
                f"got {self.micro_batch_size}"
            )
        if not 0.0 <= self.step_cost < 1.0:
            raise ConfigError(f"DemoSettings.step_cost must be in [0, 1), got {self.step_cost}")
        if not 0.0 <= self.anchor_weight < math.inf:
            raise ConfigError(f"DemoSettings.anchor_weight must be a finite number >= 0, got {self.anchor_weight}")
        for name in ("real_share", "sim_trust"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"DemoSettings.{name} must be in [0, 1], got {getattr(self, name)}")

    @property
    def store_dir(self) -> Path:
        """The demo's replay store: the seed set, the rollouts, the shadow predictions."""
        return self.out / "store"

    @property
    def demonstrations_dir(self) -> Path:
        """The warm start's extra demonstrations (``demonstration_seeds``): never retrieved nor trained on by the
        experience model."""
        return self.out / "demonstrations"

    @property
    def eval_store_dir(self) -> Path:
        """Evaluation's own store, never searched by the simulator."""
        return self.out / "eval-store"

    def as_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "embedder"}
        return {key: str(value) if isinstance(value, Path) else value for key, value in values.items()}


DEMO_SIM_SIZE = ScratchModelConfig(vocab_size=2000, hidden_size=128, layers=2, intermediate_size=384)
"""The demo-size experience model: a 2-layer Llama of width 128 (about 0.8M parameters) trained from scratch on
the seed set in phase 2, where the offline default (4 layers of 256 on 18 tasks) takes many times longer."""


DEMO_REFIT_LEARNING_RATE = 5e-4
"""The refits' learning rate: half the demo-size model's first training's (1e-3, from scratch). Full fine-tuning's
default (5e-5) is made for a pretrained base; at it one pass barely moves the tiny model."""


def demo_sim_training(settings: DemoSettings) -> SimTrainConfig:
    """How phase 2 trains the demo-size experience model."""
    return SimTrainConfig(
        base="scratch",
        epochs=settings.sim_epochs,
        max_length=1536,
        scratch=dataclasses.replace(DEMO_SIM_SIZE, layers=settings.sim_layers),
        outcome_weight=settings.sim_outcome_weight,
    )


def demo_sim_template(settings: DemoSettings) -> TemplateConfig:
    """The demo-size experience model's prompt: the offline default's, with the alias where asked."""
    from dreamgym.jobs.sim_default import DEFAULT_TEMPLATE

    return dataclasses.replace(DEFAULT_TEMPLATE, target_alias=settings.sim_alias)


def held_out_pairs(settings: DemoSettings) -> tuple[tuple[str, int | None], ...]:
    """Every held-out (task id, seed): retrieval must never return them (the leakage rule)."""
    from dreamgym.jobs import held_out

    return held_out([f"miniwob/{name}" for name in settings.tasks], settings.held_out_seeds)


def runtime_config(settings: DemoSettings) -> RuntimeConfig:
    from dreamgym.runtime import RuntimeConfig

    return RuntimeConfig(max_steps=settings.max_steps, real_concurrency=settings.real_concurrency)


def demo_tasks(settings: DemoSettings) -> list[Task]:
    from dreamgym.bridge import miniwob_tasks

    return miniwob_tasks(list(settings.tasks), settings.max_steps)


async def held_out_steps(settings: DemoSettings) -> list[Step]:
    """Every real step evaluation played on the held-out seeds (both evaluations, task by task), read from its own
    store: the steps the simulator is scored on and never trains on or retrieves."""
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig

    async with LmdbReplayStore(
        settings.eval_store_dir, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False), readonly=True
    ) as held:
        steps: list[Step] = []
        for name in settings.tasks:
            steps += await held.get_steps(await held.task_seqs(f"miniwob/{name}", source="real"))
    return steps
