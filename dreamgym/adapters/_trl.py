"""dreamgym environments for TRL's ``GRPOTrainer(environment_factory=...)``.

TRL makes one environment object per rollout, calls its ``reset(**row)`` with
the dataset row's fields before generating, lets the model call the object's
public methods as tools, and scores the rollout with ``get_reward()``.
:class:`TRLWebEnvironment` is such an object over a :class:`WebEnv`, real or
simulated: its tools are dreamgym's actions, one method per builder of
:mod:`dreamgym.core.actions` and named after it, each returning the page the
action led to as text. Every public method of the class is a tool to TRL,
which is why closing lives in :class:`TRLEnvironmentFactory`, the callable
handed to TRL, which keeps every environment it made and closes them all.

A tool's arguments go through the same strict parser as a text policy's
action (``click`` with ``element="e5"`` is ``click [e5]``), so an argument the
grammar rejects is data, not an exception: the environment answers it with
``last_action_error`` like any other bad action.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dreamgym.adapters._gymnasium import WebEnv
from dreamgym.adapters._miniwob import _open_browser_env, _open_simulator
from dreamgym.agents import render_observation
from dreamgym.bridge.miniwob import miniwob_tasks
from dreamgym.core import actions
from dreamgym.core.actions import try_parse_action
from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Action

if TYPE_CHECKING:
    from datasets import Dataset

    from dreamgym.simulator import ServedModel

__all__ = [
    "TOOL_NAMES",
    "TRL_PROMPT",
    "TRLEnvironmentFactory",
    "TRLWebEnvironment",
    "trl_dataset",
    "trl_miniwob_factory",
    "trl_simulated_miniwob_factory",
]

TRL_PROMPT = (
    "Carry out the task below in the web browser, one tool call at a time. Elements are named by ids such as "
    "e5, as in the page below; call stop when the task is done.\n\n"
)
"""The user message of :func:`trl_dataset`'s rows; ``reset`` appends the goal and the first page to it."""

TOOL_NAMES = (
    "click",
    "close_tab",
    "go_back",
    "go_forward",
    "goto",
    "hover",
    "new_tab",
    "press",
    "scroll",
    "select",
    "stop",
    "tab_focus",
    "type_text",
)
"""The tools of :class:`TRLWebEnvironment`, named after the action builders, in the order TRL lists them (by name)."""


class TRLWebEnvironment:
    """A dreamgym environment as a TRL environment: its public methods are the browser tools.

    ``reset`` starts an episode of the row's ``task`` (a task id) with its
    ``seed`` and returns the goal and the first page; each tool carries out
    one action and returns the page after it (with ``last_action_error`` when
    the action failed), or says the episode is over; ``get_reward`` is the
    episode's outcome: the environment's reward when the task ended, 0 before
    that and when the episode was cut (step limit, timeout).

    Args:
        env: The environment the tools act in. Its owner closes it
            (:class:`TRLEnvironmentFactory` does for the ones it makes).

    Example:
        >>> environment = TRLWebEnvironment(miniwob_env("click-button"))
        >>> print(environment.reset(task="miniwob/click-button", seed=1))
        >>> print(environment.click("e4"))
        >>> environment.get_reward()
        1.0
    """

    def __init__(self, env: WebEnv) -> None:
        self.web_env = env
        self._actions: list[Action] = []
        self._over = False
        self._outcome = 0.0

    @property
    def actions(self) -> tuple[Action, ...]:
        """The actions of this episode that reached the environment, in order."""
        return tuple(self._actions)

    @property
    def tools(self) -> list[Callable[..., str]]:
        """The tool methods, bound, in TRL's order: what ``apply_chat_template(..., tools=...)`` needs to render the
        prompt TRL renders, for a supervised warm start on the same tool schema."""
        return [getattr(self, name) for name in TOOL_NAMES]

    @property
    def done(self) -> bool:
        """Whether this episode is over (the task ended, or it was cut)."""
        return self._over

    def reset(self, task: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start an episode; TRL passes the dataset row's fields (the others, ``prompt`` among them, are ignored).

        Args:
            task: The task id (``miniwob/click-button``); ``None`` draws one of the environment's tasks.
            seed: The episode's seed; ``None`` draws one.
            **row: The row's other fields.

        Raises:
            ConfigError: The environment has no task ``task``.
            BackendError: The environment could not start the task.
        """
        options = {"task": task} if task is not None else None
        observation, _ = self.web_env.reset(seed=None if seed is None else int(seed), options=options)
        self._actions, self._over, self._outcome = [], False, 0.0
        return f"Goal: {observation['goal']}\n{render_observation(self.web_env.last_observation)}"

    def get_reward(self) -> float:
        """The episode's outcome: the reward it ended with, or 0 while it runs and when it was cut."""
        return self._outcome

    def click(self, element: str) -> str:
        """Click an element of the page.

        Args:
            element: The element's id, such as "e5".

        Returns:
            The page after the click, or why the episode is over.
        """
        return self._act(actions.click(element))

    def type_text(self, element: str, text: str, press_enter_after: bool = True) -> str:
        """Type text into a field, replacing its content.

        Args:
            element: The field's id, such as "e7".
            text: The text to type.
            press_enter_after: Whether to press Enter after typing.

        Returns:
            The page after typing, or why the episode is over.
        """
        return self._act(actions.type_text(element, text, "1" if press_enter_after else "0"))

    def hover(self, element: str) -> str:
        """Move the mouse over an element of the page.

        Args:
            element: The element's id, such as "e4".

        Returns:
            The page after the move, or why the episode is over.
        """
        return self._act(actions.hover(element))

    def press(self, key_comb: str) -> str:
        """Press a key or a key combination.

        Args:
            key_comb: Playwright key names joined by +, such as "Enter" or "Control+a".

        Returns:
            The page after the key press, or why the episode is over.
        """
        return self._act(actions.press(key_comb))

    def scroll(self, direction: Literal["up", "down"]) -> str:
        """Scroll the page up or down.

        Args:
            direction: Which way to scroll.

        Returns:
            The page after scrolling, or why the episode is over.
        """
        return self._act(actions.scroll(direction))

    def select(self, element: str, option: str) -> str:
        """Choose an option in a select box.

        Args:
            element: The select box's id, such as "e9".
            option: The text of the option to choose.

        Returns:
            The page after the choice, or why the episode is over.
        """
        return self._act(actions.select(element, option))

    def new_tab(self) -> str:
        """Open a new, empty tab and switch to it.

        Returns:
            The new tab's page, or why the episode is over.
        """
        return self._act(actions.new_tab())

    def tab_focus(self, tab_index: int) -> str:
        """Switch to another open tab.

        Args:
            tab_index: The tab's index; 0 is the first tab.

        Returns:
            The tab's page, or why the episode is over.
        """
        return self._act(actions.tab_focus(str(tab_index)))

    def close_tab(self) -> str:
        """Close the current tab.

        Returns:
            The page of the tab that is current then, or why the episode is over.
        """
        return self._act(actions.close_tab())

    def goto(self, url: str) -> str:
        """Go to a URL in the current tab.

        Args:
            url: The address to open.

        Returns:
            The page at the URL, or why the episode is over.
        """
        return self._act(actions.goto(url))

    def go_back(self) -> str:
        """Go back to the previous page.

        Returns:
            The previous page, or why the episode is over.
        """
        return self._act(actions.go_back())

    def go_forward(self) -> str:
        """Go forward to the next page, after going back.

        Returns:
            The next page, or why the episode is over.
        """
        return self._act(actions.go_forward())

    def stop(self, answer: str = "") -> str:
        """End the episode, with the answer when the task asks a question.

        Args:
            answer: The answer to the task's question; empty when it asks none.

        Returns:
            How the episode ended.
        """
        return self._act(actions.stop(answer))

    def _act(self, action: Action) -> str:
        if self._over:
            return "The episode is already over; no action was taken."
        # Through the text grammar, so that a tool argument it rejects is the same bad action a text policy makes.
        parsed = try_parse_action(str(action))
        _, reward, terminated, truncated, info = self.web_env.step(parsed)
        self._actions.append(parsed)
        if terminated:
            self._over, self._outcome = True, reward
            return f"The episode is over: the task ended with reward {reward:g}."
        if truncated:
            self._over = True
            return f"The episode is over: it was cut ({info['truncation_reason'] or 'truncated'}) with reward 0."
        return render_observation(self.web_env.last_observation)


class TRLEnvironmentFactory:
    """The ``environment_factory`` to hand TRL: each call makes a :class:`TRLWebEnvironment` over a new env.

    TRL makes one environment per rollout of a generation batch and reuses
    them across batches, so a run holds that many envs (each with its own
    event loop, and a browser or a simulator). The factory keeps them and
    closes them all in :meth:`close`, or on leaving a ``with`` block; each env
    also closes itself when garbage-collected or at interpreter exit.

    Args:
        make_env: Makes one env, such as ``functools.partial(miniwob_env, "click-button")``.
        task_ids: The ids of the tasks the envs hold, for :func:`trl_dataset`.

    Example:
        >>> with trl_miniwob_factory(["click-button"], max_steps=5) as factory:
        ...     trainer = GRPOTrainer(model, args=config, environment_factory=factory,
        ...                           train_dataset=trl_dataset(factory.task_ids, range(64)))
        ...     trainer.train()
    """

    def __init__(self, make_env: Callable[[], WebEnv], task_ids: Iterable[str] = ()) -> None:
        self._make_env = make_env
        self.task_ids = tuple(task_ids)
        self._environments: list[TRLWebEnvironment] = []

    def __call__(self) -> TRLWebEnvironment:
        """A new environment over a new env; TRL calls this once per rollout slot."""
        environment = TRLWebEnvironment(self._make_env())
        self._environments.append(environment)
        return environment

    @property
    def environments(self) -> tuple[TRLWebEnvironment, ...]:
        """Every environment this factory made and has not closed, in order."""
        return tuple(self._environments)

    def close(self) -> None:
        """Close every env this factory made; calling it again does nothing. The factory can make more after."""
        while self._environments:
            self._environments.pop().web_env.close()

    def __enter__(self) -> TRLEnvironmentFactory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def trl_miniwob_factory(tasks: str | Sequence[str], *, max_steps: int = 10) -> TRLEnvironmentFactory:
    """A factory of environments over MiniWoB++ tasks in headless Chromium, each env with its own browser.

    Args:
        tasks: MiniWoB++ task names (``click-button``); rows name them by id (``miniwob/click-button``).
        max_steps: Actions before an episode is cut (outcome 0).

    Raises:
        ConfigError: No such task, or one the text action space cannot solve.
    """
    records = miniwob_tasks([tasks] if isinstance(tasks, str) else list(tasks), max_steps)
    make_env = functools.partial(WebEnv, _open_browser_env, records, max_steps=max_steps)
    return TRLEnvironmentFactory(make_env, [task.task_id for task in records])


def trl_simulated_miniwob_factory(
    tasks: str | Sequence[str],
    *,
    model: str | Path | ServedModel,
    store: str | Path | None = None,
    max_steps: int = 10,
) -> TRLEnvironmentFactory:
    """A factory of environments over MiniWoB++ tasks in a simulator (as ``simulated_miniwob_env``).

    Each env loads the experience model for itself, so a run holds as many
    copies as TRL makes environments: keep the generation batch small.

    Args:
        tasks: MiniWoB++ task names; rows name them by id (``miniwob/click-button``).
        model: The experience model: a directory ``dreamgym sim train`` wrote, or a ``ServedModel``.
        store: A replay store directory, opened read-only (see ``simulated_miniwob_env``).
        max_steps: Actions before an episode is cut (outcome 0).

    Raises:
        ConfigError: No such task.
    """
    records = miniwob_tasks([tasks] if isinstance(tasks, str) else list(tasks), max_steps)
    store_path = Path(store).expanduser() if store is not None else None
    open_env = functools.partial(_open_simulator, model, store_path)
    make_env = functools.partial(WebEnv, open_env, records, max_steps=max_steps)
    return TRLEnvironmentFactory(make_env, [task.task_id for task in records])


def trl_dataset(task_ids: Iterable[str], seeds: Iterable[int], *, prompt: str = TRL_PROMPT) -> Dataset:
    """The training rows for TRL: one per task and seed, with the columns ``prompt``, ``task`` and ``seed``.

    ``prompt`` is a conversation of one user message, to which TRL appends the
    text ``reset`` returns (the goal and the first page) as it is: end it with
    a blank line.

    Raises:
        ConfigError: No task ids or no seeds.

    Example:
        >>> trl_dataset(["miniwob/click-button"], range(2))["seed"]
        [0, 1]
    """
    from datasets import Dataset

    ids, seed_list = list(task_ids), [int(seed) for seed in seeds]
    if not ids or not seed_list:
        raise ConfigError("trl_dataset needs at least one task id and one seed")
    rows = [
        {"prompt": [{"role": "user", "content": prompt}], "task": task_id, "seed": seed}
        for task_id in ids
        for seed in seed_list
    ]
    return Dataset.from_list(rows)
