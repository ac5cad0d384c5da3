"""Which groups a job runs: over tasks and seeds, a share of them real; the held-out pairs of a task set; the
episodes a store already holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dreamgym.core.types import Source, Task
from dreamgym.runtime import GroupSpec, RatioSource

__all__ = ["collected", "held_out", "mixed_groups", "policy_episodes"]


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


async def collected(store: Any, groups: Sequence[Any], policy_id: str) -> tuple[list[Any], int]:
    """The groups still to collect, and how many are done: a (task, seed) group is done when the store
    holds at least its size of episodes of that task and seed by this policy that the infrastructure
    did not cut (a group without a seed: of that task). A group with fewer runs only the episodes it
    lacks, so a re-run tops each (task, seed) up to its size and never beyond."""
    import dataclasses
    from collections import Counter

    import anyio

    from dreamgym.core.types import Episode, decode_record

    def count() -> Counter[tuple[str, int | None]]:
        finished: Counter[tuple[str, int | None]] = Counter()
        for _, raw in store.iter_records("episodes"):
            episode = decode_record(raw, Episode)
            if episode.policy_id == policy_id and episode.source == "real" and not episode.cut_reason:
                finished[(episode.task_id, episode.seed)] += 1
        return finished

    finished = await anyio.to_thread.run_sync(count)
    by_task = Counter[str]()
    for (task_id, _), n in finished.items():
        by_task[task_id] += n

    def held(group: Any) -> int:
        return finished[(group.task.task_id, group.seed)] if group.seed is not None else by_task[group.task.task_id]

    pending = [
        dataclasses.replace(group, size=group.size - held(group)) for group in groups if held(group) < group.size
    ]
    return pending, len(groups) - len(pending)


async def policy_episodes(
    store: Any, task_ids: Sequence[str], policy_id: str, *, seeds: Sequence[int] | None = None
) -> list[list[Any]]:
    """The real episodes ``policy_id`` played in ``store`` on ``task_ids`` (on ``seeds`` only, when given), each its
    steps in order, the episodes by (task, seed, episode id): a scripted demonstrator's, say, to clone or to
    anchor GRPO to (:func:`dreamgym.trainer.demonstrations`)."""
    wanted = None if seeds is None else set(seeds)
    episodes: dict[str, list[Any]] = {}
    for task_id in task_ids:
        for step in await store.get_steps(await store.task_seqs(task_id, source="real")):
            if step.policy_id == policy_id and (wanted is None or step.seed in wanted):
                episodes.setdefault(step.episode_id, []).append(step)
    ordered = [sorted(steps, key=lambda step: step.step_index) for steps in episodes.values()]
    return sorted(ordered, key=lambda steps: (steps[0].task_id, steps[0].seed or 0, steps[0].episode_id))
