"""How a kind of task runs on a live page: the ``Site`` protocol and the generic site.

A :class:`~dreamgym.bridge.env.BrowserEnv` picks the site by ``Task.benchmark``.
A site starts an episode on a page, says what part of the page to capture and
which origins the episode may reach, reports rewards the page itself knows
(MiniWoB) after each action, and evaluates the episode when it ends.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Task

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["GenericSite", "Site", "task_config"]


class Site(Protocol):
    name: str
    """The ``Task.benchmark`` this site runs."""

    def allowlist(self, task: Task) -> Allowlist: ...

    def capture_root(self, task: Task) -> str | None:
        """A CSS selector of the part of the page to capture; ``None`` for the whole page."""
        ...

    def can_reuse(self, page: Page, task: Task) -> bool:
        """Whether a new episode of ``task`` may start on this page without a fresh context."""
        ...

    async def start(self, page: Page, task: Task, seed: int | None) -> str:
        """Start an episode; returns the goal the page states for it ("" if none)."""
        ...

    async def outcome(self, page: Page, task: Task) -> tuple[float, bool]:
        """After each action: the reward so far and whether the task has ended by itself."""
        ...

    async def evaluate(self, page: Page, task: Task, answer: str) -> float:
        """When the agent stops: the outcome reward of the episode."""
        ...

    async def aclose(self) -> None: ...


def task_config(task: Task) -> dict[str, Any]:
    """The task's source configuration (``Task.config_json``) as a dict."""
    if not task.config_json:
        return {}
    try:
        config = json.loads(task.config_json)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"task {task.task_id} has a config_json that is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"task {task.task_id} config_json must be a JSON object")
    return config


class GenericSite:
    """Any site: a start URL, an instruction, and the origins the episode may reach.

    ``config_json`` may list ``allowed_origins`` beyond the start URL's.
    """

    name = "generic"

    def allowlist(self, task: Task) -> Allowlist:
        extra = task_config(task).get("allowed_origins", [])
        return Allowlist.of([task.start_url, *extra])

    def capture_root(self, task: Task) -> str | None:
        return None

    def can_reuse(self, page: Page, task: Task) -> bool:
        return False

    async def start(self, page: Page, task: Task, seed: int | None) -> str:
        if not task.start_url:
            raise ConfigError(f"task {task.task_id} has no start_url")
        if "eval" in task_config(task):
            raise ConfigError(
                f"task {task.task_id} has an evaluator spec, which the generic site cannot run yet; "
                "remove 'eval' from its config to run it unevaluated"
            )
        await page.goto(task.start_url, wait_until="domcontentloaded")
        return ""

    async def outcome(self, page: Page, task: Task) -> tuple[float, bool]:
        return 0.0, False

    async def evaluate(self, page: Page, task: Task, answer: str) -> float:
        return 0.0

    async def aclose(self) -> None:
        pass
