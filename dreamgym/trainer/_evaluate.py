"""Evaluation of a policy on held-out real tasks and seeds.

One real episode per (task, seed), run through a :class:`~dreamgym.runtime.Runtime`
(so it is recorded with its provenance in that runtime's store — give
evaluation its own store, so held-out pages never reach the simulator's
retrieval or SFT data). Success rates come with their n and a 95% Wilson
interval: at the sizes a 2-core machine affords (tens of episodes) the
spread is as large as most effects, and a figure without it misleads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Policy
from dreamgym.core.types import Episode, Task
from dreamgym.runtime import GroupResult, GroupSpec, Runtime

__all__ = [
    "EXAMPLE_COLUMNS",
    "EvalExample",
    "EvalResult",
    "PairedComparison",
    "SeedOutcome",
    "TaskScore",
    "evaluate",
    "paired_comparison",
    "wilson_interval",
]


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default); ``(0, 1)`` for n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskScore:
    """One task's held-out episodes."""

    task_id: str
    episodes: int
    """Scorable episodes: those the policy ended (or the step limit); the success rate's n."""
    successes: int
    steps: int
    cut: int = 0
    """Episodes the infrastructure ended (deadline, crash, backend, store, exception): not in ``episodes``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedOutcome:
    """One held-out episode's outcome: its (task, seed) and whether the policy solved it."""

    task_id: str
    seed: int | None
    solved: bool | None
    """``None``: the infrastructure cut the episode (it says nothing about the policy)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedComparison:
    """Two evaluations on the same (task, seed) pairs, pair by pair: the test for "did training change success"
    that uses the pairing (each seed's page is the same both times), where comparing the two rates' intervals
    does not. Pairs cut in either evaluation, or played in only one, are left out."""

    pairs: int
    """(task, seed) pairs scorable in both evaluations."""
    only_after: int
    """Solved after, not before."""
    only_before: int
    """Solved before, not after."""
    both: int
    p_value: float
    """Exact two-sided McNemar test (a sign test on the discordant pairs): the chance of a split at least this
    uneven between ``only_after`` and ``only_before`` if training changed nothing."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def paired_comparison(before: EvalResult, after: EvalResult) -> PairedComparison:
    """``before`` and ``after`` compared on the (task, seed) pairs both scored (:attr:`EvalResult.outcomes`)."""
    first = {(o.task_id, o.seed): o.solved for o in before.outcomes if o.solved is not None}
    second = {(o.task_id, o.seed): o.solved for o in after.outcomes if o.solved is not None}
    shared = first.keys() & second.keys()
    only_after = sum(1 for key in shared if second[key] and not first[key])
    only_before = sum(1 for key in shared if first[key] and not second[key])
    discordant = only_after + only_before
    tail = sum(math.comb(discordant, k) for k in range(min(only_after, only_before) + 1)) / 2**discordant
    return PairedComparison(
        pairs=len(shared),
        only_after=only_after,
        only_before=only_before,
        both=sum(1 for key in shared if first[key] and second[key]),
        p_value=min(1.0, 2 * tail),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalExample:
    """One held-out episode as a trackers' table row shows it."""

    task_id: str
    seed: int | None
    outcome: str
    """``solved``, ``failed`` or ``cut: <reason>``."""
    steps: int
    actions: str
    """The policy's actions, in order, joined by `` → ``."""

    def row(self) -> list[object]:
        """The values of :data:`EXAMPLE_COLUMNS`."""
        return [self.task_id, self.seed, self.outcome, self.steps, self.actions]


EXAMPLE_COLUMNS = ("task", "seed", "outcome", "steps", "actions")
"""The columns of an evaluation's example table (:meth:`EvalExample.row`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResult:
    """Success of a policy on held-out real episodes, with its n and spread.

    An episode the infrastructure ended (:attr:`~dreamgym.core.Episode.cut_reason`)
    says nothing about the policy: it is counted in ``cut`` (by reason in
    ``cut_reasons``), apart from the scorable ``episodes`` the rate is taken over.
    """

    episodes: int
    """Scorable episodes: the success rate's n."""
    successes: int
    steps: int
    """Real steps the evaluation took, cut episodes' included (not training data: they are in the
    evaluation's store)."""
    cut: int = 0
    """Episodes the infrastructure ended, left out of the rate."""
    cut_reasons: dict[str, int] = field(default_factory=dict)
    """``cut`` by reason (``deadline``, ``error``, ``backend``, ``browser_crashed``, ...)."""
    tasks: tuple[TaskScore, ...] = field(default=())
    examples: tuple[EvalExample, ...] = field(default=())
    """A few episodes to look at (per task, the first solved and the first not solved), for trackers' tables."""
    outcomes: tuple[SeedOutcome, ...] = field(default=())
    """Every episode's outcome by (task, seed), for comparing two evaluations pair by pair
    (:func:`paired_comparison`)."""

    @property
    def errors(self) -> int:
        """Episodes an exception ended (part of ``cut``)."""
        return sum(n for reason, n in self.cut_reasons.items() if reason in ("error", "backend", "store"))

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% Wilson interval of the success rate."""
        return wilson_interval(self.successes, self.episodes)

    @property
    def mean_steps(self) -> float:
        played = self.episodes + self.cut
        return self.steps / played if played else 0.0

    def as_dict(self) -> dict[str, object]:
        low, high = self.interval
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "success_ci95": [low, high],
            "steps": self.steps,
            "mean_steps": self.mean_steps,
            "cut": self.cut,
            "cut_reasons": dict(self.cut_reasons),
            "errors": self.errors,
            "tasks": [asdict(task) for task in self.tasks],
            "examples": [asdict(example) for example in self.examples],
            "outcomes": [[o.task_id, o.seed, o.solved] for o in self.outcomes],
        }


async def evaluate(
    runtime: Runtime,
    tasks: Sequence[Task],
    seeds: Sequence[int],
    *,
    policy: Policy | None = None,
    label: str = "eval",
) -> EvalResult:
    """Play one real episode per (task, seed) with ``policy`` (the runtime's by default).

    Generated (curriculum) tasks never enter evaluation: a task with a
    ``parent_task_id`` is a :class:`ConfigError`.
    """
    if not tasks or not seeds:
        raise ConfigError("evaluation needs at least one task and one seed")
    for task in tasks:
        if task.parent_task_id:
            raise ConfigError(
                f"task {task.task_id!r} was generated from {task.parent_task_id!r}; "
                "generated tasks exist only on the synthetic side and are never evaluated"
            )
    specs = [
        GroupSpec(task=task, size=1, seed=seed, source="real", group_id=f"{label}/{task.task_id}/{seed}", policy=policy)
        for task in tasks
        for seed in seeds
    ]
    results = await runtime.run_groups(specs, label=f"evaluate ({label})")
    by_task: dict[str, list[Episode]] = {}
    for result in results:
        by_task.setdefault(result.task.task_id, []).extend(result.episodes)
    reasons: dict[str, int] = {}
    for episodes in by_task.values():
        for episode in episodes:
            if episode.cut_reason:
                reasons[episode.cut_reason] = reasons.get(episode.cut_reason, 0) + 1
    scores = tuple(
        TaskScore(
            task_id=task_id,
            episodes=sum(1 for e in episodes if not e.cut_reason),
            successes=sum(1 for e in episodes if not e.cut_reason and e.success),
            steps=sum(e.num_steps for e in episodes),
            cut=sum(1 for e in episodes if e.cut_reason),
        )
        for task_id, episodes in by_task.items()
    )
    return EvalResult(
        episodes=sum(s.episodes for s in scores),
        successes=sum(s.successes for s in scores),
        steps=sum(s.steps for s in scores),
        cut=sum(s.cut for s in scores),
        cut_reasons=reasons,
        tasks=scores,
        examples=_examples(results),
        outcomes=tuple(
            SeedOutcome(task_id=e.task_id, seed=e.seed, solved=None if e.cut_reason else bool(e.success))
            for episodes in by_task.values()
            for e in sorted(episodes, key=lambda e: -1 if e.seed is None else e.seed)
        ),
    )


def _examples(results: Sequence[GroupResult]) -> tuple[EvalExample, ...]:
    """Per task, the first solved and the first other episode, by seed."""
    rollouts = sorted(
        (r for result in results for r in result.rollouts),
        key=lambda r: (r.episode.task_id, -1 if r.episode.seed is None else r.episode.seed),
    )
    chosen: dict[tuple[str, bool], EvalExample] = {}
    for rollout in rollouts:
        episode = rollout.episode
        solved = episode.success and not episode.cut_reason
        if (episode.task_id, solved) in chosen:
            continue
        outcome = "solved" if solved else f"cut: {episode.cut_reason}" if episode.cut_reason else "failed"
        actions = " → ".join(str(step.action) for step in rollout.steps)
        chosen[episode.task_id, solved] = EvalExample(
            task_id=episode.task_id, seed=episode.seed, outcome=outcome, steps=len(rollout.steps), actions=actions
        )
    return tuple(sorted(chosen.values(), key=lambda e: (e.task_id, e.outcome != "solved")))
