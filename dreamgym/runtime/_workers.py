"""Real episodes in Ray actors: remote environments whose browsers live in worker processes.

The policy, the runtime and the store's one writer stay in the driver.
:class:`RayWorkers` starts ``workers`` Ray actors; each opens its own real
environments (its browsers and sites, by ``open_envs``) in its own event loop,
so Playwright never leaves the loop that made it. :meth:`RayWorkers.env` makes
a :class:`RemoteEnv`, an ordinary :class:`~dreamgym.core.protocols.Environment`
whose ``reset`` and ``step`` run on an actor: give it to the
:class:`~dreamgym.runtime.Runtime` as ``real_env``, and every step comes back to
the driver and is committed there as before.

Episodes of one task from one seed (a group's episodes) go to one worker, so
they see the same first page (a worker's pages are served from its own
address); new (task, seed) pairs go round the live workers in turn.

A worker that dies (its process killed, its node lost) fails the calls in
flight on it: each of its episodes ends truncated, ``worker_lost`` (outcome
``None``: the trainer learns nothing from it), its finished steps are
committed like any cut episode's, the worker is replaced by a new actor, and
the run goes on.

Ray is optional (``pip install 'dreamgym[ray]'``): nothing here imports it
until a :class:`RayWorkers` is entered. On a cluster, every node needs dreamgym
and Chromium installed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio

from dreamgym.core.errors import BackendError, ConfigError, EnvironmentCheckError, WorkerLostError
from dreamgym.core.protocols import Environment, StepResult
from dreamgym.core.types import Action, Observation, Source, Task

__all__ = ["OpenEnvs", "RayWorkers", "RemoteEnv", "WorkerConfig"]

log = logging.getLogger(__name__)

OpenEnvs = Callable[[], AbstractAsyncContextManager[Callable[[], Environment]]]
"""Opens, in a worker's event loop, what makes that worker's real environments (its browsers, its sites), and
yields the factory. It travels to the workers by pickle: a module-level function or a ``functools.partial`` of
one (``dreamgym.jobs.open_browser_envs``)."""

_AFFINITY_SIZE = 10_000
"""(task, seed) pairs whose worker is remembered, most recent first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """How many rollout workers, and where.

    Example:
        >>> WorkerConfig(workers=4, address="ray://head:10001", cpus=1.0)
    """

    workers: int = 2
    """Ray actors, each with its own browsers."""
    address: str | None = None
    """A running Ray cluster (``"auto"``, ``"ray://host:10001"``); ``None`` joins the Ray this process already
    started, else starts a local one for the run (and stops it at the end)."""
    cpus: float = 0.5
    """CPUs each actor reserves from Ray (fractions allowed): its browsers' own processes are not counted."""
    max_replacements: int = 8
    """Workers that may die and be replaced in one run; past it a lost worker is not replaced, and once none is
    left every real episode fails (``backend``) instead of the run waiting forever."""
    start_timeout_s: float = 120.0
    """How long a new actor may take to start and open its environments."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"WorkerConfig.workers must be >= 1, got {self.workers}")
        if self.cpus <= 0:
            raise ConfigError(f"WorkerConfig.cpus must be > 0, got {self.cpus}")
        if self.max_replacements < 0 or self.start_timeout_s <= 0:
            raise ConfigError("WorkerConfig.max_replacements must be >= 0 and start_timeout_s > 0")


class EnvHost:
    """The actor: hosts real environments made by ``open_envs`` in its own event loop, by handle."""

    def __init__(self, open_envs: OpenEnvs) -> None:
        self._open_envs = open_envs
        self._stack: AsyncExitStack | None = None
        self._factory: Callable[[], Environment] | None = None
        self._envs: dict[int, Environment] = {}
        self._next = 0
        self._opening = asyncio.Lock()

    async def ready(self) -> int:
        """Open the environments' resources (once); returns the worker's process id."""
        async with self._opening:
            if self._factory is None:
                stack = AsyncExitStack()
                self._factory = await stack.enter_async_context(self._open_envs())
                self._stack = stack
        return os.getpid()

    async def open(self) -> int:
        """A new environment; returns its handle."""
        await self.ready()
        assert self._factory is not None
        self._next += 1
        self._envs[self._next] = self._factory()
        return self._next

    async def reset(self, handle: int, task: Task, seed: int | None) -> Observation:
        return await self._env(handle).reset(task, seed=seed)

    async def step(self, handle: int, action: Action) -> StepResult:
        return await self._env(handle).step(action)

    async def close(self, handle: int) -> None:
        env = self._envs.pop(handle, None)
        if env is not None:
            await env.aclose()

    async def shutdown(self) -> None:
        """Close every environment and what opened them."""
        while self._envs:
            _, env = self._envs.popitem()
            try:
                await env.aclose()
            except Exception:
                log.warning("closing a worker's environment failed", exc_info=True)
        stack, self._stack, self._factory = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    def _env(self, handle: int) -> Environment:
        env = self._envs.get(handle)
        if env is None:
            raise EnvironmentCheckError(f"the worker holds no environment {handle} (closed, or opened elsewhere)")
        return env


class _Worker:
    """One slot of the pool: its actor now, and how many actors it has had."""

    def __init__(self, index: int, actor: Any, generation: int) -> None:
        self.index = index
        self.actor = actor
        self.generation = generation
        self.pid = 0
        self.alive = True

    @property
    def key(self) -> tuple[int, int]:
        return self.index, self.generation


class RayWorkers:
    """``config.workers`` Ray actors hosting real environments; :meth:`env` makes the driver's side of one.

    Use it as an async context manager, in the event loop the runtime runs in.

    Args:
        open_envs: Opens a worker's environment factory (:data:`OpenEnvs`); pickled to each worker.
        config: How many workers, where, and with how many CPUs each.

    Example:
        >>> async with RayWorkers(functools.partial(open_browser_envs), WorkerConfig(workers=2)) as workers:
        ...     async with Runtime(policy=policy, store=store, real_env=workers.env) as runtime:
        ...         results = await runtime.run_groups(groups)
    """

    def __init__(self, open_envs: OpenEnvs, config: WorkerConfig | None = None) -> None:
        self.config = config or WorkerConfig()
        self._open_envs = open_envs
        self._workers: list[_Worker] = []
        self._affinity: OrderedDict[tuple[str, int | None], int] = OrderedDict()
        self._turn = 0
        self._started_ray = False
        self._actor_class: Any = None
        self._replacing: dict[int, anyio.Event] = {}
        self.replaced = 0
        """Workers that died and were replaced (the episodes they ended say ``worker_lost``)."""

    async def __aenter__(self) -> RayWorkers:
        ray = _import_ray()
        if not ray.is_initialized() and self.config.address not in (None, "auto"):
            await _check_reachable(self.config.address)  # else Ray retries an unreachable address for minutes
        if not ray.is_initialized():
            # a local Ray of our own without its dashboard; a cluster's own settings are its business
            where = {"include_dashboard": False} if self.config.address is None else {"address": self.config.address}
            try:
                ray.init(**where, log_to_driver=True, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                place = self.config.address or "a local Ray"
                raise BackendError(f"could not start or reach {place}: {_first_line(exc)}") from exc
            self._started_ray = True
        self._actor_class = ray.remote(num_cpus=self.config.cpus, max_restarts=0)(EnvHost)
        try:
            self._workers = [self._start(index, 0) for index in range(self.config.workers)]
            with anyio.fail_after(self.config.start_timeout_s):
                for worker in self._workers:
                    worker.pid = await worker.actor.ready.remote()
        except BaseException:
            await self.aclose()
            raise
        log.info("real episodes run on %d Ray rollout workers (pids %s)", len(self._workers), self.pids)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def pids(self) -> list[int]:
        """Each live worker's process id, by slot (0 where it is being replaced)."""
        return [worker.pid if worker.alive else 0 for worker in self._workers]

    def env(self) -> RemoteEnv:
        """A real environment whose episodes run on the workers (the runtime's ``real_env`` factory)."""
        return RemoteEnv(self)

    async def aclose(self) -> None:
        """Close every worker's environments and stop the actors (and the Ray this pool started)."""
        workers, self._workers = self._workers, []
        if workers:
            ray = _import_ray()
            with anyio.move_on_after(30, shield=True):
                for worker in workers:
                    if worker.alive:
                        try:
                            await worker.actor.shutdown.remote()
                        except Exception as exc:
                            log.warning("worker %d did not shut down cleanly: %s", worker.index, exc)
            for worker in workers:
                _kill(ray, worker)
        if self._started_ray:
            self._started_ray = False
            _import_ray().shutdown()

    # ------------------------------------------------------------------ routing and replacement

    async def worker_for(self, task: Task, seed: int | None) -> _Worker:
        """The worker that runs (task, seed): the one that ran it last while it lives, else the next in turn."""
        key = (task.task_id, seed)
        index = self._affinity.get(key)
        if index is not None:
            self._affinity.move_to_end(key)
            if index in self._replacing:
                await self._replacing[index].wait()
            worker = self._workers[index]
            if worker.alive:
                return worker
        worker = await self._next_live()
        self._affinity[key] = worker.index
        while len(self._affinity) > _AFFINITY_SIZE:
            self._affinity.popitem(last=False)
        return worker

    async def _next_live(self) -> _Worker:
        if not self._workers:
            raise BackendError("the rollout workers are closed")
        for _ in range(len(self._workers)):
            self._turn = (self._turn + 1) % len(self._workers)
            worker = self._workers[self._turn]
            if worker.alive:
                return worker
        if self._replacing:
            event = next(iter(self._replacing.values()))
            await event.wait()
            return await self._next_live()
        raise BackendError(
            f"every rollout worker died and {self.replaced} were replaced already "
            f"(WorkerConfig.max_replacements={self.config.max_replacements})"
        )

    async def lost(self, worker: _Worker) -> None:
        """``worker``'s actor died: start another in its slot (once, however many of its calls failed)."""
        if not worker.alive or self._workers[worker.index] is not worker:
            return  # another call saw it first
        worker.alive = False
        log.warning("rollout worker %d (pid %d) died; its episodes end as worker_lost", worker.index, worker.pid)
        _kill(_import_ray(), worker)
        if self.replaced >= self.config.max_replacements:
            log.error("not replacing worker %d: %d workers were replaced already", worker.index, self.replaced)
            return
        done = self._replacing[worker.index] = anyio.Event()
        self.replaced += 1
        try:
            fresh = self._start(worker.index, worker.generation + 1)
            with anyio.fail_after(self.config.start_timeout_s):
                fresh.pid = await fresh.actor.ready.remote()
            self._workers[worker.index] = fresh
            log.warning("rollout worker %d replaced (pid %d)", worker.index, fresh.pid)
        except Exception as exc:
            log.error("could not replace rollout worker %d: %s", worker.index, exc)
        finally:
            del self._replacing[worker.index]
            done.set()

    def _start(self, index: int, generation: int) -> _Worker:
        actor = self._actor_class.remote(self._open_envs)
        return _Worker(index, actor, generation)


class RemoteEnv:
    """The driver's side of a real environment on a Ray worker (:meth:`RayWorkers.env`).

    Each reset goes to the worker that :meth:`RayWorkers.worker_for` names; the
    environment keeps one remote environment on each worker it has used, so a
    reused environment keeps its page there. A call on a worker that died
    raises :class:`~dreamgym.core.errors.WorkerLostError`; an error the remote
    environment raised is raised here as itself.
    """

    source: Source = "real"

    def __init__(self, workers: RayWorkers) -> None:
        self._workers = workers
        self._handles: dict[tuple[int, int], int] = {}
        self._worker: _Worker | None = None

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        worker = await self._workers.worker_for(task, seed)
        self._worker = worker
        handle = self._handles.get(worker.key)
        if handle is None:
            handle = self._handles[worker.key] = await self._call(worker, lambda: worker.actor.open.remote())
        observation: Observation = await self._call(worker, lambda: worker.actor.reset.remote(handle, task, seed))
        return observation

    async def step(self, action: Action) -> StepResult:
        worker = self._worker
        if worker is None:
            raise EnvironmentCheckError("step() before reset()")
        handle = self._handles[worker.key]
        result: StepResult = await self._call(worker, lambda: worker.actor.step.remote(handle, action))
        return result

    async def aclose(self) -> None:
        handles, self._handles, self._worker = self._handles, {}, None
        live = {worker.key: worker for worker in self._workers._workers if worker.alive}
        for key, handle in handles.items():
            worker = live.get(key)
            if worker is None:
                continue
            try:
                await worker.actor.close.remote(handle)
            except Exception as exc:  # a worker dying now loses nothing: its environment went with it
                log.info("closing a remote environment on worker %d: %s", worker.index, exc)

    async def _call(self, worker: _Worker, call: Callable[[], Awaitable[Any]]) -> Any:
        ray = _import_ray()
        if not worker.alive:
            raise WorkerLostError(f"rollout worker {worker.index} died")
        ref = call()
        try:
            return await ref
        except ray.exceptions.RayActorError as exc:
            await self._workers.lost(worker)
            why = _first_line(exc)
            raise WorkerLostError(f"rollout worker {worker.index} (pid {worker.pid}) died: {why}") from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception):
                raise cause from None
            raise BackendError(f"rollout worker {worker.index}: {_first_line(exc)}") from None
        except BaseException:
            try:
                ray.cancel(ref)  # cancelled here (a deadline): stop the remote call too
            except Exception as exc:
                log.info("cancelling a call on worker %d: %s", worker.index, exc)
            raise


async def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise :class:`BackendError` at once when nothing listens at a cluster's ``host:port`` (``ray://`` too)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"WorkerConfig.address must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT', not {address!r}")
    try:
        with anyio.fail_after(timeout_s):
            stream = await anyio.connect_tcp(host, int(port))
        await stream.aclose()
    except (OSError, TimeoutError) as exc:
        raise BackendError(f"no Ray cluster answers at {address}: {_first_line(exc)}") from None


def _kill(ray: Any, worker: _Worker) -> None:
    try:
        ray.kill(worker.actor, no_restart=True)
    except Exception as exc:  # gone already
        log.info("stopping worker %d: %s", worker.index, exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("rollout workers need Ray: pip install 'dreamgym[ray]'") from exc
    return ray
