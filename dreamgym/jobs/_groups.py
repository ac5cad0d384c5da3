"""Which groups a job runs: over tasks and seeds, a share of them real; the held-out pairs of a task set."""

from __future__ import annotations

from collections.abc import Sequence

from dreamgym.core.types import Source, Task
from dreamgym.runtime import GroupSpec, RatioSource

__all__ = ["held_out", "mixed_groups"]


def mixed_groups(
    tasks: Sequence[Task],
    seeds: Sequence[int | None],
    *,
    size: int,
    real_share: float,
    shadow: bool = False,
    count: int | None = None,
    seed: int = 0,
) -> list[GroupSpec]:
    """Groups over (task, seed) pairs, ``real_share`` of them real (exactly, spread out), shadowed if asked.

    Without ``count``, one group per (task, seed); with it, ``count`` groups
    that cycle through the seeds, every task taking each seed in turn, the
    tasks' order rotated from seed to seed so that the real groups' evenly
    spread positions do not all fall on one task.
    """
    if count is None:
        chosen = [(task, s) for task in tasks for s in seeds]
    else:
        pairs = [(tasks[(i + j) % len(tasks)], s) for j, s in enumerate(seeds) for i in range(len(tasks))]
        chosen = [pairs[i % len(pairs)] for i in range(count)]
    chooser = RatioSource(real_share, seed=seed)
    groups: list[GroupSpec] = []
    for task, group_seed in chosen:
        source: Source = chooser.choose(task, len(groups))
        groups.append(
            GroupSpec(task=task, size=size, seed=group_seed, source=source, shadow=shadow and source == "real")
        )
    return groups


def held_out(tasks: Sequence[str], seeds: Sequence[int]) -> tuple[tuple[str, int | None], ...]:
    """Every (task id, seed) pair of ``tasks`` x ``seeds``: what retrieval and refits must leave out."""
    return tuple((task, seed) for task in tasks for seed in seeds)
