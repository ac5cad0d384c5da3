"""The environments the runtime holds: what it needs of a simulator, and pools of idle environments."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Generic, Protocol, TypeVar, runtime_checkable

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Environment, StepResult
from dreamgym.core.types import Action, Observation, Source, Task

__all__ = ["EnvPool", "Lease", "ResetHook", "SyntheticEnvironment"]

log = logging.getLogger(__name__)

ResetHook = Callable[[Task], Awaitable[None]]
"""Awaited before each real episode's reset, e.g. to restore a stateful site's database."""

E = TypeVar("E", bound=Environment)


@runtime_checkable
class SyntheticEnvironment(Environment, Protocol):
    """An environment the runtime can fork, branch and consult: ``dreamgym.simulator.SimulatedEnv`` is one."""

    def start_from(
        self,
        task: Task,
        observation: Observation,
        *,
        seed: int | None = None,
        history: Sequence[tuple[Observation, Action]] = (),
    ) -> Observation:
        """Start an episode at ``observation``, after ``history``."""
        ...

    async def predict_step(
        self,
        task: Task,
        history: Sequence[tuple[Observation, Action]],
        observation: Observation,
        action: Action,
        *,
        seed: int | None = None,
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> StepResult:
        """What ``action`` does from ``observation``, leaving any episode in progress alone; retrieval (if
        any) skips ``exclude_task_seeds`` (a shadowed real step's own task and seed)."""
        ...


class Lease(Generic[E]):
    """An environment borrowed from an :class:`EnvPool`; :meth:`discard` keeps it from being reused."""

    def __init__(self, env: E) -> None:
        self.env = env
        self.discarded = False

    def discard(self) -> None:
        """Close the environment when the lease ends (after an error or a cut, its state is unknown)."""
        self.discarded = True


class EnvPool(Generic[E]):
    """At most ``limit`` environments in use at once, made by ``factory`` and reused when returned intact.

    Reuse matters on the real side: a browser environment keeps its context,
    and a reset on the same page is several times faster than a new one.

    Args:
        factory: Makes a new environment (called in the event loop).
        limit: Environments in use at once.
        source: The source the factory's environments must have.
    """

    def __init__(self, factory: Callable[[], E], limit: int, source: Source) -> None:
        self._factory = factory
        self._limiter = anyio.CapacityLimiter(limit)
        self._idle: list[E] = []
        self.source = source
        self.created = 0
        """Environments made so far."""

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease[E]]:
        """Borrow an environment, waiting while ``limit`` are in use.

        The environment is closed instead of returned when the lease is
        discarded or its block raises (or is cancelled).
        """
        async with self._limiter:
            lease = Lease(self._idle.pop() if self._idle else self._create())
            try:
                yield lease
            except BaseException:
                lease.discard()
                raise
            finally:
                if lease.discarded:
                    await close_quietly(lease.env)
                else:
                    self._idle.append(lease.env)

    def _create(self) -> E:
        env = self._factory()
        if env.source != self.source:
            raise ConfigError(
                f"the {self.source} environment factory made an environment whose source is {env.source!r}; "
                f"pass a factory of {self.source} environments"
            )
        self.created += 1
        return env

    async def aclose(self) -> None:
        """Close the idle environments (those in use close when their leases end)."""
        while self._idle:
            await close_quietly(self._idle.pop())


async def close_quietly(env: Environment) -> None:
    """Close ``env`` even while cancelled, logging (not raising) what closing raises."""
    with anyio.move_on_after(15, shield=True):
        try:
            await env.aclose()
        except Exception:
            log.warning("closing a %s environment failed", env.source, exc_info=True)
