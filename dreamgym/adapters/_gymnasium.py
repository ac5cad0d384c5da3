"""``WebEnv``: any dreamgym environment, real or simulated, as a synchronous ``gymnasium.Env``.

dreamgym's environments are async, and a real one owns Playwright objects that
must stay on the event loop that made them. So a ``WebEnv`` owns one ``anyio``
blocking portal (an event loop in a thread, as
:class:`~dreamgym.runtime.RuntimePortal` does), opens the environment inside
it, drives ``reset`` and ``step`` through it, and closes both in ``close()``.
An env its user forgets to close is closed when it is garbage-collected or the
interpreter exits (a portal left open would hang the exit).

Observations are dicts of four strings (``goal``, ``state``, ``url``,
``last_action_error``); actions are strings in dreamgym's action grammar
(``click [e5]``), or :class:`~dreamgym.core.types.Action` records that an
adapter has already translated from another framework's actions. Text that is
not an action is data, not an error: it comes back as ``last_action_error``.
``info`` holds only what two identical runs share (task, seed, step, the
action as parsed, the truncation reason), never timings or ids, so equal runs
give equal infos.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from anyio.from_thread import BlockingPortal, start_blocking_portal
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError, ResetNeeded

from dreamgym.core.actions import try_parse_action
from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import Environment
from dreamgym.core.types import Action, Observation, Task

__all__ = ["MAX_ACTION_CHARS", "MAX_TEXT_CHARS", "OBSERVATION_KEYS", "OpenEnvironment", "UnicodeText", "WebEnv"]

MAX_TEXT_CHARS = 1_000_000
"""Longest string an observation field may hold (a real page's state is capped far below it)."""
MAX_ACTION_CHARS = 10_000
"""Longest action string."""
OBSERVATION_KEYS = ("goal", "state", "url", "last_action_error")
"""The keys of every observation, in order."""

OpenEnvironment = Callable[[], AbstractAsyncContextManager[Environment]]
"""Makes, in the portal's event loop, an async context manager that opens a dreamgym environment
(and whatever it needs: browsers, a store, a model) and yields it."""


class UnicodeText(spaces.Text):
    """A text space that holds any Unicode string whose length is within bounds.

    Gymnasium's ``Text`` holds only strings of its charset (letters and digits
    by default), which page states and goals never are. This space accepts
    every ``str`` (as BrowserGym's does); ``sample()`` still draws from the
    letters and digits, which is all a random action needs to be.

    Example:
        >>> UnicodeText(100).contains('[e1] button "Envoyer ✓"')
        True
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, seed=seed)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string of an allowed length (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )


@dataclass(slots=True, kw_only=True)
class _Episode:
    task: Task
    seed: int
    observation: Observation
    steps: int = 0


class WebEnv(gymnasium.Env[dict[str, Any], str]):
    """A dreamgym :class:`~dreamgym.core.protocols.Environment`, real or simulated, as a ``gymnasium.Env``.

    Args:
        open_env: Called once in the portal's event loop; returns an async
            context manager that opens the environment and yields it
            (:data:`OpenEnvironment`).
        tasks: The tasks ``reset`` draws from when its options name none.
        max_steps: Steps before an episode is truncated (``step_limit``).
        render_mode: ``"ansi"`` (``render()`` returns the page as text) or ``None``.

    Raises:
        ConfigError: No tasks, ``max_steps`` below 1, or an unknown render mode.

    Example:
        >>> env = WebEnv(open_browser_env, [site.task("click-button")], max_steps=10)
        >>> observation, info = env.reset(seed=0)
        >>> observation, reward, terminated, truncated, info = env.step('click [e5]')
        >>> env.close()
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012  (as gymnasium.Env declares it)

    def __init__(
        self, open_env: OpenEnvironment, tasks: Sequence[Task], *, max_steps: int = 30, render_mode: str | None = None
    ) -> None:
        if not tasks:
            raise ConfigError("WebEnv needs at least one task to draw from")
        if max_steps < 1:
            raise ConfigError(f"WebEnv.max_steps must be >= 1, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, not {render_mode!r}"
            )
        self.tasks = tuple(tasks)
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = spaces.Dict({key: UnicodeText(MAX_TEXT_CHARS) for key in OBSERVATION_KEYS})
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self._tasks_by_id = {task.task_id: task for task in self.tasks}
        self._episode: _Episode | None = None
        self._portal, self._env, stack = _open(open_env)
        self._close = weakref.finalize(self, stack.close)  # also at exit: an open portal would hang it

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Start an episode of ``options["task"]`` (a task id or a :class:`Task`), else of a task drawn.

        Without ``seed``, the episode's seed is drawn from ``np_random``, so
        ``reset(seed=s)`` followed by ``reset()`` repeats.

        Raises:
            ConfigError: The options name an unknown task or hold another key.
            BackendError: The environment could not start the task.
            ClosedEnvironmentError: ``close()`` was called.
        """
        if not self._close.alive:
            raise ClosedEnvironmentError("this WebEnv is closed; make a new one")
        super().reset(seed=seed)
        task = self._choose_task(options or {})
        episode_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        observation = self._portal.call(functools.partial(self._env.reset, task, seed=episode_seed))
        self._episode = _Episode(task=task, seed=episode_seed, observation=observation)
        return self._observation(observation), self._info()

    def step(self, action: str | Action) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        """Carry out one action string; text that is not an action comes back as ``last_action_error``.

        An :class:`~dreamgym.core.types.Action` is carried out as it is: adapters
        that translate another framework's actions (:func:`from_browsergym`) hand
        them over parsed, so that their own ``invalid`` actions keep their error.

        Raises:
            ResetNeeded: ``reset`` was never called.
            ConfigError: ``action`` is neither a string nor an ``Action``.
        """
        episode = self._episode
        if episode is None:
            raise ResetNeeded("call reset() before step()")
        if isinstance(action, Action):
            parsed = action
        elif isinstance(action, str):
            parsed = try_parse_action(action)
        else:
            raise ConfigError(f"WebEnv actions are strings such as 'click [e5]', not {type(action).__name__}")
        result = self._portal.call(self._env.step, parsed)
        episode.steps += 1
        episode.observation = result.observation
        truncated, reason = result.truncated, result.truncation_reason
        if not (result.terminated or truncated) and episode.steps >= self.max_steps:
            truncated, reason = True, "step_limit"
        info = {**self._info(), "step": episode.steps, "action": str(parsed), "truncation_reason": reason}
        return self._observation(result.observation), float(result.reward), bool(result.terminated), truncated, info

    @property
    def last_observation(self) -> Observation:
        """The dreamgym :class:`~dreamgym.core.types.Observation` behind the latest observation dict, with
        what the dict leaves out (tabs, the focused element); adapters build their own observations from it.

        Raises:
            ResetNeeded: ``reset`` was never called.
        """
        if self._episode is None:
            raise ResetNeeded("call reset() first")
        return self._episode.observation

    def render(self) -> str | None:
        """With ``render_mode="ansi"``: the goal, the URL, the last action's error and the page state, as text.

        Raises:
            ResetNeeded: ``reset`` was never called.
        """
        if self.render_mode is None:
            return None
        if self._episode is None:
            raise ResetNeeded("call reset() before render()")
        observation = self._observation(self._episode.observation)
        header = [f"{key}: {observation[key]}" for key in ("goal", "url", "last_action_error") if observation[key]]
        return "\n".join([*header, "", observation["state"]])

    def close(self) -> None:
        """Close the environment and its resources, then the portal. Calling it again does nothing."""
        self._episode = None
        self._close()
        super().close()

    def _choose_task(self, options: Mapping[str, Any]) -> Task:
        unknown = set(options) - {"task"}
        if unknown:
            raise ConfigError(f"WebEnv.reset takes the option 'task' only, not {sorted(unknown)}")
        chosen = options.get("task")
        if chosen is None:
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if isinstance(chosen, Task):
            return chosen
        if isinstance(chosen, str):
            task = self._tasks_by_id.get(chosen)
            if task is not None:
                return task
            known = sorted(self._tasks_by_id)
            listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
            raise ConfigError(f"no task {chosen!r} in this env; known: {listed} (or pass a Task)")
        raise ConfigError(f"options['task'] must be a task id or a Task, not {type(chosen).__name__}")

    def _observation(self, observation: Observation) -> dict[str, str]:
        goal = observation.goal or (self._episode.task.instruction if self._episode else "")
        return {
            "goal": goal,
            "state": observation.state,
            "url": observation.url,
            "last_action_error": observation.last_action_error,
        }

    def _info(self) -> dict[str, Any]:
        episode = self._episode
        if episode is None:
            raise ResetNeeded("call reset() first")
        return {"task_id": episode.task.task_id, "seed": episode.seed, "source": self._env.source}


def _open(open_env: OpenEnvironment) -> tuple[BlockingPortal, Environment, ExitStack]:
    """Start a portal and open the environment in its loop; the stack closes both, environment first."""
    stack = ExitStack()
    try:
        portal = stack.enter_context(start_blocking_portal(backend="asyncio"))
        env = stack.enter_context(portal.wrap_async_context_manager(portal.call(open_env)))
    except BaseException:
        stack.close()
        raise
    return portal, env, stack
