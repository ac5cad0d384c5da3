"""``TextWorldEnv``: the Environment protocol on TextWorld games (generated, a user's own, ALFWorld's PDDL).

One environment plays one episode at a time. The game engine (TextWorld's, over Jericho for ``.z8`` games
or its PDDL engine for ``.tw-pddl`` ones) is synchronous, so every call to it runs in a worker thread; an
engine stays open while episodes keep playing the same game and is replaced when the game changes.

Observations follow :mod:`dreamgym.textworlds._state`: the room, the game's answer, the inventory and the
score as static elements, the admissible commands as buttons. ``observation.goal`` is the game's
objective and ``observation.url`` is ``textworld://<content hash>``, which game is on screen.

Rewards and ends: a won game terminates with reward 1, a lost one with 0; with ``dense`` (a task's
``&dense=1``) each other step's reward is its score change over the game's maximum score. Reaching the
step limit truncates (``step_limit``). An engine that fails mid-episode cuts it: truncated, reason
``error``, the failure in ``last_action_error`` and ``info["error"]``, and the next reset starts a fresh
engine. A command the game does not know is data: the game's answer comes back as feedback, and
``last_action_error`` says it is not one of the game's commands.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec

from dreamgym.core.actions import missing_element_error
from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.protocols import StepResult
from dreamgym.core.types import Action, Observation, Source, Task
from dreamgym.textworlds._games import TEXTWORLD_LOCK, GameInfo, quiet_textworld
from dreamgym.textworlds._state import (
    COMMAND_BOX,
    CommandIds,
    DescriptionLines,
    TextFrame,
    clean_game_text,
    render_text_state,
)
from dreamgym.textworlds._tasks import game_for, task_settings

__all__ = ["TextWorldConfig", "TextWorldEnv", "open_game", "open_text_world_envs"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_TASK = "Your task is to:"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextWorldConfig:
    """How a :class:`TextWorldEnv` plays."""

    max_steps: int = 50
    """Step limit, unless the task sets ``max_steps``; reaching it truncates (``step_limit``)."""
    step_deadline_s: float = 30.0
    """One command; past it the engine counts as hung and the episode is cut (``deadline``)."""
    reset_deadline_s: float = 300.0
    """One reset, generating the game first if the cache lacks it (seconds; minutes for large worlds)."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigError(f"TextWorldConfig.max_steps must be >= 1, got {self.max_steps}")
        if self.step_deadline_s <= 0 or self.reset_deadline_s <= 0:
            raise ConfigError("TextWorldConfig's deadlines must be above 0 s")


def open_game(info: GameInfo) -> Any:
    """Start TextWorld's own environment on a game, asking for everything an observation shows.

    Raises:
        BackendError: The game file does not load (the message names it and why).
    """
    import textworld

    if problem := story_file_problem(info.path):
        raise BackendError(f"the game {info.path} does not load: {problem}")
    infos = textworld.EnvInfos(
        feedback=True, description=True, inventory=True, admissible_commands=True, won=True, lost=True,
        score=True, max_score=True, objective=True,
    )  # fmt: skip
    try:
        with quiet_textworld():
            if info.path.suffix == ".tw-pddl":  # given as data: TextWorld's own load leaves the file open
                from textworld.envs import PddlEnv

                env = PddlEnv(infos)
                env.load(json.loads(info.path.read_text()))
                return env
            return textworld.start(str(info.path), request_infos=infos)
    except Exception as exc:  # IOError, ValueError, Jericho's and the PDDL parser's own: all mean "does not load"
        raise BackendError(f"the game {info.path} does not load: {_first_line(exc)}") from exc


@dataclass
class _Episode:
    task: Task
    seed: int | None
    game: GameInfo
    dense: bool
    limit: int
    lines: DescriptionLines = "sentence"
    ids: CommandIds = field(default_factory=CommandIds)
    commands: tuple[str, ...] = ()
    score: int = 0
    max_score: int = 0
    intro: str = ""
    """The game's opening text: the room where the engine tells no ``description`` (PDDL games)."""
    steps: int = 0
    done: bool = False
    last: Observation = field(default_factory=lambda: Observation(state=""))


class TextWorldEnv:
    """A real text-world environment (``source = "real"``) for tasks of ``benchmark == "textworld"``.

    Args:
        config: Step limit and deadlines.

    Example:
        >>> env = TextWorldEnv()
        >>> task = parse_text_world_tasks("textworld:custom?rooms=1&quest=1")[0][0]
        >>> observation = await env.reset(task, seed=3)
        >>> result = await env.step(parse_action("click [c1]"))
        >>> await env.aclose()
    """

    source: Source = "real"

    def __init__(self, config: TextWorldConfig | None = None) -> None:
        self.config = config or TextWorldConfig()
        self._engine: Any = None
        self._engine_path: str = ""
        self._episode: _Episode | None = None
        self._closed = False

    @property
    def engine(self) -> Any:
        """TextWorld's environment under this one (``None`` before the first reset): for benchmarks and tests."""
        return self._engine

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Start an episode of ``task`` (its game of ``seed``, generated first if needed).

        Raises:
            ConfigError: The task is not a text-world task, or its recipe is refused.
            BackendError: The game does not load, or did not start within the reset deadline.
        """
        if self._closed:
            raise ConfigError("this TextWorldEnv is closed; make a new one")
        settings = task_settings(task)
        self._episode = None
        try:
            with anyio.fail_after(self.config.reset_deadline_s):
                game = await anyio.to_thread.run_sync(game_for, task, seed)
                state = await self._call(functools.partial(self._start, game), wait_s=self.config.reset_deadline_s)
        except TimeoutError as exc:
            raise BackendError(f"task {task.task_id} did not start within {self.config.reset_deadline_s} s") from exc
        limit = task.max_steps or self.config.max_steps
        episode = _Episode(task=task, seed=seed, game=game, dense=bool(settings.get("dense")), limit=limit,
                           lines="paragraph" if settings.get("lines") == "paragraph" else "sentence")  # fmt: skip
        episode.max_score = int(_get(state, "max_score", game.max_score) or 0)
        episode.intro = clean_game_text(_get(state, "feedback", ""))
        episode.last = self._observe(episode, state, feedback="")
        self._episode = episode
        return episode.last

    async def step(self, action: Action) -> StepResult:
        """Send the command ``action`` names (see the module docstring for failures).

        Raises:
            ConfigError: ``reset`` was never called.
        """
        episode = self._episode
        if episode is None:
            raise ConfigError("call reset(task) before step()")
        if episode.done:
            over = msgspec.structs.replace(episode.last, last_action_error="the episode is over; call reset()")
            return StepResult(observation=over, reward=0.0, terminated=False, truncated=False)
        if action.name == "stop":
            episode.done = True
            return self._result(episode, episode.last, 0.0, terminated=True)
        command, error = self._command(episode, action)
        if command is None:
            return self._counted(episode, msgspec.structs.replace(episode.last, last_action_error=error), 0.0)
        episode.steps += 1
        try:
            with anyio.fail_after(self.config.step_deadline_s):
                state, _, _ = await self._call(functools.partial(self._engine.step, command))
        except TimeoutError:
            return self._cut(episode, "deadline", f"the game did not answer within {self.config.step_deadline_s} s")
        except Exception as exc:
            log.warning("text-world engine failed on %r in %s: %s", command, episode.task.task_id, exc)
            return self._cut(episode, "error", f"the game engine failed: {_first_line(exc)}")
        return self._after(episode, command, state)

    async def aclose(self) -> None:
        """Close the engine; calling it again does nothing."""
        self._closed = True
        self._episode = None
        await anyio.to_thread.run_sync(self._close_engine)

    # ------------------------------------------------------------------ internals

    async def _call(self, fn: Callable[[], T], *, wait_s: float | None = None) -> T:
        locked = functools.partial(_locked, fn, wait_s or self.config.step_deadline_s)
        return await anyio.to_thread.run_sync(locked, abandon_on_cancel=True)

    def _start(self, game: GameInfo) -> Any:
        if self._engine is None or self._engine_path != str(game.path):
            self._close_engine()
            self._engine = open_game(game)
            self._engine_path = str(game.path)
        try:
            return self._engine.reset()
        except Exception as exc:
            self._close_engine()
            raise BackendError(f"the game {game.path} does not start: {_first_line(exc)}") from exc

    def _close_engine(self) -> None:
        engine, self._engine, self._engine_path = self._engine, None, ""
        if engine is None:
            return
        # A hung engine's thread may hold the lock for good: then the engine is left to the garbage collector.
        if not TEXTWORLD_LOCK.acquire(timeout=1.0):
            log.warning("a text-world engine was left unclosed: TextWorld is busy in another thread")
            return
        try:
            engine.close()
        except Exception as exc:  # a dead engine may fail to close; it is gone either way
            log.debug("closing a text-world engine failed: %s", exc)
        finally:
            TEXTWORLD_LOCK.release()

    def _command(self, episode: _Episode, action: Action) -> tuple[str | None, str]:
        """The command to send, or ``None`` and why the action cannot be one."""
        if action.is_invalid:
            return None, action.error or f"not an action: {action.raw!r}"
        if action.name == "click":
            command = episode.ids.command_of(action.args[0])
            if command is None or command not in episode.commands:
                return None, missing_element_error(action.args[0])
            return command, ""
        if action.name == "type":
            if action.args[0] != COMMAND_BOX:
                return None, f"type commands into [{COMMAND_BOX}]: type [{COMMAND_BOX}] [open fridge]"
            command = " ".join(action.args[1].split())
            return (command, "") if command else (None, "type a command: the text was empty")
        return None, (f"{action.name} does nothing in a text world: click [cN] on a command, "
                      f"or type [{COMMAND_BOX}] [your command]")  # fmt: skip

    def _after(self, episode: _Episode, command: str, state: Any) -> StepResult:
        score = int(_get(state, "score", 0) or 0)
        won, lost = bool(_get(state, "won", False)), bool(_get(state, "lost", False))
        gained, episode.score = score - episode.score, score
        known = command in episode.commands
        observation = self._observe(episode, state, feedback=_get(state, "feedback", ""))
        if not known:
            answer = " ".join(clean_game_text(_get(state, "feedback", "")).split())
            observation = msgspec.structs.replace(
                observation, last_action_error=f"{command!r} is not one of the game's commands here; it says: {answer}"
            )
        episode.last = observation
        if won or lost:
            episode.done = True
            return self._result(episode, observation, 1.0 if won else 0.0, terminated=True, won=won, lost=lost)
        reward = gained / episode.max_score if episode.dense and episode.max_score else 0.0
        return self._counted(episode, observation, reward)

    def _counted(self, episode: _Episode, observation: Observation, reward: float) -> StepResult:
        """A step that did not end the game: truncated when it reaches the step limit."""
        episode.last = observation
        if episode.steps >= episode.limit:
            episode.done = True
            return self._result(episode, observation, reward, truncated="step_limit")
        return self._result(episode, observation, reward)

    def _cut(self, episode: _Episode, reason: str, message: str) -> StepResult:
        episode.done = True
        self._close_engine()
        observation = msgspec.structs.replace(episode.last, last_action_error=message)
        episode.last = observation
        return self._result(episode, observation, 0.0, truncated=reason, error=message)

    def _result(
        self,
        episode: _Episode,
        observation: Observation,
        reward: float,
        *,
        terminated: bool = False,
        truncated: str = "",
        won: bool = False,
        lost: bool = False,
        error: str = "",
    ) -> StepResult:
        info: dict[str, Any] = {"score": episode.score, "max_score": episode.max_score, "won": won, "lost": lost,
                                "game": episode.game.content_hash}  # fmt: skip
        if error:
            info["error"] = error
        return StepResult(
            observation=observation, reward=reward, terminated=terminated, truncated=bool(truncated),
            truncation_reason=truncated, info=info,
        )  # fmt: skip

    def _observe(self, episode: _Episode, state: Any, *, feedback: str) -> Observation:
        commands = tuple(_get(state, "admissible_commands", ()) or ())
        episode.commands = commands
        description = clean_game_text(_get(state, "description", "")) or (episode.intro if not feedback else "")
        frame = TextFrame(
            description=description,
            feedback=clean_game_text(feedback),
            inventory=clean_game_text(_get(state, "inventory", "")),
            score=episode.score if episode.max_score else None,
            max_score=episode.max_score or None,
            commands=commands,
        )
        objective = str(_get(state, "objective", "") or episode.game.objective)
        if not objective and _TASK in episode.intro:  # ALFWorld states its goal in the intro
            objective = episode.intro.split(_TASK, 1)[1]
        objective = " ".join(objective.split())
        return Observation(
            state=render_text_state(frame, episode.ids, lines=episode.lines),
            url=f"textworld://{episode.game.content_hash}",
            goal=objective,
        )


def story_file_problem(path: Path) -> str:
    """Why a ``.z5``/``.z8`` file is not a Z-machine story Jericho can load (``""`` when it looks like one).

    Jericho's loader trusts the header: garbage can make it hang or crash the process, so the header is
    read first (byte 0 is the Z-machine version, which the suffix repeats; a header is 64 bytes).
    """
    if path.suffix not in (".z5", ".z8"):
        return ""
    try:
        header = path.read_bytes()[:64]
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if len(header) < 64:
        return "it is shorter than a Z-machine header (64 bytes)"
    version = int(path.suffix[2])
    if header[0] != version:
        return f"it is not a version-{version} Z-machine story (its first byte is {header[0]})"
    declared = int.from_bytes(header[0x1A:0x1C], "big") * (8 if version == 8 else 4)
    if declared and path.stat().st_size < declared:
        return f"it is cut short ({path.stat().st_size} of the {declared} bytes its header declares)"
    return ""


def _locked(fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` under :data:`TEXTWORLD_LOCK`; a lock held past ``timeout`` (an engine hung in another
    thread holds it for good) is a :class:`BackendError`, so the episode is cut instead of hanging."""
    if not TEXTWORLD_LOCK.acquire(timeout=timeout):
        raise BackendError(f"TextWorld stayed busy in another thread for {timeout} s (a hung game engine)")
    try:
        return fn()
    finally:
        TEXTWORLD_LOCK.release()


def _get(state: Any, key: str, default: Any) -> Any:
    value = state.get(key, default) if hasattr(state, "get") else default
    return default if value is None else value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@asynccontextmanager
async def open_text_world_envs(config: TextWorldConfig | None = None) -> AsyncIterator[Callable[[], TextWorldEnv]]:
    """Yield a factory of text-world environments: what a job's stack opens in place of browsers when its
    tasks are text worlds (``dreamgym.jobs.StackSettings.real_envs``). Nothing to start or stop: each
    environment starts its own engine and the runtime closes it."""
    yield lambda: TextWorldEnv(config)
