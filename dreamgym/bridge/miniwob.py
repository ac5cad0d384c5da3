"""MiniWoB++ on live pages: the 130 tasks of the ``miniwob`` package plus its four flight sites.

Pages are served by a small HTTP server on 127.0.0.1 that this site runs (the
flight tasks need http, and one origin for all tasks keeps the allowlist
simple), on port :data:`PORT` where it is free: the page's URL is part of every
observation, and so of the policy's and the experience model's prompts, so a
port drawn afresh by each run would make the same task and seed read
differently from run to run (and a model trained on one run's pages meet an
unseen URL in the next). An episode is seeded with ``Math.seedrandom(seed)``
and started with ``core.startEpisodeReal()``; its utterance becomes
``Observation.goal``.

Reward: 1 iff the page's *raw* reward is positive when the task ends, else 0.
MiniWoB's own reward decays with wall-clock time, which would punish a slow
CPU policy for the machine's speed, so the page's time limit is set out of
reach and the environment's step limit bounds episodes instead.
"""

from __future__ import annotations

import functools
import http.server
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.types import Task

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = [
    "EXCLUDED",
    "FLIGHT_TASKS",
    "NONDETERMINISTIC",
    "PORT",
    "MiniWobSite",
    "all_tasks",
    "miniwob_html",
    "miniwob_tasks",
    "text_tasks",
]

log = logging.getLogger(__name__)

FLIGHT_TASKS = ("flight.AA", "flight.Alaska", "flight.Alaska-auto", "flight.Alaska-auto-medium")

EXCLUDED: dict[str, str] = {
    **{
        name: "needs dragging"
        for name in (
            "drag-box",
            "drag-circle",
            "drag-cube",
            "drag-items",
            "drag-items-grid",
            "drag-shapes",
            "drag-shapes-2",
            "drag-single-shape",
            "drag-sort-numbers",
            "resize-textarea",
            "use-slider",
            "use-slider-2",
        )
    },
    **{
        name: "needs drawing or clicking at coordinates"
        for name in (
            "draw-circle",
            "draw-line",
            "bisect-angle",
            "circle-center",
            "find-midpoint",
            "right-angle",
            "use-colorwheel",
            "use-colorwheel-2",
        )
    },
    **{
        name: "the answer is only visible as shapes or colours"
        for name in (
            "click-shape",
            "click-pie",
            "click-pie-nodelay",
            "click-color",
            "count-shape",
            "count-sides",
            "identify-shape",
            "visual-addition",
            "grid-coordinate",
            "hover-shape",
            "simon-says",
            "click-shades",
        )
    },
    **{name: "needs text selection" for name in ("highlight-text", "highlight-text-2", "text-editor")},
    **{name: "moving targets or wall-clock timing" for name in ("chase-circle", "moving-items", "stock-market")},
    "click-scroll-list": "needs multi-selection with modifier keys",
    "click-link": "its links are inline spans that Playwright's ARIA snapshot merges into the paragraph's text",
}
"""Tasks the text action space cannot solve, with the reason."""

_EMAIL_INBOX = (
    "email-inbox", "email-inbox-delete", "email-inbox-forward", "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk", "email-inbox-important", "email-inbox-nl-turk", "email-inbox-noscroll",
    "email-inbox-reply", "email-inbox-star-reply",
)  # fmt: skip

NONDETERMINISTIC = frozenset(
    {
        "book-flight",
        "book-flight-nodelay",
        "choose-date",
        "choose-date-easy",
        "choose-date-medium",
        "choose-date-nodelay",
        "daily-calendar",
        "enter-date",
        "enter-time",
        *FLIGHT_TASKS,
        *_EMAIL_INBOX,
    }
)
"""Tasks whose observation a seed does not fix: pages that depend on today's date or the clock,
and the email-inbox family, whose first thread is now and then missing from the snapshot of a
page loaded cold (about 1 in 25 fresh-context resets under load; the cause is not found yet)."""


def miniwob_html() -> Path:
    """The ``html`` directory of the installed ``miniwob`` package.

    Raises:
        ConfigError: The package is not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("MiniWoB++ needs the package miniwob (pip install miniwob)")
    return Path(next(iter(spec.submodule_search_locations))) / "html"


def all_tasks() -> tuple[str, ...]:
    """Every MiniWoB++ task name the package ships (130 pages and 4 flight sites)."""
    pages = sorted(path.stem for path in (miniwob_html() / "miniwob").glob("*.html"))
    return (*pages, *FLIGHT_TASKS)


def text_tasks(*, deterministic_only: bool = False) -> tuple[str, ...]:
    """The manifest of text-solvable tasks; default task sets use only these."""
    names = [name for name in all_tasks() if name not in EXCLUDED]
    if deterministic_only:
        names = [name for name in names if name not in NONDETERMINISTIC]
    return tuple(names)


def _page_path(name: str) -> str:
    if name.startswith("flight."):
        return "flight/" + name.split(".", 1)[1] + "/wrapper.html"
    return f"miniwob/{name}.html"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


_START = """(seed) => {
    if (!document.getElementById('dreamgym-hide')) {
        // MiniWoB's own scoreboard and click canvas are not part of the task.
        const style = document.createElement('style');
        style.id = 'dreamgym-hide';
        style.textContent = '#reward-display, #click-canvas, #sync-task-cover { display: none !important; }';
        document.head.appendChild(style);
    }
    // A page reset in place keeps the element the last episode left focused (tasks that keep their inputs
    // between episodes): let go of it, so an episode starts as it would on a fresh page.
    if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    Math.seedrandom(seed);
    core.EPISODE_MAX_TIME = 1e9;
    core.startEpisodeReal();
}"""
_OUTCOME = "() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]"


PORT = 28610
"""The port MiniWoB++ pages are served on by default: one fixed port, so that observations (which carry the URL)
are the same in every run. Below Linux's ephemeral range, so an outgoing connection does not hold it."""


class MiniWobSite:
    """The ``miniwob`` site; ``task(name)`` makes its tasks. Close it to stop its server.

    Args:
        html_dir: MiniWoB's ``html`` directory (default: the installed package's).
        port: The port to serve on (default :data:`PORT`). Where it is taken (another site open at the same
            time, in this process or another), the server takes a free one and logs so: its pages' URLs then
            differ from those of runs on ``port``. ``0``: any free port.
        reuse_pages: Start the next episode on the same page, reset in place by
            MiniWoB's own ``startEpisodeReal`` (about 0.1 s instead of 0.5 s for a
            new browser context). MiniWoB keeps nothing between episodes that a
            seeded reset does not rebuild; set ``False`` for a fresh context anyway.
        settle: Wait for each page to settle before capturing it
            (``dreamgym.bridge.settle``). Off by default: a MiniWoB++ page changes
            inside the action's own event handlers and fetches nothing, so it is
            settled when the action returns, and waiting would only cost time.
    """

    name = "miniwob"

    def __init__(
        self, html_dir: Path | None = None, *, port: int = PORT, reuse_pages: bool = True, settle: bool = False
    ) -> None:
        if not 0 <= port < 65536:
            raise ConfigError(f"MiniWobSite port must be in 0-65535 (0: any free port), got {port}")
        self.html_dir = html_dir or miniwob_html()
        self.port = port
        self.reuse_pages = reuse_pages
        self.settle = settle
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/``, starting the page server on first use."""
        with self._lock:
            if self._server is None:
                handler = functools.partial(_QuietHandler, directory=str(self.html_dir))
                try:
                    self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
                except OSError as exc:  # taken: serve anyway, on a free port
                    self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
                    log.info(
                        "MiniWoB++ port %d is not free (%s); serving on %d, so page URLs differ from runs on %d",
                        self.port, exc.strerror, self._server.server_address[1], self.port,
                    )  # fmt: skip
                self._thread = threading.Thread(target=self._server.serve_forever, name="miniwob-http", daemon=True)
                self._thread.start()
            return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def task(self, name: str, *, max_steps: int = 0) -> Task:
        """The task ``miniwob/<name>``; its goal is drawn per seed (``Observation.goal``).

        Raises:
            ConfigError: No such task, or one the text action space cannot solve.
        """
        if name in EXCLUDED:
            raise ConfigError(f"MiniWoB task {name!r} is excluded: {EXCLUDED[name]}")
        if name not in all_tasks():
            raise ConfigError(f"no MiniWoB task {name!r}")
        return Task(
            task_id=f"miniwob/{name}",
            instruction=f"Do what the page asks (MiniWoB++ {name}).",
            site="miniwob",
            benchmark="miniwob",
            max_steps=max_steps,
            config_json=f'{{"page": "{_page_path(name)}"}}',
        )

    def url(self, task: Task) -> str:
        return self.base_url + _page_path(task.task_id.removeprefix("miniwob/"))

    def allowlist(self, task: Task) -> Allowlist:
        return Allowlist.of([self.base_url])

    def context_options(self, task: Task) -> dict[str, Any]:
        return {}

    def capture_root(self, task: Task) -> str | None:
        return None  # dialogs live outside #wrap; the scoreboard is hidden instead

    def can_reuse(self, page: Page, task: Task) -> bool:
        return self.reuse_pages and page.url.startswith(self.base_url)  # start() navigates if needed

    async def start(self, page: Page, task: Task, seed: int | None) -> str:
        url = self.url(task)
        if page.url != url:
            await page.goto(url, wait_until="load")
        await page.evaluate(_START, seed)
        await page.wait_for_function("() => WOB_TASK_READY === true")
        # The new problem's images load after startEpisodeReal; until they have, they have no
        # size and the snapshot leaves them out, so a cold page would differ from a warm one.
        await page.wait_for_function("() => [...document.images].every((image) => image.complete)")
        goal = await page.evaluate("() => core.getUtterance()")
        if isinstance(goal, dict):  # natural-language tasks answer {utterance, fields}
            goal = goal.get("utterance")
        if not isinstance(goal, str):
            raise BackendError(f"{task.task_id} gave no utterance")
        return goal

    async def outcome(self, page: Page, task: Task) -> tuple[float, bool]:
        done, raw = await page.evaluate(_OUTCOME)
        return (1.0 if done and raw > 0 else 0.0), bool(done)

    async def evaluate(self, page: Page, task: Task, answer: str) -> float:
        reward, _ = await self.outcome(page, task)
        return reward

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the page server; calling it again does nothing."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join()


def miniwob_tasks(names: Sequence[str], max_steps: int = 0) -> list[Task]:
    """The tasks ``miniwob/<name>`` of these names, each with this step limit (a task record needs no browser).

    Raises:
        ConfigError: No such task, or one the text action space cannot solve.
    """
    site = MiniWobSite()
    try:
        return [site.task(name, max_steps=max_steps) for name in names]
    finally:
        site.close()
