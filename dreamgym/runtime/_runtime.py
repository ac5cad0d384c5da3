"""``Runtime``: runs groups of episodes on real pages and on the simulator, into the replay store.

Structure (one event loop, anyio on asyncio)::

    Runtime (async with)  ── task group ── StoreWriter.run  ◄── bounded stream ◄──┐
    run_groups(groups)    ── task group ── group ── task group ── rollout × G ─────┤
                                                              └─ shadow prediction ┘

Every episode ends in one of four ways, each recorded on its last step and
its :class:`~dreamgym.core.types.Episode`: the environment terminated or
truncated it; the step limit (``step_limit``); the deadline (``deadline``);
an exception in the environment or the policy (``backend`` for a model
backend's, ``store`` for the store's, ``error`` for any other, with
``Episode.error`` saying which; the finished steps are kept). An episode the
store did not take comes back truncated ``store``. All but the first two are
infrastructure cuts (:data:`~dreamgym.core.INFRASTRUCTURE_CUTS`): outcome ``None``. None of these
stops another episode. Cancelling ``run_groups`` stops every episode at its
next checkpoint; the finished steps of each, and its summary (``cancelled``),
are committed before the cancellation propagates.

Environments come from factories and are pooled: ``real_concurrency``
browser environments, ``synthetic_concurrency`` simulator environments.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

import anyio
import msgspec
from anyio.abc import TaskGroup

from dreamgym.core.errors import BackendError, ConfigError, StoreError, WorkerLostError
from dreamgym.core.progress import Phase, progress
from dreamgym.core.protocols import Environment, Policy, ReplayStore
from dreamgym.core.types import Action, Observation, Source, Step, observation_hash
from dreamgym.runtime._config import RuntimeConfig
from dreamgym.runtime._envs import EnvPool, Lease, ResetHook, SyntheticEnvironment
from dreamgym.runtime._episode import EpisodePlan, OnStep, finish_episode, play, shadow_step
from dreamgym.runtime._groups import GroupResult, GroupSpec, Rollout, consistent
from dreamgym.runtime._sources import SourceChooser
from dreamgym.runtime._stats import RuntimeStats
from dreamgym.runtime._writer import Commit, StoreWriter

__all__ = ["Runtime"]

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Environment)
Begin = Callable[[E], Awaitable[Observation]]
"""Starts one episode on a leased environment and returns its first observation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Group:
    """A group spec with everything decided: source, seed, id, policy and branch prefix."""

    spec: GroupSpec
    source: Source
    seed: int | None
    group_id: str
    policy: Policy
    max_steps: int
    prefix: tuple[Step, ...] = ()

    @property
    def history(self) -> tuple[tuple[Observation, Action], ...]:
        return tuple((step.observation, step.action) for step in self.prefix)


@dataclass(slots=True)
class _Outcome:
    """How one episode went, filled in as it runs."""

    started_at: float = 0.0
    initial_hash: str = ""
    cut: str = ""
    error: str = ""
    error_kind: str = ""

    def fail(self, exc: Exception) -> None:
        self.cut, self.error_kind = _cut_of(exc), type(exc).__name__
        self.error = f"{self.error_kind}: {exc}"


def _cut_of(exc: Exception) -> str:
    """The truncation reason an exception stands for: a lost rollout worker, a model backend, the store, or
    any other error."""
    if isinstance(exc, WorkerLostError):
        return "worker_lost"
    if isinstance(exc, BackendError):
        return "backend"
    if isinstance(exc, StoreError):
        return "store"
    return "error"


class _Solved:
    """Counts a run's finished episodes into its progress phase, with how many were solved."""

    def __init__(self, phase: Phase) -> None:
        self.phase = phase
        self.solved = 0

    def count(self, rollout: Rollout) -> None:
        self.solved += rollout.episode.success
        self.phase.advance(note=f"{self.solved} solved")


class Runtime:
    """Runs groups of episodes, real and synthetic, and records every step in the store.

    Use it as an async context manager: it holds the store-writer task and
    the idle environments between calls.

    Args:
        policy: Acts in every episode (a group may bring its own).
        store: Where steps, episodes and tasks go, and where branches are read from.
        config: Limits, deadline and buffers.
        real_env: Makes a real environment (e.g. ``lambda: BrowserEnv(pool, sites=[site])``).
        synthetic_env: Makes a simulator environment (e.g. ``lambda: SimulatedEnv(model, store=store)``);
            needed for synthetic groups, branches and shadow mode.
        chooser: Picks the source of groups that name none; without one, such
            groups run on the only side configured.
        reset_hook: Awaited before each real episode's reset (restore a stateful site).
        torch_limiter: The limiter shared by in-process torch work; made from
            ``config.torch_slots`` when ``None``.

    Example:
        >>> simulator = lambda: SimulatedEnv(model, store=store)
        >>> async with Runtime(policy=policy, store=store, synthetic_env=simulator) as runtime:
        ...     results = await runtime.run_groups([GroupSpec(task=task, size=8, seed=0)])
    """

    def __init__(
        self,
        *,
        policy: Policy,
        store: ReplayStore,
        config: RuntimeConfig | None = None,
        real_env: Callable[[], Environment] | None = None,
        synthetic_env: Callable[[], SyntheticEnvironment] | None = None,
        chooser: SourceChooser | None = None,
        reset_hook: ResetHook | None = None,
        torch_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        if real_env is None and synthetic_env is None:
            raise ConfigError("a Runtime needs real_env, synthetic_env or both: factories of environments")
        self.config = config or RuntimeConfig()
        self.policy = policy
        self.store = store
        self.chooser = chooser
        self.reset_hook = reset_hook
        self.torch_limiter = torch_limiter or anyio.CapacityLimiter(self.config.torch_slots)
        """Pass it to ``LocalBackend(limiter=...)`` and to a local policy, so torch work shares the cores."""
        self.stats = RuntimeStats()
        self._real = EnvPool(real_env, self.config.real_concurrency, "real") if real_env else None
        self._synthetic = (
            EnvPool(synthetic_env, self.config.synthetic_concurrency, "synthetic") if synthetic_env else None
        )
        self._writer = StoreWriter(
            store,
            buffer=self.config.store_buffer,
            batch=self.config.commit_batch,
            drain_timeout_s=self.config.drain_timeout_s,
        )
        self._task_group: TaskGroup | None = None
        self._lost_steps = 0
        """Steps the writer never took (it stalled past ``drain_timeout_s``, or was gone)."""
        self._runs: set[anyio.CancelScope] = set()
        """The cancel scopes of the run_groups calls in progress."""
        self._group_index = 0
        self._stored_tasks: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._task_group is not None:
            raise ConfigError("this Runtime is already open; enter it once")
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._writer.run)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Commit what is queued, stop the writer and close the idle environments."""
        task_group, self._task_group = self._task_group, None
        if task_group is None:
            return
        try:
            with anyio.move_on_after(self.config.drain_timeout_s, shield=True):
                await self._writer.aclose()
        finally:
            task_group.cancel_scope.cancel()
            await task_group.__aexit__(None, None, None)
            with anyio.CancelScope(shield=True):
                for pool in (self._real, self._synthetic):
                    if pool is not None:
                        await pool.aclose()

    # ------------------------------------------------------------------ running groups

    async def run_groups(self, groups: Iterable[GroupSpec], *, label: str = "episodes") -> list[GroupResult]:
        """Run every group, all under one task group, and return their results in order.

        Every group is checked (sources, factories, branch prefixes) before any
        starts. Returns after every step of these groups is committed. Reports
        its episodes as they end, and how many were solved, as the progress
        phase ``label`` (:mod:`dreamgym.core.progress`: silent unless listened to).

        Raises:
            ConfigError: A group cannot run with this runtime (see the message).
            StoreError: The store refused some of the records (they are logged), or
                stopped taking them for over ``drain_timeout_s``: finished episodes
                wait for a full buffer (backpressure) that long, then the run fails
                rather than go on without their records.
        """
        if self._task_group is None:
            raise ConfigError("the Runtime is not open; use `async with Runtime(...) as runtime`")
        planned = [await self._plan(spec) for spec in groups]
        results: list[GroupResult | None] = [None] * len(planned)
        failures, lost = self._writer.failures, self._lost_steps
        self.stats.run_started()
        unconfirmed = False
        run = anyio.CancelScope()  # cancelled when the store stops taking writes: the run fails at once
        self._runs.add(run)
        try:
            await self._store_tasks(planned)
            with run, progress(label, total=sum(group.spec.size for group in planned), unit="episodes") as phase:
                solved = _Solved(phase)
                async with anyio.create_task_group() as tg:
                    for index, group in enumerate(planned):
                        tg.start_soon(self._run_group_into, group, results, index, solved)
        finally:
            self._runs.discard(run)
            with anyio.move_on_after(self.config.drain_timeout_s, shield=True) as scope:
                await self._writer.barrier()
            unconfirmed = scope.cancelled_caught
            self.stats.run_ended()
        if self._lost_steps > lost or unconfirmed:
            raise StoreError(
                f"the store stopped taking writes (for over {self.config.drain_timeout_s:g} s, or its writer "
                f"ended; a stalled disk, another process holding its write lock): {self._lost_steps - lost} steps "
                "of this run were not stored and their episodes are cut 'store'"
                + ("; the last writes were not confirmed either" if unconfirmed else "")
            )
        if self._writer.failures > failures:
            refused = self._writer.failures - failures
            raise StoreError(f"the store refused {refused} write{'s' * (refused != 1)} of this run: "
                             f"{self._writer.first_error}")  # fmt: skip
        return [result for result in results if result is not None]

    async def _run_group_into(
        self, group: _Group, results: list[GroupResult | None], index: int, solved: _Solved
    ) -> None:
        results[index] = await self._run_group(group, solved)

    async def _run_group(self, group: _Group, solved: _Solved) -> GroupResult:
        rollouts: list[Rollout | None] = [None] * group.spec.size
        async with anyio.create_task_group() as tg:
            if group.source == "real":
                on_step = self._shadower(group, tg) if group.spec.shadow else None
                real_begin = self._real_begin(group)
                for index in range(group.spec.size):
                    tg.start_soon(
                        self._rollout_into, group, self._real_pool(), real_begin, on_step, rollouts, index, solved
                    )
            else:
                begin = await self._synthetic_begin(group)
                for index in range(group.spec.size):
                    tg.start_soon(
                        self._rollout_into, group, self._synthetic_pool(), begin, None, rollouts, index, solved
                    )
        done = tuple(rollout for rollout in rollouts if rollout is not None)
        result = GroupResult(
            group_id=group.group_id,
            task=group.spec.task,
            source=group.source,
            rollouts=done,
            consistent=consistent(tuple(rollout.episode for rollout in done)),
        )
        self.stats.record_group(result.consistent)
        if not result.consistent:
            log.warning("group %s of %s started from different pages; drop it", group.group_id, group.spec.task.task_id)
        return result

    def _real_begin(self, group: _Group) -> Begin[Environment]:
        async def begin(env: Environment) -> Observation:
            if self.reset_hook is not None:
                await self.reset_hook(group.spec.task)
            return await env.reset(group.spec.task, seed=group.seed)

        return begin

    async def _synthetic_begin(self, group: _Group) -> Begin[SyntheticEnvironment]:
        """Reset the simulator once (or take the branch's state) and fork every episode from there."""
        task, history = group.spec.task, group.history
        if group.prefix:
            first = group.prefix[-1].next_observation
        else:
            try:
                async with self._synthetic_pool().lease() as lease:
                    with anyio.fail_after(self.config.episode_deadline_s):
                        first = await lease.env.reset(task, seed=group.seed)
            except Exception as exc:  # every episode of the group records it
                failure = exc

                async def fail(env: SyntheticEnvironment) -> Observation:
                    raise failure

                return fail

        async def begin(env: SyntheticEnvironment) -> Observation:
            return env.start_from(task, first, seed=group.seed, history=history)

        return begin

    # ------------------------------------------------------------------ one episode

    async def _rollout_into(
        self,
        group: _Group,
        pool: EnvPool[E],
        begin: Begin[E],
        on_step: OnStep | None,
        rollouts: list[Rollout | None],
        index: int,
        solved: _Solved,
    ) -> None:
        rollouts[index] = rollout = await self._rollout(group, pool, begin, on_step)
        solved.count(rollout)

    async def _rollout(self, group: _Group, pool: EnvPool[E], begin: Begin[E], on_step: OnStep | None) -> Rollout:
        plan = EpisodePlan(
            task=group.spec.task,
            episode_id=self._episode_id(group),
            seed=group.seed,
            group_id=group.group_id,
            max_steps=group.max_steps,
            prefix=group.prefix,
        )
        steps: list[Step] = []
        outcome = _Outcome()
        async with pool.lease() as lease:
            outcome.started_at = time.time()
            self.stats.in_flight += 1
            try:
                await self._play(lease, begin, group, plan, steps, outcome, on_step)
            except anyio.get_cancelled_exc_class():
                outcome.cut = "cancelled"
                raise
            finally:
                self.stats.in_flight -= 1
                rollout = await self._record(group, plan, steps, outcome)
        return rollout

    async def _play(
        self,
        lease: Lease[E],
        begin: Begin[E],
        group: _Group,
        plan: EpisodePlan,
        steps: list[Step],
        outcome: _Outcome,
        on_step: OnStep | None,
    ) -> None:
        with anyio.move_on_after(self.config.episode_deadline_s) as deadline:
            try:
                observation = await begin(lease.env)
                outcome.initial_hash = observation_hash(observation)
                await play(lease.env, group.policy, plan, observation, steps, on_step)
            except Exception as exc:
                explained = isinstance(exc, (BackendError, ConfigError, StoreError))  # our own one-line errors
                log.warning("episode %s of %s failed: %s", plan.episode_id, plan.task.task_id, exc,
                            exc_info=not explained)  # fmt: skip
                lease.discard()
                outcome.fail(exc)
        if deadline.cancelled_caught:
            lease.discard()  # cut mid-step: the environment's state is unknown
            outcome.cut = "deadline"

    async def _record(self, group: _Group, plan: EpisodePlan, steps: list[Step], outcome: _Outcome) -> Rollout:
        """Finish the episode's records, count them and commit them (even while cancelled)."""
        final, episode = finish_episode(
            plan,
            steps,
            source=group.source,
            policy_id=group.policy.policy_id,
            started_at=outcome.started_at,
            initial_observation_hash=outcome.initial_hash,
            cut=outcome.cut,
            error=outcome.error,
        )
        self.stats.record_episode(episode, outcome.error_kind)
        if not await self._commit(Commit(steps=final, episodes=(episode,))):
            # not in the store: the trainer must not learn from it as if it were (outcome None)
            episode = msgspec.structs.replace(
                episode, truncated=True, truncation_reason="store", error="the store did not take its records"
            )
        return Rollout(episode=episode, steps=final)

    def _episode_id(self, group: _Group) -> str:
        if group.prefix and group.spec.branch is not None:
            return f"{group.spec.branch.episode_id}/branch{len(group.prefix)}/{uuid.uuid4().hex[:12]}"
        return uuid.uuid4().hex

    # ------------------------------------------------------------------ shadow mode

    def _shadower(self, group: _Group, tg: TaskGroup) -> OnStep:
        def on_step(step: Step, history: Sequence[Step]) -> None:
            pairs = tuple((before.observation, before.action) for before in history)
            tg.start_soon(self._shadow, group, step, pairs)

        return on_step

    async def _shadow(self, group: _Group, step: Step, history: tuple[tuple[Observation, Action], ...]) -> None:
        """Store the simulator's prediction of a real step beside it (a failed prediction is only counted)."""
        began = time.perf_counter()
        try:
            async with self._synthetic_pool().lease() as lease:
                # the leakage rule: not this step's own episode (committed already) nor its same-start siblings
                result = await lease.env.predict_step(
                    group.spec.task,
                    history,
                    step.observation,
                    step.action,
                    seed=step.seed,
                    exclude_task_seeds=((step.task_id, step.seed),),
                )
            predicted = shadow_step(step, result, time.perf_counter() - began)
        except Exception as exc:
            log.warning("shadow prediction of %s step %d failed: %s", step.episode_id, step.step_index, exc)
            self.stats.record_error(f"shadow:{type(exc).__name__}")
            return
        self.stats.record_shadow(step, predicted.reward, predicted.terminated, predicted.experience_model_id)
        await self._commit(Commit(steps=(predicted,)))

    # ------------------------------------------------------------------ storing

    async def _commit(self, item: Commit) -> bool:
        """Hand ``item`` to the writer, shielded: a cancelled episode's finished steps still go.

        Returns whether the writer took it.
        """
        with anyio.move_on_after(self.config.drain_timeout_s, shield=True) as scope:
            try:
                await self._writer.put(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.error("the store writer is gone; %d steps were not stored", len(item.steps))
                self.stats.record_error("store:writer_gone")
                self._lost_steps += len(item.steps)
                return False
        if scope.cancelled_caught:
            log.error("the store writer did not take %d steps within %g s", len(item.steps),
                      self.config.drain_timeout_s)  # fmt: skip
            self.stats.record_error("store:timeout")
            self._lost_steps += len(item.steps)
            for run in self._runs:  # the run fails now (see run_groups), not after every group waits it out
                run.cancel()
            return False
        return True

    async def _store_tasks(self, groups: Sequence[_Group]) -> None:
        new = {g.spec.task.task_id: g.spec.task for g in groups if g.spec.task.task_id not in self._stored_tasks}
        if new:
            self._stored_tasks.update(new)
            await self._commit(Commit(tasks=tuple(new.values())))

    # ------------------------------------------------------------------ planning

    async def _plan(self, spec: GroupSpec) -> _Group:
        source = self._source_of(spec)
        if source == "real":
            self._real_pool()
        else:
            self._synthetic_pool()
        if spec.shadow:
            self._synthetic_pool("shadow mode")
        prefix = await self._branch_prefix(spec) if spec.branch is not None else ()
        seed = spec.seed
        if prefix:
            seed = prefix[0].seed
        elif seed is None and source == "real":
            seed = random.randrange(2**31)  # one seed for the whole group, so its pages start alike
        max_steps = spec.task.max_steps or self.config.max_steps
        if len(prefix) >= max_steps:
            raise ConfigError(
                f"the branch replays {len(prefix)} steps but {spec.task.task_id} allows {max_steps}; "
                "branch earlier or raise the step limit"
            )
        return _Group(
            spec=spec,
            source=source,
            seed=seed,
            group_id=spec.group_id or f"{spec.task.task_id}/{seed}/{uuid.uuid4().hex[:8]}",
            policy=spec.policy or self.policy,
            max_steps=max_steps,
            prefix=prefix,
        )

    def _source_of(self, spec: GroupSpec) -> Source:
        if spec.task.generated or spec.branch is not None:
            return "synthetic"
        if spec.shadow:
            return "real"
        if spec.source is not None:
            return spec.source
        if self.chooser is not None:
            chosen = self.chooser.choose(spec.task, self._group_index)
            self._group_index += 1
            return chosen
        if self._real is None or self._synthetic is None:
            return "real" if self._real is not None else "synthetic"
        raise ConfigError(
            f"the group of {spec.task.task_id} names no source and the runtime has no chooser; "
            "set GroupSpec.source or pass chooser=RatioSource(...)"
        )

    async def _branch_prefix(self, spec: GroupSpec) -> tuple[Step, ...]:
        assert spec.branch is not None
        branch = spec.branch
        recorded = sorted(await self.store.episode_steps(branch.episode_id), key=lambda step: step.step_index)
        prefix = tuple(recorded[: branch.prefix_steps])
        problem = ""
        if len(prefix) < branch.prefix_steps:
            problem = f"has {len(recorded)} steps in the store, fewer than the {branch.prefix_steps} to replay"
        elif any(step.source != "real" for step in prefix):
            problem = "is not a real episode"
        elif prefix[0].task_id != spec.task.task_id:
            problem = f"is an episode of {prefix[0].task_id}, not of {spec.task.task_id}"
        elif prefix[-1].done:
            problem = f"ended at step {prefix[-1].step_index}: there is nothing to continue"
        elif spec.seed is not None and spec.seed != prefix[0].seed:
            problem = f"ran with seed {prefix[0].seed}, not {spec.seed}"
        if problem:
            raise ConfigError(f"cannot branch from episode {branch.episode_id}: it {problem}")
        return prefix

    def _real_pool(self) -> EnvPool[Environment]:
        if self._real is None:
            raise ConfigError("a real group needs real environments: pass real_env= to Runtime")
        return self._real

    def _synthetic_pool(self, what: str = "a synthetic group") -> EnvPool[SyntheticEnvironment]:
        if self._synthetic is None:
            raise ConfigError(f"{what} needs simulator environments: pass synthetic_env= to Runtime")
        return self._synthetic
