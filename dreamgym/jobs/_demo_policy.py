"""The demo's policy: its weights, the warm start before RL (phase 3) and GRPO training (phase 6)."""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from dreamgym.core.models import resolve_model
from dreamgym.core.types import SOURCES
from dreamgym.jobs._demo_settings import (
    DEMO_REFIT_LEARNING_RATE,
    DemoSettings,
    demo_sim_training,
    demo_tasks,
    held_out_pairs,
)

if TYPE_CHECKING:
    from dreamgym.agents import LocalPolicy
    from dreamgym.core.types import Step
    from dreamgym.trainer import Refit

__all__ = ["TRAINING_SKIPPED", "PolicyWeights", "TrainOutcome", "collect_demonstrations", "prepare_policy",
           "train_policy", "training_record"]  # fmt: skip

log = logging.getLogger(__name__)

TRAINING_SKIPPED = "train_updates is 0"


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyWeights:
    """A policy model loaded once; each phase wraps it in a :class:`LocalPolicy` made in its own event loop."""

    directory: Path
    model: Any
    tokenizer: Any
    digest: str
    logits_memo: int = 256
    """Prompts whose logits the policies made here keep while the weights stay (``LocalPolicyConfig.logits_memo``;
    0: none, every turn runs the model, as ``benchmarks/probes/train_caches.py``'s baseline does)."""

    def policy(self, limiter: anyio.CapacityLimiter, *, temperature: float, seed: int) -> LocalPolicy:
        """The ``index`` policy over the page's listed candidates, sharing ``limiter`` with the other torch work.

        It draws the label token of one candidate from the softmax over the label tokens, so
        what it records is exactly what GRPO trains (a chooser is not
        trainable). The candidates are listed in the prompt, so the system
        message need not list the action definitions.
        """
        from dreamgym.agents import LocalPolicy, LocalPolicyConfig

        config = LocalPolicyConfig(
            mode="index", temperature=temperature, seed=seed, list_actions=False, logits_memo=self.logits_memo
        )
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
    report: Callable[[Mapping[str, Any]], None] | None = None
    """Logs the demo's own figures as the trainer logs its own (:meth:`~dreamgym.trainer.Trainer.report`)."""


def prepare_policy(
    settings: DemoSettings, given: Path | None, *, collect: bool = True
) -> tuple[PolicyWeights, dict[str, Any]]:
    """Phase 3: the policy, before any RL: a tiny index policy whose tokenizer learns the seed set's pages (or
    the given model, with label tokens), behaviour-cloned on the seed set's demonstrator episodes and those of
    ``demonstration_seeds`` (``warm_epochs``; collected here unless ``collect`` is false: phase 1 did,
    :func:`collect_demonstrations`), saved under ``out/policy``. Returns it and what the warm start did."""
    import torch

    from dreamgym.agents import add_index_tokens
    from dreamgym.simulator import weights_digest
    from dreamgym.trainer import WarmStartConfig, demonstrations, tiny_index_policy, warm_start

    torch.manual_seed(settings.seed)
    episodes = anyio.run(_demonstrator_episodes if collect else _stored_demonstrations, settings)
    tasks = {task.task_id: task for task in demo_tasks(settings)}
    if given is None:
        pages = [(tasks[step.task_id], page) for episode in episodes for step in episode
                 for page in (step.observation, step.next_observation)]  # fmt: skip
        model, tokenizer = tiny_index_policy(pages, seed=settings.seed)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = resolve_model(given, what="--policy-model")
        model = AutoModelForCausalLM.from_pretrained(str(directory))
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        add_index_tokens(model, tokenizer)
    directory = settings.out / "policy"
    draft = PolicyWeights(directory=directory, model=model, tokenizer=tokenizer, digest="")
    record: dict[str, Any] = {"base": "tiny index policy" if given is None else str(given)}
    if settings.warm_epochs > 0:
        policy = draft.policy(anyio.CapacityLimiter(1), temperature=0.0, seed=settings.seed)
        examples, skipped = demonstrations(policy, episodes, list(tasks.values()))
        config = WarmStartConfig(
            epochs=settings.warm_epochs,
            learning_rate=1e-3,
            batch_size=4,
            seed=settings.seed,
            lm_weight=1.0,
            accuracy_examples=256,  # of the 875 or so: 7 s instead of 23 s on 2 cores
        )
        fit = warm_start(policy, examples, config)
        record.update(
            episodes=len(episodes), examples=fit.examples, skipped_steps=skipped, epochs=settings.warm_epochs,
            updates=fit.updates, first_loss=round(fit.first_loss, 4), last_loss=round(fit.last_loss, 4),
            label_accuracy=round(fit.accuracy, 4), label_accuracy_examples=fit.accuracy_examples,
        )  # fmt: skip
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    weights = PolicyWeights(directory=directory, model=model, tokenizer=tokenizer, digest=weights_digest(directory))
    return weights, record


async def _demonstrator_episodes(settings: DemoSettings) -> list[list[Step]]:
    """The demonstrator's episodes of the seed set and of ``demonstration_seeds`` (collected here, into their own
    store), each its steps in order, the episodes by (task, seed).

    The order is the stores' contents', not the order collection finished them in (two browser contexts finish
    in any order): the tokenizer and the cloning batches are drawn from this list, so one seed gives one warm
    start."""
    await collect_demonstrations(settings)
    return await _stored_demonstrations(settings)


async def collect_demonstrations(settings: DemoSettings) -> None:
    """The demonstrator's episodes of ``demonstration_seeds``, collected afresh into their own store (none where
    there are no such seeds). The experience model never trains on nor retrieves them: phase 2 checks its build on
    them, pages it has not seen."""
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig

    shutil.rmtree(settings.demonstrations_dir, ignore_errors=True)
    if settings.demonstration_seeds:
        plan = CollectPlan(tasks=settings.tasks, seeds=settings.demonstration_seeds, explorers=0, near_misses=0,
                           max_steps=settings.max_steps, contexts=settings.real_concurrency)  # fmt: skip
        async with LmdbReplayStore(  # never searched: its vectors would only cost time
            settings.demonstrations_dir, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False)
        ) as extra:
            await collect_miniwob(extra, plan)


async def _stored_demonstrations(settings: DemoSettings) -> list[list[Step]]:
    """The demonstrator's episodes already in the demo's stores (the seed set's and ``demonstration_seeds``'), in
    :func:`_demonstrator_episodes`'s order."""
    from dreamgym.bridge import MiniWobDemonstrator
    from dreamgym.jobs import policy_episodes
    from dreamgym.replay import LmdbReplayStore

    episodes: list[list[Step]] = []
    stores = [settings.store_dir, *([settings.demonstrations_dir] if settings.demonstration_seeds else [])]
    for path in stores:
        async with LmdbReplayStore(path, readonly=True) as store:
            tasks = [f"miniwob/{name}" for name in settings.tasks]
            episodes += await policy_episodes(store, tasks, MiniWobDemonstrator.policy_id)
    return sorted(episodes, key=lambda steps: (steps[0].task_id, steps[0].seed or 0, steps[0].episode_id))


def train_policy(settings: DemoSettings, weights: PolicyWeights, *, sim_dir: Path) -> TrainOutcome | None:
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
    from dreamgym.trainer import Demonstration, LoraSettings, TrainConfig, Trainer, demonstrations

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
        sim_trust=settings.sim_trust,
        sim_refit_every=settings.sim_refit_every,
        step_cost=settings.step_cost,
        resample_flat=settings.resample_flat,
        anchor_weight=settings.anchor_weight,
        micro_batch_size=settings.micro_batch_size,
        seed=settings.seed,
        report_to=settings.report_to,
        lora=None if settings.policy_model is None else LoraSettings(),  # the tiny policy trains every weight
    )
    stack = StackSettings(
        store=settings.store_dir,
        eval_store=out / "eval-store",
        sim_model=sim_dir,
        exclude_task_seeds=held_out_pairs(settings),
        runtime=RuntimeConfig(max_steps=settings.max_steps, real_concurrency=settings.real_concurrency),
        embedder=settings.embedder,
        refit=_refit(settings, sim_dir) if settings.sim_refit_every else None,
    )
    policy = weights.policy(anyio.CapacityLimiter(1), temperature=settings.temperature, seed=settings.seed)
    anchor: list[Demonstration] = []
    if settings.anchor_weight > 0:  # the warm start's demonstrations, on training seeds only (checked by the config)
        anchor, _ = demonstrations(policy, anyio.run(_stored_demonstrations, settings), demo_tasks(settings))
    trainer = Trainer(
        config,
        policy=policy,
        tasks=demo_tasks(settings),
        open_sides=stack_sides(stack),
        train_seeds=settings.train_seeds,
        anchor=anchor,
    )
    result = trainer.train(resume=False)
    state = result.state
    rows = _metric_rows(out)
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    anchored = [row["train/anchor_loss"] for row in rows if "train/anchor_loss" in row]
    refits = [row["sim/refit_seconds"] for row in rows if "sim/refit_seconds" in row]
    trust: dict[str, Any] = next(
        (row for row in reversed(rows) if any(key.startswith("sim_trust/") for key in row)), {}
    )
    trained = PolicyWeights(
        directory=result.final_dir,
        model=trainer.grpo.model,
        tokenizer=weights.tokenizer,
        digest=f"{weights.digest[:12]}+lora-u{state.update}",
        logits_memo=weights.logits_memo,
    )
    metrics = {
        "train/updates": float(state.update),
        "train/real_steps": float(state.real_steps),
        "train/synthetic_steps": float(state.synthetic_steps),
        "train/real_groups": float(state.real_groups),
        "train/synthetic_groups": float(state.synthetic_groups),
        "train/gated_groups": float(state.gated_groups),
        "train/dropped_groups": float(state.dropped_groups),
        **{f"train/teaching_groups/{side}": float(state.teaching_groups.get(side, 0)) for side in SOURCES},
        "train/seconds": result.seconds,
        "train/rollout_seconds": state.rollout_seconds,
        "train/sim_refits": float(len(refits)),
        "train/sim_refit_seconds": float(sum(refits)),
        **{f"train/{key}": float(value) for key, value in trust.items() if key.startswith("sim_trust")},
        **({"train/last_loss": float(losses[-1])} if losses else {}),
        **_anchor_figures(settings, anchor, anchored),
        **_memo_figures(policy),
    }
    return TrainOutcome(policy=trained, metrics=metrics, report=functools.partial(trainer.report, kind="demo"))


def _refit(settings: DemoSettings, sim_dir: Path) -> Callable[[anyio.CapacityLimiter], Refit]:
    """Phase 6's refits of the experience model: ``sim_refit_epochs`` passes over the store's real steps (held-out
    pairs left out), from the model in use, at the demo-size model's sequence length, into ``OUT/train/sim-refits``."""
    from dreamgym.trainer import sft_refit

    return lambda limiter: sft_refit(
        settings.out / "train" / "sim-refits",
        base=sim_dir,
        epochs=settings.sim_refit_epochs,
        exclude_task_seeds=held_out_pairs(settings),
        max_length=demo_sim_training(settings).max_length,
        learning_rate=DEMO_REFIT_LEARNING_RATE,
        judge=settings.outcome_judge,
        limiter=limiter,
    )


def _anchor_figures(settings: DemoSettings, anchor: Sequence[Any], losses: Sequence[float]) -> dict[str, float]:
    """How many demonstrations the updates were anchored to, at what weight, and their loss at the first and last
    update (none without the anchor)."""
    if not anchor or not losses:
        return {}
    return {
        "train/anchor_examples": float(len(anchor)),
        "train/anchor_weight": settings.anchor_weight,
        "train/anchor_first_loss": float(losses[0]),
        "train/anchor_last_loss": float(losses[-1]),
    }


def _memo_figures(policy: LocalPolicy) -> dict[str, float]:
    """How many of the policy's turns ran the model and how many reused a prompt's logits (none without a memo)."""
    if policy.memo is None:
        return {}
    return {"train/policy_prompts_run": float(policy.memo.runs), "train/policy_prompts_reused": float(policy.memo.hits)}


def _metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    import json

    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def training_record(trained: TrainOutcome | None) -> dict[str, Any]:
    if trained is None:
        return {"status": "skipped", "reason": TRAINING_SKIPPED}
    return {"status": "trained", "policy": str(trained.policy.directory), "metrics": dict(trained.metrics)}
