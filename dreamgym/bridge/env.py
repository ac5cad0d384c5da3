"""``BrowserEnv``: the Environment protocol on live pages in Chromium.

One environment runs one episode at a time in its own browser context from a
shared :class:`~dreamgym.bridge.browser.BrowserPool`. Which site logic runs is
chosen by ``Task.benchmark`` (``miniwob``, ``generic``, ...).

Failure semantics: an action the page cannot take comes back as
``last_action_error``; a step that outlives ``step_deadline_s`` (a hung page),
a crashed page and a killed browser each end the episode as truncated with
the reason (``deadline``, ``page_crashed``, ``browser_crashed``), and the next
``reset`` starts on a fresh context (the pool relaunches a dead browser).
Dialogs are accepted and reported in ``last_action_error``; pages the site
opens itself (pop-ups) join the tabs, by the next observation at the latest
(they open asynchronously), without taking the focus.
"""

from __future__ import annotations

import logging
import random
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.bridge.browser import BrowserPool, ContextLease
from dreamgym.bridge.capture import RefMap, render_snapshot
from dreamgym.bridge.execute import PageGone, Tabs, execute_action
from dreamgym.bridge.settle import SETTLE_SCRIPT, settle
from dreamgym.bridge.sites import GenericSite, Site
from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.protocols import StepResult
from dreamgym.core.types import Action, Observation, Source, Task

if TYPE_CHECKING:
    from playwright.async_api import Dialog, Page, Route

__all__ = ["BrowserEnv", "EnvConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvConfig:
    """How a :class:`BrowserEnv` acts and observes."""

    action_timeout_s: float = 5.0
    """Playwright's wait for an element to be actionable; past it the action fails
    with ``last_action_error`` and the episode goes on."""
    step_deadline_s: float = 30.0
    """The whole step (action, outcome, capture); past it the page counts as hung
    and the episode ends truncated (``deadline``)."""
    reset_deadline_s: float = 60.0
    max_steps: int = 30
    """Step limit, unless the task sets ``max_steps``; reaching it truncates (``step_limit``)."""
    max_state_chars: int = 20_000
    """Cap of the rendered state; the observation's ``cut_note`` says what was cut."""
    settle_quiet_ms: float = 10.0
    """Before each capture, wait until the page has had no request in flight and no DOM change for this
    long (``dreamgym.bridge.settle``); 0 turns settling off."""
    settle_deadline_s: float = 2.0
    """The most a capture waits for the page to settle; a page still changing then is captured as it is,
    and the step's ``info["settled"]`` is ``False``."""
    settle_s: float = 0.0
    """A fixed pause after each action, before settling (for pages that animate)."""

    def __post_init__(self) -> None:
        if self.action_timeout_s >= self.step_deadline_s:
            raise ConfigError("action_timeout_s must be shorter than step_deadline_s")
        if self.max_steps < 1 or self.max_state_chars < 100:
            raise ConfigError("max_steps must be >= 1 and max_state_chars >= 100")
        if self.settle_quiet_ms < 0 or not 0 <= self.settle_deadline_s < self.step_deadline_s:
            raise ConfigError("settle_quiet_ms must be >= 0 and settle_deadline_s in [0, step_deadline_s)")


@dataclass
class _Episode:
    task: Task
    site: Site
    lease: ContextLease
    tabs: Tabs
    allowlist: Allowlist
    seed: int | None
    refs: RefMap = field(default_factory=RefMap)
    goal: str = ""
    steps: int = 0
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    reason: str = ""
    last: Observation | None = None
    blocked: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    crashed: bool = False
    settled: bool = True
    """Whether the last capture found the page settled (``False``: its settle deadline passed)."""


_SCROLL_POSITION = """() => {
    const page = document.scrollingElement || document.documentElement;
    const room = page.scrollHeight - window.innerHeight;
    return room > 0 ? Math.min(1, Math.max(0, window.scrollY / room)) : 0;
}"""
"""How far down the page is scrolled, 0 at the top to 1 at the bottom: where a cut state's window sits."""


class BrowserEnv:
    """A real web environment (``source = "real"``).

    Args:
        pool: The browser pool to borrow contexts from (not closed by this env).
        sites: Site logic by ``Task.benchmark``; defaults to the generic site.
        config: Timeouts, step limit and capture settings.
    """

    source: Source = "real"

    def __init__(self, pool: BrowserPool, *, sites: Iterable[Site] = (), config: EnvConfig | None = None) -> None:
        self.pool = pool
        self.config = config or EnvConfig()
        self.sites: dict[str, Site] = {site.name: site for site in (GenericSite(), *sites)}
        self._episode: _Episode | None = None
        self._titles: weakref.WeakKeyDictionary[Page, tuple[str, str]] = weakref.WeakKeyDictionary()
        self.seed: int | None = None
        """The seed of the current episode (drawn at random when reset got none)."""

    # ------------------------------------------------------------------ episode start

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Start an episode of ``task`` on a live page.

        Raises:
            ConfigError: No site runs ``task.benchmark``, or the task is malformed.
            BackendError: The page could not be started within ``reset_deadline_s``.
        """
        site = self.sites.get(task.benchmark or "generic")
        if site is None:
            raise ConfigError(f"no site runs benchmark {task.benchmark!r}; known: {sorted(self.sites)}")
        self.seed = seed if seed is not None else random.randrange(2**31)
        prepare = getattr(site, "prepare", None)  # optional: a stateful site's reset, before its deadline
        if prepare is not None:
            await self._close_context()
            await prepare(task)
        previous = self._episode
        reuse = (
            previous is not None
            and not previous.crashed
            and previous.lease.browser_alive
            and previous.site is site
            and not previous.tabs.page.is_closed()
            and site.can_reuse(previous.tabs.page, task)
        )
        try:
            with anyio.fail_after(self.config.reset_deadline_s):
                if reuse:
                    assert previous is not None
                    episode = _Episode(task, site, previous.lease, previous.tabs, site.allowlist(task), self.seed)
                else:
                    await self._close_context()
                    episode = await self._open_episode(task, site)
                self._episode = episode
                episode.goal = await site.start(episode.tabs.page, task, self.seed)
                await self._settle(episode)
                observation = await self._observe(episode, "")
        except TimeoutError as exc:
            await self._close_context()
            raise BackendError(f"task {task.task_id} did not start within {self.config.reset_deadline_s} s") from exc
        except (ConfigError, BackendError):
            await self._close_context()
            raise
        except Exception as exc:  # Playwright errors while loading the start page
            await self._close_context()
            raise BackendError(f"task {task.task_id} could not start: {_first_line(exc)}") from exc
        episode.last = observation
        return observation

    async def _open_episode(self, task: Task, site: Site) -> _Episode:
        lease = await self.pool.open_context(**site.context_options(task))
        context = lease.context
        context.set_default_timeout(self.config.action_timeout_s * 1000)
        context.set_default_navigation_timeout(self.config.step_deadline_s * 1000)
        await context.route("**/*", self._route)
        if self.config.settle_quiet_ms and getattr(site, "settle", True):
            await context.add_init_script(SETTLE_SCRIPT)
        context.on("page", self._watch_page)
        page = await context.new_page()
        return _Episode(task, site, lease, Tabs(context, [page]), site.allowlist(task), self.seed)

    def _watch_page(self, page: Page) -> None:
        page.on("dialog", self._on_dialog)
        page.on("crash", self._on_crash)

    async def _route(self, route: Route) -> None:
        episode = self._episode
        url = route.request.url
        if episode is not None and episode.allowlist.allows(url):
            await route.continue_()
            return
        if episode is not None and route.request.is_navigation_request():
            episode.blocked.append(url)
            await route.fulfill(status=204)  # "no content": the browser stays on the current page
            return
        await route.abort("blockedbyclient")

    async def _on_dialog(self, dialog: Dialog) -> None:
        if self._episode is not None:
            self._episode.notices.append(f"a {dialog.type} dialog said {dialog.message!r} and was accepted")
        await dialog.accept()

    def _on_crash(self, page: Page) -> None:
        if self._episode is not None:
            self._episode.crashed = True

    # ------------------------------------------------------------------ steps

    async def step(self, action: Action) -> StepResult:
        """Carry out ``action`` and observe the page (see the module docstring for failures).

        Raises:
            ConfigError: ``reset`` was never called.
        """
        episode = self._episode
        if episode is None or episode.last is None:
            raise ConfigError("call reset(task) before step()")
        if episode.done:
            over = msgspec.structs.replace(
                episode.last, last_action_error="the episode is over; call reset() to start another"
            )
            return self._result(episode, over, 0.0)
        episode.steps += 1
        try:
            with anyio.fail_after(self.config.step_deadline_s):
                reward, terminated, observation = await self._act(episode, action)
        except TimeoutError:
            message = f"the page did not answer within {self.config.step_deadline_s} s"
            return await self._cut(episode, "deadline", message)
        except PageGone as exc:
            return await self._cut(episode, self._gone_reason(episode), f"the page is gone: {exc}")
        except Exception as exc:
            if episode.crashed or episode.tabs.page.is_closed() or not episode.lease.browser_alive:
                return await self._cut(episode, self._gone_reason(episode), f"the page is gone: {_first_line(exc)}")
            raise
        episode.last = observation
        limit = episode.task.max_steps or self.config.max_steps
        if terminated:
            episode.done = episode.terminated = True
        elif episode.steps >= limit:
            episode.done = episode.truncated = True
            episode.reason = "step_limit"
        return self._result(episode, observation, reward)

    async def _act(self, episode: _Episode, action: Action) -> tuple[float, bool, Observation]:
        if episode.crashed:
            raise PageGone("the page crashed")
        error = await execute_action(
            action,
            episode.tabs,
            episode.refs,
            timeout_ms=self.config.action_timeout_s * 1000,
            allowed=episode.allowlist,
        )
        if self.config.settle_s:
            await anyio.sleep(self.config.settle_s)
        await self._settle(episode)
        page, task = episode.tabs.page, episode.task
        if action.name == "stop" and not error:
            # Observe the page the agent stopped on first: evaluation may navigate away from it.
            observation = await self._observe(episode, error)
            return await episode.site.evaluate(page, task, action.args[0]), True, observation
        outcome: list[tuple[float, bool]] = []

        async def judge() -> None:
            outcome.append(await episode.site.outcome(page, task))

        try:
            async with anyio.create_task_group() as tg:  # two independent round trips to the page, at once
                tg.start_soon(judge)
                observation = await self._observe(episode, error)
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        reward, terminated = outcome[0]
        return reward, terminated, observation

    def _gone_reason(self, episode: _Episode) -> str:
        return "page_crashed" if episode.lease.browser_alive else "browser_crashed"

    async def _cut(self, episode: _Episode, reason: str, message: str) -> StepResult:
        """End the episode from outside (hung page, crash): truncated, with the last observation."""
        log.warning("episode of %s cut: %s", episode.task.task_id, message)
        episode.done = episode.truncated = True
        episode.reason = reason
        episode.crashed = True  # never reuse this context
        await self._close_context()
        assert episode.last is not None
        return self._result(episode, msgspec.structs.replace(episode.last, last_action_error=message), 0.0)

    def _result(self, episode: _Episode, observation: Observation, reward: float) -> StepResult:
        return StepResult(
            observation=observation,
            reward=reward,
            terminated=episode.terminated,
            truncated=episode.truncated,
            truncation_reason=episode.reason,
            info={"steps": episode.steps, "browser": episode.lease.browser_index, "settled": episode.settled},
        )

    async def _settle(self, episode: _Episode) -> None:
        """Wait for the page to settle before it is captured (see ``dreamgym.bridge.settle``)."""
        config = self.config
        if not config.settle_quiet_ms or not config.settle_deadline_s or not getattr(episode.site, "settle", True):
            return
        episode.tabs.sync()
        episode.settled = await settle(
            episode.tabs.page, quiet_ms=config.settle_quiet_ms, deadline_ms=config.settle_deadline_s * 1000
        )
        if not episode.settled:
            log.debug("%s: the page was still changing after %s s; captured as it was",
                      episode.task.task_id, config.settle_deadline_s)  # fmt: skip

    # ------------------------------------------------------------------ observation

    async def _observe(self, episode: _Episode, error: str) -> Observation:
        from playwright.async_api import Error as PlaywrightError

        episode.tabs.sync()
        page = episode.tabs.page
        root = episode.site.capture_root(episode.task)
        target: Any = page.locator(root) if root else page
        # No Playwright timeout of its own: a page too busy to answer is the step deadline's to judge.
        wait_ms = self.config.step_deadline_s * 1000
        try:
            snapshot = await target.aria_snapshot(mode="ai", timeout=wait_ms)
        except PlaywrightError:
            if page.is_closed():
                raise
            await page.wait_for_load_state("domcontentloaded", timeout=wait_ms)  # mid-navigation: once more
            snapshot = await target.aria_snapshot(mode="ai", timeout=wait_ms)
        position = 0.0
        if len(snapshot) > self.config.max_state_chars:  # it may be cut: where the window sits follows the scroll
            position = float(await page.evaluate(_SCROLL_POSITION))
        captured = render_snapshot(snapshot, episode.refs, max_chars=self.config.max_state_chars, position=position)
        messages = [error] if error else []
        messages += [f"navigation to {url} was blocked: outside the task's allowed sites" for url in episode.blocked]
        messages += episode.notices
        episode.blocked.clear()
        episode.notices.clear()
        return Observation(
            state=captured.text,
            url=page.url,
            tabs=tuple([await self._title(p) for p in episode.tabs.pages]),
            active_tab=episode.tabs.active,
            focused_id=captured.focused_id,
            last_action_error="; ".join(messages),
            cut_note=captured.cut_note,
            goal=episode.goal,
        )

    async def _title(self, page: Page) -> str:
        """A tab's title (or URL), asked of the page only when its URL changed since last time."""
        cached = self._titles.get(page)
        if cached is not None and cached[0] == page.url:
            return cached[1]
        title = await page.title() or page.url
        self._titles[page] = (page.url, title)
        return title

    # ------------------------------------------------------------------ closing

    async def _close_context(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            with anyio.move_on_after(15, shield=True):
                await episode.lease.aclose()

    async def aclose(self) -> None:
        """Close the episode's context; calling it again does nothing. The pool stays open."""
        await self._close_context()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
