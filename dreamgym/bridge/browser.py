"""Chromium, found and run as a pool of headless browser processes.

Each episode gets its own isolated browser context. Several browser
processes (default 2) share the episodes, so one crash does not take every
episode with it; a process is recycled every ``recycle_every`` contexts and
relaunched after a crash, the next time a context is asked of it.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import anyio

from dreamgym.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Playwright

__all__ = ["CHROMIUM_ARGS", "BrowserConfig", "BrowserPool", "ContextLease", "find_chromium"]

log = logging.getLogger(__name__)

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Flags for a closed network: without the background-networking ones Chromium
keeps trying to reach Google's hosts."""

_SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")


def find_chromium(configured: str | os.PathLike[str] | None = None) -> Path:
    """Find a Chromium executable.

    In order: ``configured``, ``$DREAMGYM_CHROMIUM``, the browser a
    ``playwright install chromium`` put in Playwright's cache, then
    ``chromium`` (and its other names) on ``PATH``.

    Raises:
        ConfigError: None was found; the message says how to get one.
    """
    for candidate in (configured, os.environ.get("DREAMGYM_CHROMIUM")):
        if candidate:
            path = Path(candidate)
            if path.is_file() and os.access(path, os.X_OK):
                return path
            raise ConfigError(f"the configured Chromium {path} is not an executable file")
    cache = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or str(Path.home() / ".cache" / "ms-playwright")
    for pattern in ("chromium-*/chrome-linux*/chrome", "chromium_headless_shell-*/chrome-linux*/headless_shell"):
        found = sorted(glob.glob(os.path.join(cache, pattern)))
        if found:
            return Path(found[-1])
    for name in _SYSTEM_NAMES:
        if (which := shutil.which(name)) is not None:
            return Path(which)
    raise ConfigError(
        "no Chromium found: install the distribution's 'chromium' package, run "
        "'playwright install chromium', or set DREAMGYM_CHROMIUM to an executable"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BrowserConfig:
    """How browsers are found, launched, shared and recycled."""

    executable: str | None = None
    """Chromium to run; ``None`` finds one (:func:`find_chromium`)."""
    processes: int = 2
    """Browser processes sharing the episodes."""
    max_contexts: int = 8
    """Episodes (contexts) open at once, over all processes."""
    recycle_every: int = 200
    """Restart a browser process after it has served this many contexts."""
    viewport: tuple[int, int] = (1280, 720)
    """Fixed, so the same task and seed give the same page."""
    launch_timeout_s: float = 60.0
    """How long one launch of a browser process may take. Chromium starts in about 0.3 s on an idle 2-core
    machine; on a loaded one (a CI runner training a model beside it) a start has taken over 30 s."""
    launch_attempts: int = 3
    """Launches tried, one after another, before a slot's browser counts as unable to start: a launch that
    timed out or failed is killed and tried again, and only the last failure reaches the episode (as a
    :class:`~dreamgym.core.errors.BackendError` naming every attempt)."""

    def __post_init__(self) -> None:
        if self.processes < 1 or self.max_contexts < 1 or self.recycle_every < 1:
            raise ConfigError("processes, max_contexts and recycle_every must each be >= 1")
        if self.launch_attempts < 1 or not self.launch_timeout_s > 0:
            raise ConfigError(
                f"launch_attempts must be >= 1 and launch_timeout_s > 0; "
                f"got {self.launch_attempts} and {self.launch_timeout_s}"
            )


class _Slot:
    """One browser process and its bookkeeping."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.browser: Browser | None = None
        self.served = 0
        self.active = 0
        self.launches = 0

    @property
    def alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected()


class ContextLease:
    """One episode's browser context, borrowed from a :class:`BrowserPool`."""

    def __init__(self, pool: BrowserPool) -> None:
        self._pool = pool
        self.context: BrowserContext = None  # type: ignore[assignment]  # set by open_context
        self.slot: _Slot | None = None
        self._closed = False

    @property
    def browser_index(self) -> int:
        assert self.slot is not None
        return self.slot.index

    @property
    def browser_alive(self) -> bool:
        return self.slot is not None and self.slot.alive

    async def aclose(self) -> None:
        """Close the context and give its place back; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        await self._pool._release(self)


class BrowserPool:
    """Headless Chromium processes handing out isolated contexts.

    Example:
        >>> async with BrowserPool(BrowserConfig()) as pool:
        ...     async with pool.context() as lease:
        ...         page = await lease.context.new_page()
    """

    def __init__(self, config: BrowserConfig | None = None) -> None:
        self.config = config or BrowserConfig()
        self._slots = [_Slot(i) for i in range(self.config.processes)]
        self._limiter = anyio.CapacityLimiter(self.config.max_contexts)
        self._lock = anyio.Lock()
        self._playwright: Playwright | None = None
        self._manager: Any = None
        self._executable: Path | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        from playwright.async_api import async_playwright

        self._executable = find_chromium(self.config.executable)
        self._manager = async_playwright()
        self._playwright = await self._manager.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def launches(self) -> int:
        """Browser processes launched so far (relaunches included)."""
        return sum(slot.launches for slot in self._slots)

    async def pids(self) -> list[int | None]:
        """The OS process id of each slot's browser (``None`` where none runs), for tests and ops."""
        out: list[int | None] = []
        for slot in self._slots:
            pid = None
            if slot.alive:
                session = await slot.browser.new_browser_cdp_session()  # type: ignore[union-attr]
                info = await session.send("SystemInfo.getProcessInfo")
                await session.detach()
                pid = next((p["id"] for p in info["processInfo"] if p["type"] == "browser"), None)
            out.append(pid)
        return out

    async def open_context(self, **options: Any) -> ContextLease:
        """An isolated browser context on the least busy live browser; close it with ``aclose()``.

        Waits while ``max_contexts`` are open. The lease may be closed from any task.

        Raises:
            BackendError: The pool is closed, or no browser could open a context.
        """
        if self._closed or self._playwright is None:
            raise BackendError("the browser pool is not open; use `async with BrowserPool(...)`")
        lease = ContextLease(self)
        await self._limiter.acquire_on_behalf_of(lease)
        try:
            slot = await self._acquire_slot()
            try:
                lease.context = await slot.browser.new_context(  # type: ignore[union-attr]
                    viewport={"width": self.config.viewport[0], "height": self.config.viewport[1]},
                    accept_downloads=False,
                    **options,
                )
            except Exception as exc:
                slot.active -= 1
                raise BackendError(f"browser {slot.index} could not open a context: {exc}") from exc
        except BaseException:
            self._limiter.release_on_behalf_of(lease)
            raise
        lease.slot = slot
        return lease

    @asynccontextmanager
    async def context(self, **options: Any) -> AsyncIterator[ContextLease]:
        """:meth:`open_context` as an async context manager."""
        lease = await self.open_context(**options)
        try:
            yield lease
        finally:
            await lease.aclose()

    async def _release(self, lease: ContextLease) -> None:
        slot = lease.slot
        assert slot is not None
        slot.active -= 1
        with anyio.move_on_after(10, shield=True):
            try:
                await lease.context.close()
            except Exception:  # the browser may be gone; nothing left to close
                log.debug("closing a context of browser %d failed", slot.index, exc_info=True)
            await self._maybe_recycle(slot)
        self._limiter.release_on_behalf_of(lease)

    async def _acquire_slot(self) -> _Slot:
        async with self._lock:
            # The least busy process, so episodes spread over browsers (a crash takes fewer);
            # among equals a running one, so a process is launched only when it helps.
            slot = min(self._slots, key=lambda s: (s.active, not s.alive, s.index))
            if not slot.alive or slot.served >= self.config.recycle_every:
                await self._relaunch(slot)
            slot.served += 1
            slot.active += 1
            return slot

    async def _relaunch(self, slot: _Slot) -> None:
        await self._close_browser(slot)
        assert self._playwright is not None
        timeout_s, attempts = self.config.launch_timeout_s, self.config.launch_attempts
        failures: list[str] = []
        for attempt in range(1, attempts + 1):
            try:
                # Playwright's own timeout kills the half-started process; the guard outside it covers a driver
                # that stops answering.
                with anyio.fail_after(timeout_s + 10):
                    slot.browser = await self._playwright.chromium.launch(
                        executable_path=str(self._executable),
                        args=list(CHROMIUM_ARGS),
                        headless=True,
                        timeout=timeout_s * 1000,
                    )
                break
            except Exception as exc:  # a timeout or a launch error: Playwright raises both as exceptions
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                failures.append(f"attempt {attempt}: {reason}")
                log.warning("browser %d did not start (attempt %d of %d): %s", slot.index, attempt, attempts, reason)
        else:
            raise BackendError(
                f"Chromium ({self._executable}) did not start in {attempts} attempt(s) of up to {timeout_s:g} s "
                f"each: " + "; ".join(failures)
            )
        slot.served = 0
        slot.launches += 1
        log.debug("launched browser %d (launch #%d)", slot.index, slot.launches)

    async def _maybe_recycle(self, slot: _Slot) -> None:
        if slot.active == 0 and slot.served >= self.config.recycle_every:
            async with self._lock:
                if slot.active == 0 and slot.served >= self.config.recycle_every:
                    await self._close_browser(slot)

    async def _close_browser(self, slot: _Slot) -> None:
        browser, slot.browser = slot.browser, None
        if browser is None:
            return
        with anyio.move_on_after(10, shield=True):
            try:
                await browser.close()
            except Exception:  # already dead
                log.debug("closing browser %d failed", slot.index, exc_info=True)

    async def aclose(self) -> None:
        """Close every browser and Playwright; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            await self._close_browser(slot)
        if self._manager is not None:
            with anyio.move_on_after(10, shield=True):
                await self._manager.__aexit__(None, None, None)
