"""How a kind of task runs on a live page: the ``Site`` protocol and the generic site.

A :class:`~dreamgym.bridge.env.BrowserEnv` picks the site by ``Task.benchmark``.
A site starts an episode on a page, says what part of the page to capture and
which origins the episode may reach, reports rewards the page itself knows
(MiniWoB) after each action, and evaluates the episode when it ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.bridge.evaluators import Judge, evaluate_webarena
from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Task

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["GenericSite", "Site", "generic_task", "task_config"]


class Site(Protocol):
    """What :class:`~dreamgym.bridge.BrowserEnv` needs of a site.

    A site may also define ``async def prepare(self, task) -> None``: the
    environment awaits it before every episode, with no browser context open
    and outside the start deadline (a stateful site's reset command, see
    :class:`~dreamgym.bridge.WebArenaSite`).
    """

    name: str
    """The ``Task.benchmark`` this site runs."""
    settle: bool
    """Whether its pages are waited for to settle before each capture (``dreamgym.bridge.settle``): live
    sites that build themselves after loading need it; a site may leave it out (``True`` then)."""

    def allowlist(self, task: Task) -> Allowlist: ...

    def context_options(self, task: Task) -> dict[str, Any]:
        """Extra ``new_context`` options for an episode of ``task`` (a login ``storage_state``)."""
        ...

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


def generic_task(
    task_id: str,
    start_url: str,
    instruction: str,
    *,
    evaluator: Mapping[str, Any] | None = None,
    allowed_origins: Sequence[str] = (),
    max_steps: int = 0,
) -> Task:
    """A task on any site: a URL, an instruction and (optionally) a WebArena-style evaluator.

    ``evaluator`` is a WebArena ``eval`` object (``eval_types`` with
    ``reference_answers``, ``reference_url``, ``program_html``).

    Example:
        >>> generic_task("mysite/search", "http://127.0.0.1:8000/", 'Search for "shoes"',
        ...              evaluator={"eval_types": ["url_match"], "reference_url": "http://127.0.0.1:8000/?q=shoes"})
    """
    config: dict[str, Any] = {"allowed_origins": list(allowed_origins)}
    if evaluator is not None:
        if "eval_types" not in evaluator:
            raise ConfigError("an evaluator needs eval_types (string_match, url_match, program_html)")
        config["eval"] = dict(evaluator)
    return Task(
        task_id=task_id,
        instruction=instruction,
        start_url=start_url,
        benchmark="generic",
        max_steps=max_steps,
        config_json=json.dumps(config),
    )


class GenericSite:
    """Any site: a start URL, an instruction, the origins the episode may reach, an optional evaluator.

    ``config_json`` may list ``allowed_origins`` beyond the start URL's, and an
    ``eval`` object in WebArena's format, run when the agent stops; without
    one the reward is 0. See :func:`generic_task`.
    """

    name = "generic"
    settle = True  # live sites build their pages after loading

    def __init__(self, *, judge: Judge | None = None) -> None:
        self.judge = judge

    def allowlist(self, task: Task) -> Allowlist:
        extra = task_config(task).get("allowed_origins", [])
        return Allowlist.of([task.start_url, *extra])

    def context_options(self, task: Task) -> dict[str, Any]:
        return {}

    def capture_root(self, task: Task) -> str | None:
        return None

    def can_reuse(self, page: Page, task: Task) -> bool:
        return False

    async def start(self, page: Page, task: Task, seed: int | None) -> str:
        if not task.start_url:
            raise ConfigError(f"task {task.task_id} has no start_url")
        await page.goto(task.start_url, wait_until="domcontentloaded")
        return ""

    async def outcome(self, page: Page, task: Task) -> tuple[float, bool]:
        return 0.0, False

    async def evaluate(self, page: Page, task: Task, answer: str) -> float:
        config = task_config(task)
        if "eval" not in config:
            return 0.0
        from dreamgym.bridge.webarena import site_urls_from_env

        config.setdefault("intent", task.instruction)
        return await evaluate_webarena(config, page, answer, site_urls_from_env(), self.judge)

    async def aclose(self) -> None:
        pass
