"""WebArena task configs on live sites: loading, site URLs, login state, evaluation at the end.

Configs come in the format of WebArena's ``test.raw.json`` (a list) or its
older per-task examples (one object, ``reference_answers`` as a list).
URLs in them use placeholders (``__SHOPPING__``, ...) that resolve, at run
time, to the environment variables WebArena uses (``SHOPPING``, ...). A task
that requires login starts from its ``storage_state`` file, looked up in the
auth directory (``$WEBARENA_AUTH_DIR``, default ``./.auth``). A stateful
site (a shop whose orders change, a forum whose posts do) takes a reset
command, run before every episode: its episodes must then run one at a time
(``RuntimeConfig.real_concurrency=1``; the command line sets it). A login
command renews a task's ``storage_state`` when it is missing or a cookie in
it has expired (WebArena's harness logs in again before each task), so a long
run does not go on logged out, scoring 0 without a word.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.bridge.evaluators import Judge, SiteUrls, evaluate_webarena
from dreamgym.bridge.sites import task_config
from dreamgym.core.errors import BackendError, ConfigError, UsageError
from dreamgym.core.types import Task

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["SITE_VARIABLES", "WebArenaSite", "load_webarena", "placeholders", "site_urls", "site_urls_from_env"]

SITE_VARIABLES = {
    "shopping": "SHOPPING",
    "shopping_admin": "SHOPPING_ADMIN",
    "reddit": "REDDIT",
    "gitlab": "GITLAB",
    "map": "MAP",
    "wikipedia": "WIKIPEDIA",
    "homepage": "HOMEPAGE",
}
"""A config's site name → the environment variable holding its base URL."""


_PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9_]*?)__")


def site_urls_from_env(environ: Mapping[str, str] | None = None) -> SiteUrls:
    """The site URLs (and the shopping admin login the helpers use) from the environment: WebArena's
    variables (``SHOPPING``, ...) and BrowserGym's ``WA_SHOPPING``-style names (WebArena's win)."""
    environ = os.environ if environ is None else environ
    urls = {var: environ[f"WA_{var}"] for var in SITE_VARIABLES.values() if environ.get(f"WA_{var}")}
    urls.update({var: environ[var] for var in SITE_VARIABLES.values() if environ.get(var)})
    return SiteUrls(
        urls,
        admin_user=environ.get("SHOPPING_ADMIN_USER", "admin"),
        admin_password=environ.get("SHOPPING_ADMIN_PASSWORD", "admin1234"),
    )


def site_urls(pairs: Sequence[str], environ: Mapping[str, str] | None = None) -> SiteUrls:
    """The environment's site URLs (:func:`site_urls_from_env`) with ``NAME=URL`` pairs over them: each
    fills the placeholder ``__NAME__`` (upper-cased), WebArena's (``shopping=...`` fills
    ``__SHOPPING__``) or any a config of a user's own uses (``shop=...`` fills ``__SHOP__``).

    Raises:
        UsageError: A pair is not ``NAME=URL`` with an http(s) URL.
    """
    base = site_urls_from_env(environ)
    urls = dict(base.urls)
    for pair in pairs:
        name, equals, url = pair.partition("=")
        if (
            not equals
            or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name.strip())
            or not url.startswith(("http://", "https://"))
        ):
            raise UsageError(f"--site {pair!r}: write NAME=URL, e.g. shopping=http://127.0.0.1:7770")
        urls[name.strip().upper()] = url.strip().rstrip("/")
    return SiteUrls(urls, admin_user=base.admin_user, admin_password=base.admin_password)


def placeholders(task: Task) -> set[str]:
    """The ``__NAME__`` placeholders a task's start URL and config use (the names, upper-case)."""
    return set(_PLACEHOLDER.findall(task.start_url)) | set(_PLACEHOLDER.findall(task.config_json))


def load_webarena(path: str | os.PathLike[str]) -> list[Task]:
    """Tasks from a config file (a list or one object) or a directory of them.

    Raises:
        ConfigError: A config is not JSON or lacks a field every config has.
    """
    source = Path(path)
    files = sorted(source.glob("*.json")) if source.is_dir() else [source]
    tasks: list[Task] = []
    for file in files:
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read WebArena configs from {file}: {exc}") from exc
        for config in data if isinstance(data, list) else [data]:
            tasks.append(_task(config, file))
    return tasks


def _task(config: Any, file: Path) -> Task:
    if not isinstance(config, dict):
        raise ConfigError(f"{file}: a WebArena config must be an object")
    missing = [key for key in ("task_id", "intent", "start_url", "eval", "sites") if key not in config]
    if missing or "eval_types" not in config.get("eval", {}):
        raise ConfigError(f"{file}: config {config.get('task_id', '?')} lacks {missing or ['eval.eval_types']}")
    return Task(
        task_id=f"webarena/{config['task_id']}",
        instruction=config["intent"],
        site=",".join(config["sites"]),
        start_url=config["start_url"],
        benchmark="webarena",
        config_json=json.dumps(config),
    )


class WebArenaSite:
    """Runs WebArena-format tasks against the sites the environment variables name.

    Args:
        urls: Site base URLs; default :func:`site_urls_from_env`.
        auth_dir: Where ``storage_state`` files live; default ``$WEBARENA_AUTH_DIR`` or ``./.auth``.
        judge: The LLM judge for ``fuzzy_match`` (tasks that need one fail clearly without it).
        reset_command: A shell command run before every episode (:meth:`prepare`) that brings a
            stateful site back to its starting state; episodes must then run one at a time.
        reset_timeout_s: How long the reset command (and the login command) may take.
        login_command: A shell command that logs in and saves the task's ``storage_state``, run
            before an episode whose login state is missing or holds an expired cookie. It gets
            ``DREAMGYM_LOGIN_STATE`` (the file to write), ``DREAMGYM_LOGIN_SITES`` (the config's
            sites, comma-separated) and the site URLs (``SHOPPING``, ...) in its environment.
    """

    name = "webarena"
    settle = True  # live sites build their pages after loading

    def __init__(
        self,
        urls: SiteUrls | None = None,
        *,
        auth_dir: str | None = None,
        judge: Judge | None = None,
        reset_command: str | None = None,
        reset_timeout_s: float = 600.0,
        login_command: str | None = None,
    ):
        self.urls = urls or site_urls_from_env()
        self.auth_dir = Path(auth_dir or os.environ.get("WEBARENA_AUTH_DIR") or ".auth")
        self.judge = judge
        self.reset_command = reset_command
        self.reset_timeout_s = reset_timeout_s
        self.resets = 0
        """Reset commands run so far."""
        self.login_command = login_command
        self.logins = 0
        """Login commands run so far."""
        self._login_lock: anyio.Lock | None = None  # made in the event loop, at first use

    async def prepare(self, task: Task) -> None:
        """Before an episode's browser context opens: run the reset command, then renew the login state.

        Raises:
            BackendError: A command failed, or outlasted ``reset_timeout_s``, or the login command
                left no fresh login state: the episode does not start on a site in an unknown state
                (the runtime records it as cut, with the command's last line of output).
            ConfigError: The login state expired and there is no login command to renew it.
        """
        if self.reset_command:
            await self._run(self.reset_command, "reset", task)
            self.resets += 1
        path = self._login_state(task)
        if path is None or _fresh(path):
            return
        if self._login_lock is None:
            self._login_lock = anyio.Lock()
        async with self._login_lock:  # episodes in flight together log in once
            await self._renew(task, path)

    async def _renew(self, task: Task, path: Path) -> None:
        if _fresh(path):
            return  # another episode renewed it while this one waited
        if not self.login_command:
            if not path.exists():
                return  # context_options says what is missing
            raise ConfigError(
                f"task {task.task_id}'s login state {path} does not parse or holds an expired cookie: log in "
                "again and save it, or give a login command (--login-command) that does"
            )
        sites = ",".join(task_config(task).get("sites", []))
        env = {**os.environ, **self.urls.urls, "DREAMGYM_LOGIN_STATE": str(path), "DREAMGYM_LOGIN_SITES": sites}
        await self._run(self.login_command, "login", task, env=env)
        self.logins += 1
        if not _fresh(path):
            raise BackendError(f"the login command left no fresh login state at {path} for task {task.task_id}")

    async def _run(self, command: str, what: str, task: Task, env: Mapping[str, str] | None = None) -> None:
        try:
            with anyio.fail_after(self.reset_timeout_s):
                result = await anyio.run_process(["/bin/sh", "-c", command], check=False, env=env)
        except TimeoutError:
            raise BackendError(
                f"the {what} command did not finish within {self.reset_timeout_s:g} s: {shlex.quote(command)}"
            ) from None
        if result.returncode != 0:
            said = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
            raise BackendError(
                f"the {what} command exited with status {result.returncode} before task {task.task_id}"
                + (f": {said[-1]}" if said else "")
            )

    def _login_state(self, task: Task) -> Path | None:
        """Where the task's login state lives; ``None`` when it needs none."""
        config = task_config(task)
        state = config.get("storage_state")
        if not (state and config.get("require_login", True)):
            return None
        return self.auth_dir / Path(state).name

    def allowlist(self, task: Task) -> Allowlist:
        config = task_config(task)
        sites = [self.urls.urls.get(SITE_VARIABLES.get(s, s.upper()), "") for s in config.get("sites", [])]
        home = self.urls.urls.get("HOMEPAGE", "")
        return Allowlist.of([*sites, home, *self._start_urls(task)])

    def _start_urls(self, task: Task) -> list[str]:
        return [self.urls.resolve(url.strip()) for url in task.start_url.split(" |AND| ") if url.strip()]

    def context_options(self, task: Task) -> dict[str, Any]:
        path = self._login_state(task)
        if path is None:
            return {}
        if not path.exists():
            raise ConfigError(
                f"task {task.task_id} needs the login state {path}; save one with Playwright's "
                "context.storage_state(path=...) after logging in, give a login command (--login-command) "
                "that saves it, or set WEBARENA_AUTH_DIR"
            )
        return {"storage_state": str(path)}

    def capture_root(self, task: Task) -> str | None:
        return None

    def can_reuse(self, page: Page, task: Task) -> bool:
        return False  # every episode starts from a fresh context (and its login state)

    async def start(self, page: Page, task: Task, seed: int | None) -> str:
        first, *others = self._start_urls(task)
        for url in others:  # WebArena opens each " |AND| " URL in a tab of its own
            extra = await page.context.new_page()
            await extra.goto(url, wait_until="domcontentloaded")
        await page.bring_to_front()
        await page.goto(first, wait_until="domcontentloaded")
        return ""

    async def outcome(self, page: Page, task: Task) -> tuple[float, bool]:
        return 0.0, False  # evaluated once, when the agent stops

    async def evaluate(self, page: Page, task: Task, answer: str) -> float:
        return await evaluate_webarena(task_config(task), page, answer, self.urls, self.judge)

    async def aclose(self) -> None:
        pass


_LOGIN_MARGIN_S = 60.0
"""A cookie that expires within this many seconds counts as expired: an episode must not outlive its login."""


def _fresh(path: Path) -> bool:
    """Whether the Playwright ``storage_state`` file at ``path`` exists, parses, and holds no cookie that has
    expired or expires within :data:`_LOGIN_MARGIN_S` (session cookies, ``expires`` -1, never expire here)."""
    limit = time.time() + _LOGIN_MARGIN_S
    try:
        cookies = json.loads(path.read_text()).get("cookies", [])
        return all(not (0 < float(c.get("expires", -1)) < limit) for c in cookies)
    except (OSError, ValueError, TypeError, AttributeError):
        return False
