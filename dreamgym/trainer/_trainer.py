"""Multi-turn GRPO through TRL, on synthetic, mixed or real groups of episodes.

How one update runs. TRL's ``GRPOTrainer`` asks its ``rollout_func`` for
``groups_per_update x group_size`` completions (the prompts arrive repeated
G times; TRL 1.16). The trainer's rollout function ignores the prompt text
(the dataset only counts groups), draws ``groups_per_update`` tasks from its
:class:`~dreamgym.simulator.TaskPool`, decides each group's side from the
mode, and runs the groups through the runtime's portal: G episodes per
group, one start each. Each episode comes back as one TRL sample: the first
prompt, then a completion that interleaves the policy's ids (trained) with
the environment's answers and appended ends of turn (``env_mask`` 0, never
trained), the policy's recorded log-probabilities (those it drew each token
with, at its temperature, which TRL is configured to score at; an index
policy's choices in the softmax over its label tokens, which the loss then
scores them in too: :class:`~dreamgym.trainer._passes.LengthSortedGRPO`), and the
episode's outcome reward, less ``TrainConfig.step_cost`` for each step taken.
TRL normalises the rewards within each group and steps the optimizer; the
policy's weights count is bumped after every step.

An episode the infrastructure ended (:data:`~dreamgym.core.INFRASTRUCTURE_CUTS`)
or that has no token record is reported with reward ``None``, which TRL 1.16
turns into zero advantage and leaves out of the group baseline; cuts are
counted by reason. A group is dropped (every reward ``None``) and counted
when its episodes did not start from one observation (a live site that does
not reset) or fewer than two of them are scorable.

A group whose scorable rewards are all equal (every episode won, or every one
lost) has zero advantage everywhere and teaches nothing; on small tasks that is
most groups once the policy is decent either way. With
``TrainConfig.resample_flat`` such groups, and dropped ones, are played again as
fresh draws on the same side (DAPO's dynamic sampling), so each update's batch
carries more signal; the replaced groups' transitions still count as consumed.

The trainer's own state (counters, the task pool's generated tasks, the
share of real groups carried between updates) is saved beside TRL's
checkpoint as ``dreamgym_trainer.json``; ``Trainer.train`` resumes from the
latest checkpoint in ``output_dir``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from transformers import PrinterCallback, TrainerCallback

from dreamgym.agents import LocalPolicy, episode_sequence, link_turns
from dreamgym.core.devices import checkpointing_flag, trainer_flags
from dreamgym.core.errors import ConfigError
from dreamgym.core.progress import Phase, progress
from dreamgym.core.protocols import Policy
from dreamgym.core.types import Source, Task
from dreamgym.runtime import GroupResult, GroupSpec, Runtime, RuntimePortal
from dreamgym.simulator import TaskPool
from dreamgym.trainer._anchor import Anchor
from dreamgym.trainer._config import TrainConfig
from dreamgym.trainer._evaluate import EXAMPLE_COLUMNS, EvalResult, evaluate
from dreamgym.trainer._sides import OpenSides, Sides
from dreamgym.trainer._trackers import close_writers, relay, relay_table
from dreamgym.trainer._warm import Demonstration

__all__ = ["TrainResult", "Trainer", "TrainerState", "latest_checkpoint"]

log = logging.getLogger(__name__)

STATE_FILE = "dreamgym_trainer.json"
METRICS_FILE = "metrics.jsonl"
REWARD_FIELD = "dreamgym_reward"


@dataclass(slots=True)
class TrainerState:
    """What the trainer counts and carries across updates; saved with each checkpoint."""

    update: int = 0
    real_steps: int = 0
    """Real transitions consumed by training so far (evaluation's are counted apart)."""
    synthetic_steps: int = 0
    real_groups: int = 0
    synthetic_groups: int = 0
    dropped_groups: int = 0
    """Groups left out of learning: starts that differ, or fewer than two scorable episodes."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Dropped groups by reason: ``different_starts``, ``too_few_scorable``."""
    flat_groups: int = 0
    """Kept groups whose scorable rewards were all equal: zero advantage, nothing learnt."""
    teaching_groups: dict[str, int] = field(default_factory=dict)
    """Groups that carried a gradient into an update (kept, their scorable rewards not all equal), by side
    (``real``, ``synthetic``): what each side taught, where ``real_groups``/``synthetic_groups`` count what
    each side played."""
    resampled_groups: int = 0
    """Groups played again because they taught nothing (``TrainConfig.resample_flat``)."""
    gated_groups: int = 0
    """Groups drawn synthetic and played real because the simulator had not earned their task
    (``TrainConfig.sim_trust``); counted in ``real_groups`` too."""
    cut_episodes: dict[str, int] = field(default_factory=dict)
    """Training episodes the infrastructure ended, by reason (:data:`~dreamgym.core.INFRASTRUCTURE_CUTS`):
    reward ``None``, no advantage, out of their group's baseline."""
    eval_real_steps: int = 0
    real_credit: float = 0.0
    """The fraction of a real group carried to the next update (real groups spread evenly)."""
    model_calls: int = 0
    """Experience-model predictions made by training's synthetic steps (one per synthetic step)."""
    rollout_seconds: float = 0.0
    """Wall-clock spent playing training episodes (the rest of an update is TRL's loss and step)."""
    generated_tasks: list[dict[str, Any]] = field(default_factory=list)
    experience_model_id: str = ""
    switched_at: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerState:
        known = set(cls.__slots__)
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainResult:
    """What a run did: its counters, its evaluations (update -> result) and where it saved."""

    state: TrainerState
    evaluations: tuple[tuple[int, EvalResult], ...]
    final_dir: Path
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.state.as_dict(),
            "evaluations": [{"update": update, **result.as_dict()} for update, result in self.evaluations],
            "final_dir": str(self.final_dir),
            "seconds": self.seconds,
        }


def _outcome_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """The episode's outcome reward, as the rollout reported it (``None`` for a dropped group)."""
    rewards: list[float | None] = kwargs[REWARD_FIELD]
    return rewards


_outcome_reward.__name__ = "outcome_reward"


class Trainer:
    """Trains a token-recording policy with GRPO on synthetic, mixed or real groups.

    Args:
        config: Mode, sizes, optimiser, schedule, evaluation and checkpoints.
        policy: The policy to train. Only a policy that returns token records
            (:class:`~dreamgym.agents.LocalPolicy`) can be trained; its model is
            trained in place (through LoRA adapters unless ``config.lora`` is ``None``).
        tasks: The real tasks to train on (the curriculum adds synthetic-only variants).
        open_sides: Opens the run's store and environments in the trainer's event loop.
        train_seeds: Seeds the groups start from.
        eval_tasks: Held-out real tasks to evaluate on (``tasks`` when empty).
        eval_seeds: Held-out seeds; none of them may be a training seed.
        eval_temperature: The policy's temperature when evaluated (0: its best candidate).
        anchor: Demonstrations (:func:`~dreamgym.trainer.demonstrations`, for this index policy, on training seeds)
            that ``config.anchor_weight`` keeps the policy close to; required when that weight is above 0.

    Example:
        >>> trainer = Trainer(TrainConfig(mode="synthetic", updates=20, output_dir=Path("runs/a")),
        ...                   policy=LocalPolicy.load(path), tasks=tasks, open_sides=open_sides,
        ...                   train_seeds=range(0, 100), eval_seeds=range(1000, 1010))
        >>> result = trainer.train()
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        policy: Policy,
        tasks: Sequence[Task],
        open_sides: OpenSides,
        train_seeds: Sequence[int],
        eval_tasks: Sequence[Task] = (),
        eval_seeds: Sequence[int] = (),
        eval_temperature: float = 0.0,
        anchor: Sequence[Demonstration] = (),
    ) -> None:
        if not isinstance(policy, LocalPolicy):
            raise ConfigError(
                f"only a policy that returns token records can be trained; {policy.policy_id!r} "
                f"({type(policy).__name__}) does not. Use dreamgym.agents.LocalPolicy"
            )
        if not policy.config.trainable:
            raise ConfigError(
                f"{policy.policy_id!r} is a chooser (LocalPolicyConfig.mode='choose'): it draws from a calibrated "
                "softmax over candidate actions, which TRL's token log-likelihood does not differentiate, so "
                "training it would follow the gradient of another policy. Train mode='index' (a label token per "
                "choice, see dreamgym.agents.add_index_tokens) or mode='generate'"
            )
        if policy.config.temperature <= 0:
            raise ConfigError(
                f"the policy samples at temperature {policy.config.temperature}; train one above 0 "
                "(LocalPolicyConfig.temperature): a greedy policy makes every episode of a group the same"
            )
        if not tasks:
            raise ConfigError("the trainer needs at least one task")
        if not train_seeds:
            raise ConfigError("the trainer needs at least one training seed")
        overlap = set(train_seeds) & set(eval_seeds)
        if overlap:
            raise ConfigError(f"evaluation seeds must be held out; these are also training seeds: {sorted(overlap)}")
        if any(task.parent_task_id for task in (*tasks, *eval_tasks)):
            raise ConfigError("give the trainer real tasks only; the curriculum generates its own variants")
        if config.anchor_weight > 0 and not anchor:
            raise ConfigError("TrainConfig.anchor_weight > 0 needs demonstrations: Trainer(anchor=demonstrations(...))")
        if config.anchor_weight > 0 and policy.config.mode != "index":
            raise ConfigError(f"the anchor trains an index policy's label tokens; {policy.policy_id!r} is not one")
        seen = sorted({row.seed for row in anchor if row.seed is not None} & set(eval_seeds))
        if config.anchor_weight > 0 and seen:
            raise ConfigError(f"anchor demonstrations must come from training seeds, not the evaluation seeds {seen}")
        self.config = config
        self.policy = policy
        self.pool = TaskPool(tasks, config=config.curriculum)
        self.open_sides = open_sides
        self.train_seeds = tuple(train_seeds)
        self.eval_tasks = tuple(eval_tasks or tasks)
        self.eval_seeds = tuple(eval_seeds)
        self.eval_temperature = eval_temperature
        self.anchor = tuple(anchor) if config.anchor_weight > 0 else ()
        self.state = TrainerState()
        self.evaluations: list[tuple[int, EvalResult]] = []
        self.last_rollout: dict[str, list[Any]] = {}
        """The last rollout's TRL output (ids, logprobs, masks, rewards): for checks and tests."""
        self.grpo: Any = None
        """TRL's ``GRPOTrainer``, once :meth:`train` has built it."""
        self._portal: RuntimePortal | None = None
        self._phase: Phase | None = None
        self._sides: Sides | None = None
        self._eval_policy: LocalPolicy | None = None
        self._torch_limiter = policy.limiter
        """Every in-process torch job of the run takes a slot of the policy's limiter."""
        self._metrics_path = config.output_dir / METRICS_FILE
        self._relaying = False
        """Our own figures are on their way to TRL's loggers: the callback must not log them back as TRL's."""
        self._trained = False
        """The last :meth:`train` returned (every rank reached its end, so :meth:`end` may wait for the others)."""

    # ------------------------------------------------------------------ running

    def train(self, *, resume: bool = True) -> TrainResult:
        """Run ``config.updates`` updates (fewer when resuming), evaluating and saving as configured.

        Resumes from the latest ``checkpoint-N`` in ``output_dir`` when
        ``resume`` is true and there is one.
        """
        started = time.perf_counter()
        self._trained = False
        self.config.output_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = latest_checkpoint(self.config.output_dir) if resume else None
        if checkpoint is not None:
            self._load_state(checkpoint)
            log.info("resuming from %s (update %d)", checkpoint, self.state.update)
        self.grpo = self._build_grpo()
        self.policy.model = self.grpo.model  # wrapped in adapters: a weight change
        self.policy.mark_version(self._version())
        self._eval_policy = self.policy.sibling(temperature=self.eval_temperature)
        # under several ranks only the main one opens the sides (browsers, stores) and plays episodes
        with RuntimePortal(self._open_runtime) if self._main else contextlib.nullcontext() as portal:
            self._portal = portal
            try:
                if self.eval_seeds and self.config.eval_at_start and checkpoint is None and self._main:
                    self._evaluate()
                what = f"train the policy ({self.config.mode}, GRPO)"
                with progress(what, total=self.config.updates, unit="updates") as self._phase:
                    self._phase.advance(self.state.update)  # a resumed run starts where it left off
                    with warnings.catch_warnings():  # TRL 1.16 reads a property transformers has since renamed
                        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
                        self.grpo.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
                final_dir = self.config.output_dir / "final"
                self.grpo.save_model(str(final_dir))
                self._write_state(final_dir)
                already = bool(self.evaluations) and self.evaluations[-1][0] == self.state.update
                if self.eval_seeds and not already and self._main:
                    self._evaluate()
            finally:
                self._portal = None
                if self._main:
                    close_writers(self.grpo)
        self._trained = True
        return TrainResult(
            state=self.state,
            evaluations=tuple(self.evaluations),
            final_dir=final_dir,
            seconds=time.perf_counter() - started,
        )

    def end(self) -> None:
        """Finish TRL's trackers and, under several ranks, let go of the DDP wrapper and destroy the process group.

        Call it once, at the very end, after :meth:`train` and anything else
        that talks between ranks; ``dreamgym train`` calls it on every rank.
        A rank that exits with its process group up, or with the model's
        ``DistributedDataParallel`` wrapper still alive (its reducer holds the
        group and the last gradient reduction), can abort in the
        interpreter's teardown ("terminate called without an active
        exception", exit -6) after its work is done, and ``torchrun`` then
        kills the ranks still running. ``benchmarks/probes/gloo_exit.py``
        measures it on a bare two-rank Gloo loop (torch 2.13, CPU). So:

        - after a :meth:`train` that returned, every rank waits for the
          others here, so none exits while another still writes (rank 0's
          store, checkpoint, evaluation); after one that raised, none waits
          (the others may never come);
        - the wrapper goes, collected, before the group; the model itself
          (the policy's, unwrapped) stays usable.

        Harmless with one rank, and a second call does nothing more.
        """
        if self.grpo is None:
            return
        import torch.distributed

        accelerator = self.grpo.accelerator
        if accelerator.num_processes > 1 and torch.distributed.is_initialized():  # not after a first end()
            if self._trained:
                accelerator.wait_for_everyone()
            self.grpo.model_wrapped = self.grpo.model
            accelerator.free_memory()  # drops the prepared (wrapped) models and optimizers, then collects
        self.grpo.end()

    def _build_grpo(self) -> Any:
        from datasets import Dataset
        from peft import LoraConfig
        from trl.trainer.grpo_config import GRPOConfig

        from dreamgym.trainer._passes import LengthSortedGRPO

        # rollout_func is experimental in TRL 1.16 (hence the pinned version and the contract
        # test in tests/trainer); we use it knowingly, so its warning is silenced
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        config = self.config
        batch = config.groups_per_update * config.group_size
        # one optimizer step per update: its episodes in passes of micro_batch_size, accumulated
        passes = batch // config.micro_batch_size if config.micro_batch_size else 1
        args = GRPOConfig(
            output_dir=str(config.output_dir),
            max_steps=config.updates,
            per_device_train_batch_size=batch // passes,
            gradient_accumulation_steps=passes,
            num_generations=config.group_size,
            steps_per_generation=passes,
            num_iterations=1,
            learning_rate=config.learning_rate,
            lr_scheduler_type="constant",
            beta=config.beta,
            loss_type=config.loss_type,
            epsilon=config.epsilon,
            max_grad_norm=config.max_grad_norm,
            # TRL scores the policy's tokens at this temperature: the one it drew them at
            temperature=self.policy.config.temperature,
            scale_rewards="group",
            logging_steps=1,
            save_strategy="steps",  # every save_every updates, and at the last (resume finds a finished run)
            save_steps=config.save_every or config.updates,
            report_to=list(config.report_to),
            **trainer_flags(config.device, config.dtype),
            **checkpointing_flag(False),
            disable_dropout=True,
            seed=config.seed,
            data_seed=config.seed,
            shuffle_dataset=False,
            remove_unused_columns=False,
            dataloader_num_workers=0,
            log_completions=False,
            disable_tqdm=True,  # progress goes through dreamgym.core.progress (the command line draws it)
        )
        # The dataset only counts groups: the rollout function picks each group's task from the pool. Each
        # rank asks for its own groups_per_update groups of every update.
        groups = config.groups_per_update * self._ranks
        dataset = Dataset.from_dict({"prompt": [f"group {n}" for n in range(groups)]})
        peft_config = None
        if config.lora is not None:
            target: Any = config.lora.target_modules
            peft_config = LoraConfig(
                r=config.lora.r,
                lora_alpha=config.lora.alpha,
                lora_dropout=config.lora.dropout,
                target_modules=list(target) if isinstance(target, tuple) else target,
                task_type="CAUSAL_LM",
            )
        trainer = LengthSortedGRPO(
            model=self.policy.model,
            processing_class=self.policy.tokenizer,
            reward_funcs=[_outcome_reward],
            args=args,
            train_dataset=dataset,
            peft_config=peft_config,
            rollout_func=self._rollout,
            callbacks=[_Callback(self)],
            choice_ids=self.policy.choice_token_ids,  # an index policy's choices: scored as it drew them
            anchor=self._anchor(passes),
        )
        trainer.remove_callback(PrinterCallback)  # its raw log dictionaries: metrics.jsonl has them
        return trainer

    def _anchor(self, passes: int) -> Anchor | None:
        """The behaviour-cloning anchor of each update's passes (``TrainConfig.anchor_weight``), if any."""
        if not self.anchor:
            return None
        return Anchor(
            self.anchor,
            weight=self.config.anchor_weight,
            batch=self.config.anchor_batch,
            passes=passes,
            pad_id=self.policy.turns.eos_id,
            among=self.policy.choice_token_ids or (),
            seed=self.config.seed,
        )

    @asynccontextmanager
    async def _open_runtime(self) -> AsyncIterator[Runtime]:
        async with self.open_sides(self._torch_limiter) as sides:
            self._check_sides(sides)
            self._sides = sides
            if sides.slot is not None:
                self.state.experience_model_id = sides.slot.model_id
            async with Runtime(
                policy=self.policy,
                store=sides.store,
                config=sides.runtime_config,
                real_env=sides.real_env,
                synthetic_env=sides.synthetic_env,
                reset_hook=sides.reset_hook,
                torch_limiter=self._torch_limiter,
            ) as runtime:
                yield runtime

    def _check_sides(self, sides: Sides) -> None:
        config = self.config
        if (config.needs_real or self.eval_seeds) and sides.real_env is None:
            raise ConfigError(f"mode {config.mode!r} (or evaluation) needs real environments: set Sides.real_env")
        if config.needs_synthetic and sides.synthetic_env is None:
            raise ConfigError(f"mode {config.mode!r} needs the simulator: set Sides.synthetic_env")
        if self.eval_seeds and sides.eval_store is None:
            raise ConfigError("evaluation needs its own store (Sides.eval_store), apart from the training store")
        if config.sim_refit_every and (sides.slot is None or not sides.slot.can_refit):
            raise ConfigError("sim_refit_every needs Sides.slot: a ModelSlot with a refit function (sft_refit)")
        if config.curriculum is not None and sides.curriculum_backend is None:
            raise ConfigError("the curriculum needs Sides.curriculum_backend to propose task variations")

    # ------------------------------------------------------------------ one update's rollouts

    def _rollout(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: one episode per prompt entry, G consecutive entries per group.

        Under several ranks the main rank plays every rank's groups (its browsers,
        its store, its simulator: the store keeps one writer) and hands each rank
        its share, in rank order, which is how TRL gathers them for the group
        baselines.
        """
        size = self.config.group_size
        if len(prompts) % size:
            raise ConfigError(f"TRL asked for {len(prompts)} completions, not a multiple of the group size {size}")
        if self._ranks == 1:
            return self._rollout_groups(len(prompts) // size)
        from accelerate.utils import broadcast_object_list, gather_object  # type: ignore[import-untyped]

        counts: list[int] = gather_object([len(prompts)])
        shares: list[Any] = [None]
        if self._main:
            output = self._rollout_groups(sum(counts) // size)
            edges = [sum(counts[:n]) for n in range(len(counts) + 1)]
            shares = [[{key: values[a:b] for key, values in output.items()} for a, b in itertools.pairwise(edges)]]
        broadcast_object_list(shares, from_process=0)
        mine: dict[str, list[Any]] = shares[0][trainer.accelerator.process_index]
        self.last_rollout = mine
        return mine

    def _rollout_groups(self, groups: int) -> dict[str, list[Any]]:
        """Play ``groups`` groups of ``group_size`` episodes through the portal; TRL's lists of them."""
        size = self.config.group_size
        portal = self._require_portal()
        update = self.state.update
        rng = random.Random(f"{self.config.seed}/{update}")
        tasks = self.pool.sample_batch(groups, rng)
        sources = self._gate(tasks, self._sources(tasks, self.config.real_share_at(update)))
        specs = [
            GroupSpec(
                task=task,
                size=size,
                seed=rng.choice(self.train_seeds),
                source=source,
                shadow=source == "real" and self.config.sim_trust > 0,
                group_id=f"train/u{update}/g{index}",
            )
            for index, (task, source) in enumerate(zip(tasks, sources, strict=True))
        ]
        started = time.perf_counter()
        try:
            with self._acting():
                label = f"update {update + 1}/{self.config.updates}"
                played = portal.run_groups(specs, label=f"{label}: groups")
                kept = [self._record(result, size) for result in played]
                flat_tasks: set[str] = set()
                for round_ in range(1, self.config.resample_flat + 1):
                    flat = [n for n, (_, _, teaches) in enumerate(kept) if not teaches]
                    if not flat:
                        break
                    flat_tasks |= {kept[n][0].task.task_id for n in flat}
                    again = [self._redraw(kept[n][0], flat_tasks, rng, f"r{round_}") for n in flat]
                    self.state.resampled_groups += len(flat)
                    replayed = portal.run_groups(again, label=f"{label}: flat groups again")
                    for n, result in zip(flat, replayed, strict=True):
                        kept[n] = self._record(result, size)
        finally:
            self.state.rollout_seconds += time.perf_counter() - started
        output = self._to_trl(kept, size)
        self.last_rollout = output
        return output

    def _redraw(self, flat: GroupResult, avoid: set[str], rng: random.Random, suffix: str) -> GroupSpec:
        """A fresh group in place of one that taught nothing: same side, another task where one remains."""
        fits = [t for t in self.pool if flat.source == "synthetic" or not t.parent_task_id]
        fresh = [t for t in fits if t.task_id not in avoid]
        task = rng.choice(fresh or fits)
        source = self._gate([task], [flat.source])[0]
        return GroupSpec(
            task=task,
            size=self.config.group_size,
            seed=rng.choice(self.train_seeds),
            source=source,
            shadow=source == "real" and self.config.sim_trust > 0,
            group_id=f"{flat.group_id}{suffix}",
        )

    def _gate(self, tasks: Sequence[Task], sources: list[Source]) -> list[Source]:
        """``sources`` with the synthetic groups of tasks the simulator has not earned played real
        (``TrainConfig.sim_trust``), each counted in ``gated_groups``."""
        if not self.config.sim_trust or "synthetic" not in sources:
            return sources
        decisions = self._decisions()
        gated = list(sources)
        for n, (task, source) in enumerate(zip(tasks, sources, strict=True)):
            if source == "synthetic" and not task.parent_task_id and not self._trusted(decisions.get(task.task_id, ())):
                gated[n] = "real"
                self.state.gated_groups += 1
        return gated

    def _decisions(self) -> Mapping[str, tuple[bool, ...]]:
        """Per task, the shadowed deciding steps the gate reads: those of the experience model that would play
        the group (after a refit, the new model starts with none: it has earned nothing yet)."""
        snapshot = self._require_portal().snapshot()
        slot = self._sides.slot if self._sides is not None else None
        return snapshot.shadow_decisions if slot is None else snapshot.decisions_of(slot.model_id)

    def _trusted(self, decisions: Sequence[bool]) -> bool:
        if len(decisions[-self.config.sim_trust_window :]) < self.config.sim_trust_min_steps:
            return False
        return self._trust_accuracy(decisions) >= self.config.sim_trust

    def _trust_accuracy(self, decisions: Sequence[bool]) -> float:
        """The share right of the last ``sim_trust_window`` shadowed deciding steps (at least one)."""
        recent = decisions[-self.config.sim_trust_window :]
        return sum(recent) / len(recent)

    def _sources(self, tasks: Sequence[Task], share: float) -> list[Source]:
        """Each group's side: ``share`` of them real, spread evenly and carried across updates.

        Generated tasks exist only on the synthetic side: they never take a real slot.
        """
        sources: list[Source] = []
        for task in tasks:
            if task.parent_task_id:
                sources.append("synthetic")
                continue
            self.state.real_credit += share
            if self.state.real_credit >= 1 - 1e-9:
                self.state.real_credit -= 1
                sources.append("real")
            else:
                sources.append("synthetic")
        return sources

    def _record(self, result: GroupResult, size: int) -> tuple[GroupResult, list[float | None], bool]:
        """Count one played group (steps, cuts, drops, the pool's value); its rewards and whether it teaches.

        The rewards GRPO trains on are the outcomes less ``TrainConfig.step_cost`` per step
        (the task pool records the outcomes). A reward is ``None`` where the infrastructure
        ended the episode or it has no token record, and every reward is ``None`` in a
        dropped group. A group teaches when it is kept and its scorable rewards are not all equal.
        """
        rollouts = list(result.rollouts)
        rewards: list[float | None] = [
            reward if any(s.policy_tokens is not None for s in rollouts[n].steps) else None
            for n, reward in enumerate(result.rewards)  # None: the infrastructure ended it
        ]
        for reason in result.cuts:
            self.state.cut_episodes[reason] = self.state.cut_episodes.get(reason, 0) + 1
        self._count_steps(result)
        why = self._drop_reason(result, rewards, size)
        if why:
            self.state.dropped_groups += 1
            self.state.dropped[why] = self.state.dropped.get(why, 0) + 1
            log.warning("group %s (%s) dropped: %s", result.group_id, result.task.task_id, why)
            return result, [None] * size, False
        self.pool.record_group(result.task.task_id, [r for r in rewards if r is not None])
        cost = self.config.step_cost
        trained = [None if r is None else r - cost * len(rollouts[n].steps) for n, r in enumerate(rewards)]
        scorable = [r for r in trained if r is not None]
        teaches = max(scorable) - min(scorable) > 1e-9
        if teaches:
            self.state.teaching_groups[result.source] = self.state.teaching_groups.get(result.source, 0) + 1
        else:
            self.state.flat_groups += 1
        return result, trained, teaches

    def _to_trl(self, kept: list[tuple[GroupResult, list[float | None], bool]], size: int) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], REWARD_FIELD: []
        }  # fmt: skip
        eos = self.policy.turns.eos_id
        for result, rewards, _ in kept:
            rollouts = list(result.rollouts)
            for n in range(size):
                records = (
                    [s.policy_tokens for s in rollouts[n].steps if s.policy_tokens is not None]
                    if n < len(rollouts)
                    else []
                )
                if records:
                    sequence = episode_sequence(link_turns(records))
                    out["prompt_ids"].append(list(sequence.prompt_ids))
                    out["completion_ids"].append(list(sequence.completion_ids))
                    out["logprobs"].append(list(sequence.logprobs))
                    out["env_mask"].append(list(sequence.env_mask))
                else:  # nothing to train on: one masked end-of-turn keeps TRL's shapes
                    out["prompt_ids"].append([eos])
                    out["completion_ids"].append([eos])
                    out["logprobs"].append([0.0])
                    out["env_mask"].append([0])
                out[REWARD_FIELD].append(rewards[n] if n < len(rewards) else None)
        return out

    @staticmethod
    def _drop_reason(result: GroupResult, rewards: Sequence[float | None], size: int) -> str:
        """Why a group teaches nothing (``""`` when it does): starts that differ, fewer than two scorable episodes."""
        if not result.consistent:
            return "different_starts"
        if len(result.rollouts) != size or sum(1 for r in rewards if r is not None) < 2:
            return "too_few_scorable"
        return ""

    def _count_steps(self, result: GroupResult) -> None:
        steps = sum(len(r.steps) for r in result.rollouts)
        if result.source == "real":
            self.state.real_groups += 1
            self.state.real_steps += steps
        else:
            self.state.synthetic_groups += 1
            self.state.synthetic_steps += steps
            self.state.model_calls += steps

    # ------------------------------------------------------------------ between updates

    def _progress_note(self) -> str:
        state = self.state
        return f"{state.real_steps} real + {state.synthetic_steps} synthetic steps"

    def _after_update(self, update: int) -> bool:
        """Run what the schedule asks after update ``update``; returns whether to checkpoint now."""
        self.state.update = update
        self.policy.mark_version(self._version())
        if self._phase is not None:
            self._phase.advance(update - self._phase.done, note=self._progress_note())
        config = self.config
        save = False
        if config.mode == "sim2real" and update == config.switch_at:
            self.state.switched_at = update
            save = True
            log.info("sim2real: %d synthetic updates done; real groups from now on", update)
        if not self._main:  # refits, the curriculum and evaluation play episodes: the main rank's work
            return save
        if config.sim_refit_every and update % config.sim_refit_every == 0 and update < config.updates:
            self._refit()
        if config.curriculum is not None and update % config.curriculum_every == 0 and update < config.updates:
            self._refresh_curriculum()
        if config.eval_every and self.eval_seeds and update % config.eval_every == 0:
            self._evaluate()
        return save

    @contextmanager
    def _acting(self) -> Iterator[None]:
        """The policy's model in eval mode while it plays episodes (TRL keeps it in train mode)."""
        model = self.policy.model
        was_training = model.training
        model.eval()
        try:
            yield
        finally:
            model.train(was_training)

    def _version(self) -> str:
        return f"{self.config.output_dir.name}:u{self.state.update}"

    def _evaluate(self) -> EvalResult:
        with self._acting():
            result = self._require_portal().call(self._evaluate_async)
        self.state.eval_real_steps += result.steps
        self.evaluations.append((self.state.update, result))
        low, high = result.interval
        if self._main:
            relay_table(self.grpo, "eval/examples", EXAMPLE_COLUMNS, [example.row() for example in result.examples])
        self._log_metrics(
            {
                "eval/success_rate": result.success_rate,
                "eval/success_ci95_low": low,
                "eval/success_ci95_high": high,
                "eval/episodes": result.episodes,
                "eval/mean_steps": result.mean_steps,
                "eval/errors": result.errors,
                "eval/cut": result.cut,
                **{f"eval/cut/{reason}": n for reason, n in sorted(result.cut_reasons.items())},
            },
            kind="eval",
        )
        log.info(
            "update %d: held-out success %.3f (%d/%d, 95%% CI %.2f-%.2f; %d cut by the infrastructure, apart); "
            "%d real transitions used by training",
            self.state.update, result.success_rate, result.successes, result.episodes, low, high, result.cut,
            self.state.real_steps,
        )  # fmt: skip
        return result

    async def _evaluate_async(self) -> EvalResult:
        sides = self._sides
        if sides is None or sides.eval_store is None or sides.real_env is None or self._eval_policy is None:
            raise ConfigError("evaluation needs Sides.eval_store and Sides.real_env")
        self._eval_policy.mark_version(self._version())
        async with Runtime(
            policy=self._eval_policy,
            store=sides.eval_store,
            config=sides.runtime_config,
            real_env=sides.real_env,
            reset_hook=sides.reset_hook,
            torch_limiter=self._torch_limiter,
        ) as runtime:
            return await evaluate(runtime, self.eval_tasks, self.eval_seeds, label=f"eval/u{self.state.update}")

    def _refit(self) -> None:
        sides = self._sides
        if sides is None or sides.slot is None:
            return
        slot, store = sides.slot, sides.store
        started = time.perf_counter()
        model_id = self._require_portal().call(slot.refit, store)
        self.state.experience_model_id = model_id
        self._log_metrics({"sim/refits": slot.refits, "sim/refit_seconds": time.perf_counter() - started}, kind="sim")
        log.info("update %d: experience model refit on the grown store -> %s", self.state.update, model_id)

    def _refresh_curriculum(self) -> None:
        sides = self._sides
        if sides is None or sides.curriculum_backend is None:
            return
        backend, store = sides.curriculum_backend, sides.store
        config = self.config.curriculum

        async def refresh() -> list[Task]:
            return await self.pool.refresh(backend, config, store=store)

        added = self._require_portal().call(refresh)
        self._log_metrics(
            {"curriculum/added": len(added), "curriculum/generated": len(self.pool.generated_tasks())},
            kind="curriculum",
        )

    # ------------------------------------------------------------------ state and metrics

    def _counters(self) -> dict[str, Any]:
        state = self.state
        return {
            "update": state.update,
            "real_transitions": state.real_steps,
            "synthetic_transitions": state.synthetic_steps,
            "real_groups": state.real_groups,
            "synthetic_groups": state.synthetic_groups,
            "dropped_groups": state.dropped_groups,
            **{f"dropped/{why}": n for why, n in sorted(state.dropped.items())},
            "flat_groups": state.flat_groups,
            **{f"teaching_groups/{side}": n for side, n in sorted(state.teaching_groups.items())},
            "resampled_groups": state.resampled_groups,
            "gated_groups": state.gated_groups,
            **self._trust(),
            **{f"rollout/cut/{reason}": n for reason, n in sorted(state.cut_episodes.items())},
            "eval_real_transitions": state.eval_real_steps,
            "policy_id": self.policy.policy_id,
            "experience_model_id": state.experience_model_id,
        }

    def _trust(self) -> dict[str, float]:
        """``sim_trust/<task>``: the simulator's outcome accuracy on the task's last shadowed deciding steps
        (what the gate compares with ``sim_trust``), and ``sim_trust_steps/<task>``: how many steps that is (at
        most ``sim_trust_window``; below ``sim_trust_min_steps`` the gate keeps the task out whatever the
        accuracy), for the tasks it has seen; empty with the gate off."""
        if not self.config.sim_trust or self._portal is None:
            return {}
        window = self.config.sim_trust_window
        figures: dict[str, float] = {}
        for task, decisions in sorted(self._decisions().items()):
            if decisions:
                figures[f"sim_trust/{task}"] = round(self._trust_accuracy(decisions), 4)
                figures[f"sim_trust_steps/{task}"] = len(decisions[-window:])
        return figures

    def report(self, metrics: Mapping[str, Any], *, kind: str = "job") -> None:
        """Log a job's own figures (a demo's evaluations, its simulator's fidelity) as the trainer logs its own: a
        line of ``metrics.jsonl`` and, once :meth:`train` has built TRL's trainer, every ``report_to`` backend, at
        the last update. Names under ``eval/`` land under ``eval/`` in the trackers."""
        self.config.output_dir.mkdir(parents=True, exist_ok=True)
        self._log_metrics(dict(metrics), kind=kind)
        if self._portal is None and self._main:  # after training: close what the figures reopened
            close_writers(self.grpo)

    def _log_metrics(self, metrics: dict[str, Any], *, kind: str) -> None:
        """One line of ``metrics.jsonl`` (the counters, then ``metrics``); and, to every ``report_to`` backend,
        the counters and our own figures (TRL's loggers have TRL's training figures already)."""
        if not self._main:
            return
        counters = self._counters()
        record = {"kind": kind, "time": time.time(), **counters, **metrics}
        with self._metrics_path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        self._relaying = True
        try:
            relay(self.grpo, counters if kind == "train" else {**counters, **metrics})
        finally:
            self._relaying = False

    def _write_state(self, directory: Path) -> None:
        if not self._main:
            return
        directory.mkdir(parents=True, exist_ok=True)
        self.state.generated_tasks = [msgspec.to_builtins(task) for task in self.pool.generated_tasks()]
        (directory / STATE_FILE).write_text(json.dumps(self.state.as_dict(), indent=1))

    def _load_state(self, checkpoint: Path) -> None:
        path = checkpoint / STATE_FILE
        if not path.exists():
            raise ConfigError(f"{checkpoint} has no {STATE_FILE}; it was not written by dreamgym's trainer")
        self.state = TrainerState.from_dict(json.loads(path.read_text()))
        generated = [msgspec.convert(task, Task) for task in self.state.generated_tasks]
        self.pool.add_tasks(generated)

    @property
    def _ranks(self) -> int:
        """How many processes train together (``WORLD_SIZE``, set by torchrun or accelerate launch)."""
        return int(os.environ.get("WORLD_SIZE", "1") or 1)

    @property
    def _main(self) -> bool:
        """Whether this is the rank that plays the episodes and writes the store."""
        return int(os.environ.get("RANK", "0") or 0) == 0

    def _require_portal(self) -> RuntimePortal:
        if self._portal is None:
            raise ConfigError("the trainer's runtime is not running; call Trainer.train()")
        return self._portal


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The ``checkpoint-N`` with the largest N that holds the trainer's state, or ``None``."""
    found = []
    for path in output_dir.glob("checkpoint-*"):
        suffix = path.name.removeprefix("checkpoint-")
        if suffix.isdigit() and (path / STATE_FILE).exists():
            found.append((int(suffix), path))
    return max(found)[1] if found else None


class _Callback(TrainerCallback):
    """Ties TRL's loop to the trainer: the schedule after each update, the state at each save, the logs."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.trainer.policy.weights_changed()  # a resumed run has just loaded its checkpoint's weights
        return control

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.trainer.policy.weights_changed()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.trainer._after_update(state.global_step):
            control.should_save = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.trainer._write_state(Path(args.output_dir) / f"checkpoint-{state.global_step}")
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if logs and not self.trainer._relaying:
            self.trainer._log_metrics({f"train/{k}": v for k, v in logs.items()}, kind="train")
        return control
