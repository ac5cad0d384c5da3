"""``WalkthroughDemonstrator``: a scripted policy that plays each game's own winning command sequence.

TextWorld writes a walkthrough into every game it generates (for cooking games: read the cookbook, fetch,
prepare, eat). The demonstrator finds the game of the task and seed on screen, sends the walkthrough's
command for the step the episode is at (a click on its button when the game lists it, else typed), and
stops when the walkthrough runs out. It seeds a store with winning episodes, as the MiniWoB++
demonstrators do.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import PolicyDecision
from dreamgym.core.state import flatten, parse_state
from dreamgym.core.types import Action, Observation, Step, Task
from dreamgym.textworlds._games import GameInfo
from dreamgym.textworlds._state import COMMAND_BOX
from dreamgym.textworlds._tasks import game_for, task_settings

__all__ = ["WalkthroughDemonstrator", "walkthrough_action"]


def walkthrough_action(observation: Observation, command: str) -> Action:
    """``click [cN] "command"`` when the observation lists ``command``, else ``type [cmd] [command]``."""
    for flat in flatten(parse_state(observation.state)):
        element = flat.element
        if element.role == "button" and element.name == command and element.id:
            return Action(name="click", args=(element.id,), label=command)
    return Action(name="type", args=(COMMAND_BOX, command, "1"), label="command")


class WalkthroughDemonstrator:
    """Plays the walkthrough of the game on screen (a :class:`~dreamgym.core.protocols.Policy`, no token records).

    The game is found from the task and the observation's ``url`` (``textworld://<content hash>``): a
    generated task's games are looked up among the seeds it was asked for, so give the demonstrator the
    seeds it will meet (``seeds``), else each is searched for in the task's cache folder.

    Raises:
        ConfigError: (from ``act``) the game has no walkthrough (a user's ``.z8`` without TextWorld's
            ``.json`` beside it), or no cached game of the task has the hash on screen.
    """

    policy_id = "textworld-walkthrough"

    def __init__(self, seeds: Sequence[int] = ()) -> None:
        self.seeds = tuple(seeds)
        self._games: dict[tuple[str, str], GameInfo] = {}

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        game = await anyio.to_thread.run_sync(self._game, task, observation.url.removeprefix("textworld://"))
        if not game.walkthrough:
            raise ConfigError(f"the game of {task.task_id} has no walkthrough to demonstrate; "
                              "give another policy (random, local, chat)")  # fmt: skip
        index = len(history)
        if index >= len(game.walkthrough):
            return PolicyDecision(action=Action(name="stop", args=("",)))
        return PolicyDecision(action=walkthrough_action(observation, game.walkthrough[index]))

    def _game(self, task: Task, content_hash: str) -> GameInfo:
        known = self._games.get((task.task_id, content_hash))
        if known is not None:
            return known
        config = task_settings(task)
        seeds: Sequence[int | None] = [None]
        if config["kind"] == "generated":
            seeds = self.seeds or _cached_seeds(task)
        for seed in seeds:
            game = game_for(task, seed)
            self._games[(task.task_id, game.content_hash)] = game
            if game.content_hash == content_hash:
                return game
        raise ConfigError(f"no game of {task.task_id} has content hash {content_hash!r} among seeds {list(seeds)[:10]}")


def _cached_seeds(task: Task) -> list[int | None]:
    from pathlib import Path

    from dreamgym.textworlds._games import GameCache, Recipe

    config = task_settings(task)
    cache = GameCache(Path(config["cache"]))
    folder = cache.root / Recipe(challenge=config["challenge"], settings=config["settings"]).key
    found: list[int | None] = []
    if folder.is_dir():
        found.extend(sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()))
    return found
