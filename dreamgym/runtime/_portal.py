"""``RuntimePortal``: the runtime for synchronous callers (TRL's trainer calls its rollout hook synchronously).

One ``anyio.from_thread`` blocking portal runs one event loop in a thread
for the whole run. The caller's ``build`` function makes an async context
manager that opens every resource (store, browser pool, model clients) and
yields a :class:`~dreamgym.runtime.Runtime`; it is entered inside that loop,
so Playwright objects belong to the loop that uses them, and every
:meth:`RuntimePortal.run_groups` call reuses them. Closing the portal exits
the context manager in the loop, then stops the loop.

If the calling thread is interrupted (Ctrl-C) during ``run_groups``, the run
is cancelled in the loop and its finished steps are committed before the
interrupt propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, ExitStack
from types import TracebackType
from typing import Self, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from dreamgym.core.errors import ConfigError
from dreamgym.runtime._groups import GroupResult, GroupSpec
from dreamgym.runtime._runtime import Runtime
from dreamgym.runtime._stats import RuntimeSnapshot

__all__ = ["RuntimePortal"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Run:
    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.ended = anyio.Event()


class RuntimePortal:
    """A :class:`~dreamgym.runtime.Runtime` in its own event loop, driven from synchronous code.

    Args:
        build: Called once, in the loop; returns an async context manager that
            opens the resources and yields the runtime.

    Example:
        >>> @asynccontextmanager
        ... async def build():
        ...     async with LmdbReplayStore(path) as store, BrowserPool() as pool:
        ...         async with Runtime(policy=policy, store=store, real_env=lambda: BrowserEnv(pool)) as runtime:
        ...             yield runtime
        >>> with RuntimePortal(build) as portal:
        ...     results = portal.run_groups([GroupSpec(task=task, size=4, seed=0)])
    """

    def __init__(self, build: Callable[[], AbstractAsyncContextManager[Runtime]]) -> None:
        self._build = build
        self._stack: ExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._runtime: Runtime | None = None
        self._runs: set[_Run] = set()

    def __enter__(self) -> Self:
        if self._stack is not None:
            raise ConfigError("this RuntimePortal is already open; enter it once")
        stack = ExitStack()
        try:
            portal = stack.enter_context(start_blocking_portal(backend="asyncio"))
            manager = portal.call(self._build)
            runtime = stack.enter_context(portal.wrap_async_context_manager(manager))
        except BaseException:
            stack.close()
            raise
        self._stack, self._portal, self._runtime = stack, portal, runtime
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the runtime and its resources in the loop, then stop the loop. Calling it again does nothing."""
        stack, self._stack = self._stack, None
        self._portal = self._runtime = None
        if stack is not None:
            stack.close()

    @property
    def runtime(self) -> Runtime:
        """The runtime. It lives in the portal's loop: call its coroutines through :meth:`call`."""
        if self._runtime is None:
            raise ConfigError("the RuntimePortal is not open; use `with RuntimePortal(build) as portal`")
        return self._runtime

    def run_groups(self, groups: Iterable[GroupSpec], *, label: str = "episodes") -> list[GroupResult]:
        """:meth:`Runtime.run_groups`, from this thread; blocks until the groups are done and committed."""
        portal = self._require_portal()
        future = portal.start_task_soon(self._run_groups, list(groups), label)
        try:
            return future.result()
        except BaseException:
            if not future.done():  # interrupted here: stop the run there, with its steps committed
                portal.call(self._cancel_runs)
            raise

    def snapshot(self) -> RuntimeSnapshot:
        """The runtime's counters, read in its loop (safe from any thread, also while a run is going)."""
        return self._require_portal().call(self.runtime.stats.snapshot)

    def call(self, func: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run a coroutine function in the runtime's loop (store reads, stats) and return its result."""
        return self._require_portal().call(func, *args)

    async def _run_groups(self, groups: list[GroupSpec], label: str) -> list[GroupResult]:
        run = _Run()
        self._runs.add(run)
        try:
            with run.scope:
                return await self.runtime.run_groups(groups, label=label)
            return []  # cancelled by _cancel_runs: nobody waits for the result
        finally:
            self._runs.discard(run)
            run.ended.set()

    async def _cancel_runs(self) -> None:
        for run in list(self._runs):
            run.scope.cancel()
            await run.ended.wait()

    def _require_portal(self) -> BlockingPortal:
        if self._portal is None:
            raise ConfigError("the RuntimePortal is not open; use `with RuntimePortal(build) as portal`")
        return self._portal
