"""The registered Gymnasium ids: MiniWoB++ tasks in real Chromium, and in a simulator.

``dreamgym/miniwob.<task>-v0`` runs the task in headless Chromium on pages
served from 127.0.0.1; ``dreamgym/sim.miniwob.<task>-v0`` runs it in a
simulator over an experience model, whose directory is the ``model=`` make
kwarg (``store=``, optional, is a replay store with real first pages and the
transitions the model retrieves). :func:`register_envs` registers both for
every text-solvable task with string entry points, so registering imports
neither a browser nor torch; ``import dreamgym`` calls it.

A seeded MiniWoB++ episode repeats exactly (the dated tasks aside, which are
registered nondeterministic), and so does the simulator with its greedy
decoding and seeded retries.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import gymnasium

from dreamgym.adapters._gymnasium import WebEnv
from dreamgym.bridge.miniwob import NONDETERMINISTIC, miniwob_tasks, text_tasks
from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Environment, ReplayStore

if TYPE_CHECKING:
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import ServedModel

__all__ = ["miniwob_env", "register_envs", "simulated_miniwob_env"]

log = logging.getLogger(__name__)


def register_envs() -> list[str]:
    """Register ``dreamgym/miniwob.<task>-v0`` and ``dreamgym/sim.miniwob.<task>-v0`` for every
    text-solvable MiniWoB++ task, and the text worlds' ids (:func:`register_text_world_envs`); returns the
    ids (ids already registered are left as they are).

    Example:
        >>> import dreamgym, gymnasium
        >>> env = gymnasium.make("dreamgym/miniwob.click-button-v0")
    """
    from dreamgym.adapters._textworld import register_text_world_envs

    ids = register_text_world_envs()
    try:
        names = text_tasks()
    except ConfigError as exc:  # the miniwob package is missing: nothing to register
        log.debug("no MiniWoB++ ids registered: %s", exc)
        return ids
    for name in names:
        ids.append(_register(f"dreamgym/miniwob.{name}-v0", "miniwob_env", name, name in NONDETERMINISTIC))
        ids.append(_register(f"dreamgym/sim.miniwob.{name}-v0", "simulated_miniwob_env", name, False))
    return ids


def _register(env_id: str, factory: str, task: str, nondeterministic: bool) -> str:
    if env_id not in gymnasium.registry:
        gymnasium.register(
            env_id, entry_point=f"dreamgym.adapters:{factory}", nondeterministic=nondeterministic, kwargs={"task": task}
        )
    return env_id


def miniwob_env(task: str, *, max_steps: int = 30, render_mode: str | None = None) -> WebEnv:
    """The MiniWoB++ task ``task`` in headless Chromium (``dreamgym/miniwob.<task>-v0``).

    The env runs its own page server and one Chromium process, closed by ``close()``.

    Raises:
        ConfigError: No such task, or one the text action space cannot solve.
    """
    return WebEnv(_open_browser_env, miniwob_tasks([task], max_steps), max_steps=max_steps, render_mode=render_mode)


def simulated_miniwob_env(
    task: str,
    *,
    model: str | Path | ServedModel | None = None,
    store: str | Path | None = None,
    max_steps: int = 30,
    render_mode: str | None = None,
) -> WebEnv:
    """The MiniWoB++ task ``task`` in a simulator (``dreamgym/sim.miniwob.<task>-v0``).

    Args:
        task: The MiniWoB++ task name.
        model: The experience model: a directory ``dreamgym sim train`` wrote,
            or a :class:`~dreamgym.simulator.ServedModel`.
        store: A replay store directory, opened read-only: episodes start on
            its real first pages of the task and the model retrieves its real
            transitions. Without one the model writes every first page.
        max_steps: Steps before an episode is truncated.
        render_mode: ``"ansi"`` or ``None``.

    Raises:
        ConfigError: No model given, no model in its directory, or no such task.
        StorePathError: No store at ``store``.
    """
    if model is None:
        raise ConfigError(
            f"dreamgym/sim.miniwob.{task}-v0 needs an experience model: "
            f"gymnasium.make('dreamgym/sim.miniwob.{task}-v0', model='path/to/model', store='path/to/store')"
        )
    tasks = miniwob_tasks([task], max_steps)
    store_path = Path(store).expanduser() if store is not None else None
    open_env = functools.partial(_open_simulator, model, store_path)
    return WebEnv(open_env, tasks, max_steps=max_steps, render_mode=render_mode)


@asynccontextmanager
async def _open_browser_env() -> AsyncIterator[Environment]:
    from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool, MiniWobSite

    async with AsyncExitStack() as stack:
        site = MiniWobSite()
        stack.callback(site.close)
        pool = await stack.enter_async_context(BrowserPool(BrowserConfig(processes=1, max_contexts=1)))
        env = BrowserEnv(pool, sites=[site])
        stack.push_async_callback(env.aclose)
        yield env


@asynccontextmanager
async def _open_simulator(model: str | Path | ServedModel, store_path: Path | None) -> AsyncIterator[Environment]:
    from dreamgym.simulator import SimulatedEnv, SimulatorConfig, load_experience_model

    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(_shared_store(store_path)) if store_path is not None else None
        # No store for the model: its call cache would write to a store opened read-only.
        experience_model = await anyio.to_thread.run_sync(load_experience_model, model)
        stack.push_async_callback(experience_model.backend.aclose)
        neighbours = experience_model.config.template.neighbours if store is not None else 0
        env = SimulatedEnv(experience_model, store=store, config=SimulatorConfig(neighbours=neighbours))
        stack.push_async_callback(env.aclose)
        yield env


_stores: dict[Path, tuple[LmdbReplayStore, int]] = {}
_stores_lock = threading.Lock()


@asynccontextmanager
async def _shared_store(path: Path) -> AsyncIterator[ReplayStore]:
    """The store at ``path``, opened read-only once per process and shared by every env on it.

    LMDB forbids opening one store twice in a process, yet Gymnasium opens
    several copies of an env at once (``check_env``, ``SyncVectorEnv``). A
    read-only store holds nothing tied to an event loop (its locks are
    threads' locks, its work goes to worker threads), so each env's loop can use it.
    """
    from dreamgym.replay import LmdbReplayStore

    key = path.resolve()
    with _stores_lock:  # held while opening, so a second env waits for the first's open store
        store, users = _stores.get(key) or (None, 0)
        if store is None:
            store = LmdbReplayStore(key, readonly=True)
            await store.__aenter__()
        _stores[key] = (store, users + 1)
    try:
        yield store
    finally:
        with _stores_lock:
            store, users = _stores.pop(key)
            if users > 1:
                _stores[key] = (store, users - 1)
            else:  # under the lock, so no env reopens the store before it is closed (a reader closes at once)
                await store.aclose()
