"""The curriculum: pick the tasks the policy is unsure about, and ask a model for harder variants.

DreamGym's curriculum values a task by how much its last group of rollouts
disagreed: a group that all succeeded or all failed gives GRPO no signal, so
its value is zero. The highest-valued tasks become *seeds*, and the
experience model proposes feasible but harder variations of each seed on the
same site. Generated tasks live only on the synthetic side: they have no
evaluator (``config_json`` stays empty), never appear in :meth:`TaskPool.real_tasks`,
and a cap λ (``max_generated_share``) bounds their share of every training batch.

Example:
    >>> pool = TaskPool(real_tasks, config=CurriculumConfig(num_seed_tasks=4))
    >>> pool.record_group("shop/checkout", [1.0, 0.0, 0.0, 1.0])
    >>> new = await pool.refresh(backend, store=store)
    >>> batch = pool.sample_batch(16, random.Random(0))
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import random
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import anyio

from dreamgym.core import BackendError, ChatMessage, ConfigError, ReplayStore, Sampling, Task, TextBackend

__all__ = [
    "VARIATION_TEMPLATE_ID",
    "CurriculumConfig",
    "CurriculumStats",
    "TaskPool",
    "propose_variations",
    "select_seed_tasks",
    "task_value",
    "variation_messages",
]

logger = logging.getLogger(__name__)

VARIATION_TEMPLATE_ID = "curriculum/variation-v1"
"""Id of the task-variation prompt of :func:`variation_messages`; changes whenever its wording does."""

_BENCHMARK = "curriculum"
_TAG = re.compile(r"<task>(.*?)</task>", re.DOTALL | re.IGNORECASE)
_LIST_ITEM = re.compile(r"^\s*(?:\(?\d{1,3}[.):]|[-*•+])\s+(.+?)\s*$")
_DECORATION = "\"'`*“”‘’ "


@dataclass(frozen=True, slots=True, kw_only=True)
class CurriculumConfig:
    """How the curriculum picks seed tasks, asks for variations and mixes them into batches."""

    num_seed_tasks: int = 8
    """How many of the highest-valued tasks are varied per :meth:`TaskPool.refresh`."""
    variations_per_task: int = 4
    """How many new instructions are asked for (and at most kept) per seed task."""
    max_generated_share: float = 0.5
    """λ: at most ``floor(λ·n)`` of a batch of ``n`` tasks are generated. The paper bounds this
    share with a hyperparameter λ without a value we could confirm; 0.5 is our default."""
    min_value: float = 1e-6
    """Task values at or below this count as zero (the group all succeeded or all failed)."""
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.8, max_new_tokens=256))
    """How the proposal calls sample; a temperature above 0 keeps refreshes from repeating themselves."""
    max_instruction_chars: int = 300
    """Proposed instructions longer than this are rejected as rambling."""

    def __post_init__(self) -> None:
        for name in ("num_seed_tasks", "variations_per_task", "max_instruction_chars"):
            if getattr(self, name) < 1:
                raise ConfigError(f"CurriculumConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.max_generated_share <= 1.0:
            raise ConfigError(
                f"CurriculumConfig.max_generated_share must be in [0, 1], got {self.max_generated_share}; "
                "use 0 to train on real tasks only"
            )
        if self.min_value < 0.0:
            raise ConfigError(
                f"CurriculumConfig.min_value must be >= 0 (a variance is never negative), got {self.min_value}"
            )


@dataclass(slots=True)
class CurriculumStats:
    """Running counts of the proposal calls, for ``sim/curriculum/...`` metrics."""

    proposals: int = 0
    """Backend answers received."""
    accepted: int = 0
    """Proposed instructions that became new tasks."""
    rejected: int = 0
    """Proposed instructions dropped: empty, a duplicate, too long, already known, or surplus."""
    unparseable: int = 0
    """Answers in which no instruction could be found at all."""


def task_value(rewards: Sequence[float]) -> float:
    """The population variance of one group's outcome rewards (0.0 for fewer than 2 rewards).

    Example:
        >>> task_value([0.0, 1.0])
        0.25
    """
    if len(rewards) < 2:
        return 0.0
    mean = math.fsum(rewards) / len(rewards)
    return math.fsum((r - mean) ** 2 for r in rewards) / len(rewards)


def select_seed_tasks(
    group_rewards: Mapping[str, Sequence[float]], k: int, *, min_value: float = 1e-6
) -> list[tuple[str, float]]:
    """The ``k`` tasks of highest :func:`task_value` above ``min_value``, as ``(task_id, value)``.

    Highest value first; equal values are ordered by task id, so the choice is deterministic.
    """
    valued = ((task_id, task_value(rewards)) for task_id, rewards in group_rewards.items())
    ranked = sorted((pair for pair in valued if pair[1] > min_value), key=lambda pair: (-pair[1], pair[0]))
    return ranked[: max(k, 0)]


def variation_messages(task: Task, n: int, context: str = "") -> list[ChatMessage]:
    """The task-variation prompt (:data:`VARIATION_TEMPLATE_ID`): ask for ``n`` harder variants of ``task``.

    ``context`` is optional text about the site or page (e.g. a rendered start state).
    Raises :class:`ConfigError` when ``n`` is below 1.
    """
    if n < 1:
        raise ConfigError(f"variation_messages needs n >= 1, got {n}")
    system = (
        "You design practice tasks for a web agent. Given a task the agent can already attempt on a "
        "website, you write new tasks of the same kind on the same website: change the entities, values "
        "and constraints, make each one more demanding than the original, and keep every one achievable "
        "with the same interface. Answer with exactly the requested number of tasks, one per line, each "
        "inside <task></task> tags, and nothing else."
    )
    lines = [f"Website: {task.site or 'unknown'}"]
    if task.start_url:
        lines.append(f"Start page: {task.start_url}")
    if context.strip():
        lines += ["Page context:", context.strip()]
    lines += [
        f"Original task: {task.instruction}",
        "",
        f"Write {n} new, harder tasks for this website, for example:",
        "<task>first new instruction</task>\n<task>second new instruction</task>",
    ]
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content="\n".join(lines))]


def _candidates(text: str) -> list[str] | None:
    """Instructions found in an answer: ``<task>`` tags, else list items; ``None`` when neither."""
    found = _TAG.findall(text)
    if not found:
        found = [m.group(1) for line in text.splitlines() if (m := _LIST_ITEM.match(line))]
    if not found:
        return None
    return [" ".join(item.split()).strip(_DECORATION) for item in found]


def _key(instruction: str) -> str:
    return " ".join(instruction.casefold().split())


def _child(parent: Task, instruction: str) -> Task:
    digest = hashlib.sha1(_key(instruction).encode(), usedforsecurity=False).hexdigest()[:8]
    return Task(
        task_id=f"{parent.task_id}/v-{digest}",
        instruction=instruction,
        site=parent.site,
        start_url=parent.start_url,
        benchmark=_BENCHMARK,
        max_steps=parent.max_steps,
        parent_task_id=parent.task_id,
        generated=True,
    )


async def propose_variations(
    backend: TextBackend,
    task: Task,
    config: CurriculumConfig,
    *,
    context: str = "",
    rng_seed: int = 0,
    stats: CurriculumStats | None = None,
    known_ids: Collection[str] = (),
) -> list[Task]:
    """Ask ``backend`` once for harder variations of ``task`` and build them as generated tasks.

    The call samples with ``config.sampling``, its seed offset by ``rng_seed`` (a ``None`` seed
    counts as 0). Each child's id is ``f"{task.task_id}/v-{sha1[:8]}"`` of its normalised
    instruction, so the same proposal always gets the same id. Empty, over-long proposals,
    repeats of the parent or of each other (ignoring case and spacing), ids in ``known_ids``,
    and proposals beyond ``config.variations_per_task`` are dropped. An answer with no
    instructions at all gives ``[]`` and a logged warning, never an exception.

    Raises:
        BackendError: The backend failed (propagated from ``backend.complete``).
    """
    stats = stats if stats is not None else CurriculumStats()
    sampling = dataclasses.replace(config.sampling, seed=(config.sampling.seed or 0) + rng_seed)
    messages = variation_messages(task, config.variations_per_task, context)
    completion = await backend.complete(messages, sampling)
    stats.proposals += 1
    candidates = _candidates(completion.text)
    if candidates is None:
        stats.unparseable += 1
        logger.warning(
            "no task variations in %s's answer for %s: %.200r", backend.backend_id, task.task_id, completion.text
        )
        return []
    children: list[Task] = []
    seen = {_key(task.instruction)}
    for instruction in candidates:
        child = _child(task, instruction)
        keep = (
            bool(instruction)
            and len(instruction) <= config.max_instruction_chars
            and _key(instruction) not in seen
            and child.task_id not in known_ids
            and len(children) < config.variations_per_task
        )
        seen.add(_key(instruction))
        if keep:
            children.append(child)
    stats.accepted += len(children)
    stats.rejected += len(candidates) - len(children)
    return children


class TaskPool:
    """The trainer's tasks: real ones plus curriculum variants, each with its latest group's value.

    Iterating over the pool yields every task, real and generated, for training. Only
    :meth:`real_tasks` is meant for real evaluation, and it never includes generated tasks.

    Args:
        tasks: The initial tasks (see :meth:`add_tasks`).
        config: The curriculum settings; :meth:`sample_batch` uses its ``max_generated_share``
            and :meth:`refresh` uses it unless given another.
    """

    def __init__(self, tasks: Iterable[Task] = (), *, config: CurriculumConfig | None = None) -> None:
        self.config = config if config is not None else CurriculumConfig()
        self.stats = CurriculumStats()
        self._tasks: dict[str, Task] = {}
        self._groups: dict[str, tuple[float, ...]] = {}
        self._refreshes = 0
        self.add_tasks(tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def get(self, task_id: str) -> Task:
        """The task with this id; raises ``KeyError`` when the pool has none."""
        return self._tasks[task_id]

    def add_tasks(self, tasks: Iterable[Task]) -> None:
        """Add tasks; all or none are added. Re-adding an identical task does nothing.

        Raises:
            ConfigError: A generated task's parent is not in the pool (nor earlier in ``tasks``),
                or another task already has the same id.
        """
        staged = dict(self._tasks)
        for task in tasks:
            if task.generated and task.parent_task_id not in staged:
                raise ConfigError(
                    f"generated task {task.task_id!r} has parent {task.parent_task_id!r}, which is not in the "
                    "pool; add the parent task first"
                )
            if staged.get(task.task_id, task) != task:
                raise ConfigError(f"the pool already has a different task with id {task.task_id!r}; give it a new id")
            staged[task.task_id] = task
        self._tasks = staged

    def real_tasks(self) -> list[Task]:
        """The real tasks, in the order added: the only ones fit for real evaluation."""
        return [task for task in self._tasks.values() if not task.generated]

    def generated_tasks(self) -> list[Task]:
        """The curriculum's generated tasks, in the order added (synthetic side only)."""
        return [task for task in self._tasks.values() if task.generated]

    def record_group(self, task_id: str, rewards: Sequence[float]) -> None:
        """Record one group's outcome rewards; a task's value is that of its latest group only.

        Raises:
            KeyError: The task is not in the pool.
        """
        if task_id not in self._tasks:
            raise KeyError(f"task {task_id!r} is not in the pool; add it before recording its rewards")
        self._groups[task_id] = tuple(float(r) for r in rewards)

    def value(self, task_id: str) -> float | None:
        """The :func:`task_value` of the task's latest group, or ``None`` before any group."""
        rewards = self._groups.get(task_id)
        return None if rewards is None else task_value(rewards)

    async def refresh(
        self,
        backend: TextBackend,
        config: CurriculumConfig | None = None,
        *,
        store: ReplayStore | None = None,
        context_for: Callable[[Task], str] | None = None,
    ) -> list[Task]:
        """Vary the seed tasks (:func:`select_seed_tasks` over recorded groups) and add the new tasks.

        The proposals run concurrently, one backend call per seed; each refresh offsets the
        sampling seed by its ordinal, so refreshes differ yet a rerun repeats. New tasks are
        stored with ``store.put_task`` (when a store is given) before they join the pool.

        Returns:
            The new tasks, seed by seed in seed order.

        Raises:
            BackendError: A proposal call failed; the other calls are cancelled and nothing is added.
        """
        config = config if config is not None else self.config
        seeds = select_seed_tasks(self._groups, config.num_seed_tasks, min_value=config.min_value)
        results: list[list[Task]] = [[] for _ in seeds]
        failures: list[BackendError] = []
        rng_seed, self._refreshes = self._refreshes, self._refreshes + 1

        async def propose(index: int, parent: Task) -> None:
            context = context_for(parent) if context_for is not None else ""
            try:
                results[index] = await propose_variations(
                    backend, parent, config, context=context, rng_seed=rng_seed, stats=self.stats, known_ids=self._tasks
                )
            except BackendError as exc:
                failures.append(exc)
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            for index, (task_id, _) in enumerate(seeds):
                tg.start_soon(propose, index, self._tasks[task_id])
        if failures:  # raised bare, not in an ExceptionGroup, so callers can catch BackendError
            raise failures[0]
        new = [task for tasks in results for task in tasks]
        if store is not None:
            for task in new:
                await store.put_task(task)
        self.add_tasks(new)
        return new

    def sample_batch(self, n: int, rng: random.Random) -> list[Task]:
        """Draw ``n`` tasks, at most ``floor(λ·n)`` of them generated, in random order.

        Generated tasks take their full share when there are enough, drawn without
        replacement; real tasks fill the rest, repeating only when there are fewer than needed.

        Raises:
            ConfigError: ``n`` is negative, or the pool has no real task to fill the batch.
        """
        if n < 0:
            raise ConfigError(f"sample_batch needs n >= 0, got {n}")
        real, generated = self.real_tasks(), self.generated_tasks()
        # the epsilon keeps e.g. 0.29 * 100 = 28.999... from flooring to 28
        cap = math.floor(self.config.max_generated_share * n + 1e-9)
        batch = rng.sample(generated, min(cap, len(generated)))
        if len(batch) < n and not real:
            raise ConfigError("the task pool has no real tasks; add some with add_tasks before sampling")
        while len(batch) < n:
            batch += rng.sample(real, min(len(real), n - len(batch)))
        rng.shuffle(batch)
        return batch
