"""Groups: G episodes of one task from one initial state, on one side.

GRPO compares the rewards of a group's episodes, so they must start alike:
a synthetic group resets the simulator once and forks every episode from
that observation; a real group resets each episode's page with the same seed
and checks afterwards that every first observation hashed alike
(:attr:`GroupResult.consistent`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Policy
from dreamgym.core.types import SOURCES, Episode, Source, Step, Task, outcome_reward

__all__ = ["Branch", "GroupResult", "GroupSpec", "Rollout"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Branch:
    """Where a branched group starts: after the first steps of a recorded real episode.

    The runtime reads the episode's first ``prefix_steps`` steps from the store,
    starts the simulator in the real state they led to (their last
    ``next_observation``), with them as history, and continues synthetically;
    the continuation's step indexes follow the prefix's.
    """

    episode_id: str
    """The recorded real episode."""
    prefix_steps: int
    """How many of its steps to replay (>= 1)."""

    def __post_init__(self) -> None:
        if not self.episode_id:
            raise ConfigError("Branch.episode_id must name a recorded real episode")
        if self.prefix_steps < 1:
            raise ConfigError(
                f"Branch.prefix_steps must be >= 1, got {self.prefix_steps}; "
                "to start at the first page, run a synthetic group without a branch"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """One group to run.

    Example:
        >>> GroupSpec(task=site.task("click-button"), size=8, seed=3, source="real", shadow=True)
    """

    task: Task
    """The task every episode of the group plays."""
    size: int = 1
    """G: how many episodes."""
    seed: int | None = None
    """The start's seed. A real group without one gets a random seed, shared by its episodes;
    a branched group takes the recorded episode's."""
    source: Source | None = None
    """``real`` or ``synthetic``; ``None`` lets the runtime's chooser decide. Generated
    tasks always run synthetic."""
    group_id: str = ""
    """Recorded on every step; ``""`` makes one from the task, the seed and a random suffix."""
    shadow: bool = False
    """Real groups only: beside each real step, ask the simulator what it predicts and store the
    prediction as a synthetic step of episode ``<real episode id>/shadow`` (for fidelity)."""
    branch: Branch | None = None
    """Start from a recorded real episode's state instead of the first page (synthetic only)."""
    policy: Policy | None = None
    """The policy of this group; ``None`` uses the runtime's."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ConfigError(f"GroupSpec.size must be >= 1, got {self.size}")
        if self.source is not None and self.source not in SOURCES:
            raise ConfigError(f"GroupSpec.source must be 'real', 'synthetic' or None, got {self.source!r}")
        if self.task.generated and self.source == "real":
            raise ConfigError(
                f"task {self.task.task_id} is generated and runs only on the simulator; "
                "set source='synthetic' or leave it None"
            )
        if self.branch is not None and (self.source == "real" or self.shadow):
            raise ConfigError("a branched group continues on the simulator: give it no source='real' and no shadow")
        if self.shadow and self.source == "synthetic":
            raise ConfigError("shadow mode predicts real steps: use it on real groups (source='real' or None)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """One finished episode: its summary and its steps (the policy's token records included)."""

    episode: Episode
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupResult:
    """A finished group. Its rollouts are in the store too, with their provenance."""

    group_id: str
    task: Task
    source: Source
    rollouts: tuple[Rollout, ...]
    consistent: bool
    """Whether every episode that started saw the same first observation. A real group
    where they differ (a site that does not reset cleanly) gives rewards that do not
    compare: the trainer drops and counts such groups."""

    @property
    def episodes(self) -> tuple[Episode, ...]:
        return tuple(rollout.episode for rollout in self.rollouts)

    @property
    def rewards(self) -> tuple[float | None, ...]:
        """Each episode's outcome reward in [0, 1], in rollout order; ``None`` where the
        infrastructure ended it (:func:`~dreamgym.core.types.outcome_reward`)."""
        return tuple(outcome_reward(rollout.episode) for rollout in self.rollouts)

    @property
    def cuts(self) -> tuple[str, ...]:
        """Why the infrastructure ended each episode it ended (:attr:`Episode.cut_reason`), in rollout order."""
        return tuple(rollout.episode.cut_reason for rollout in self.rollouts if rollout.episode.cut_reason)

    @property
    def errors(self) -> int:
        """Episodes that an exception ended."""
        return sum(1 for rollout in self.rollouts if rollout.episode.error)


def consistent(episodes: tuple[Episode, ...]) -> bool:
    """Whether the episodes that started share one first-observation hash."""
    return len({e.initial_observation_hash for e in episodes if e.initial_observation_hash}) <= 1
