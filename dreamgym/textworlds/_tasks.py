"""Text-world tasks: the ``textworld:`` grammar of ``--tasks``, the :class:`~dreamgym.core.types.Task` records
it makes, and the game a (task, seed) pair plays.

Grammar (one spec per ``--tasks``)::

    textworld:cooking?recipe=2&take=1&go=1     TextWorld's cooking games; one task, one game per seed
    textworld:custom?rooms=2&objects=4&quest=2 TextWorld's custom games (rooms, distractor objects, quest length)
    ...&dense=1                                reward each score change (score delta / max score) too
    ...&lines=paragraph                        the room's description a line per paragraph, not per
                                               sentence (``dreamgym.textworlds._state``)
    textworld:PATH                             a game file (.z8, .z5, .tw-pddl), or a folder: every game
                                               file under it (an ALFWorld data folder holds a game.tw-pddl
                                               per task); one task per file, no seeds

Settings left out take the recipe's defaults (:class:`~dreamgym.textworlds.Recipe`). A generated task's
seed is TextWorld's generation seed, so the seeds table of DESIGN.md applies to games as to MiniWoB++
pages; the task's ``config_json`` records the recipe and the cache folder, so any process finds the game.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Task
from dreamgym.textworlds._games import GameCache, GameInfo, Recipe, file_game_info
from dreamgym.textworlds._state import DESCRIPTION_LINES, DescriptionLines

__all__ = [
    "BENCHMARK",
    "COOKING_FAMILY",
    "GAME_SUFFIXES",
    "INSTRUCTION",
    "PREFIX",
    "file_tasks",
    "game_for",
    "generated_task",
    "is_text_world",
    "parse_text_world_tasks",
    "seeds_apart",
    "task_settings",
]

PREFIX = "textworld:"
"""What a ``--tasks`` value of text worlds starts with."""
BENCHMARK = "textworld"
"""``Task.benchmark`` (and ``site``) of every text-world task."""
GAME_SUFFIXES = (".z8", ".z5", ".tw-pddl")
"""Game files a ``textworld:PATH`` may name (or a folder may hold)."""
COOKING_FAMILY = "textworld:cooking?recipe=1&take=1&go=1"
"""The named family to learn on (TextWorld 1.7.0): cooking games of one kitchen, a one-ingredient recipe,
the ingredient to fetch. On 20 validation games a uniform random policy won 0 of 60 episodes within 30
steps, and no state listed more than 52 commands (an index policy offers 64 choices); see
``benchmarks/results/textworld_family.json``."""
INSTRUCTION = "Win the text game: do what its objective says, one command at a time."
"""Every text-world task's instruction; each game states its own objective as the observation's goal."""


def is_text_world(task: Task) -> bool:
    return task.benchmark == BENCHMARK


def parse_text_world_tasks(spec: str, *, cache_root: Path | None = None, max_steps: int = 0) -> tuple[list[Task], bool]:
    """The tasks of a ``textworld:`` spec (see the module docstring), and whether they take seeds.

    Raises:
        ConfigError: The spec names no recipe or file, a setting TextWorld would refuse, or a path
            that holds no game; the message says which.

    Example:
        >>> tasks, seeded = parse_text_world_tasks("textworld:cooking?recipe=2&take=1")
        >>> tasks[0].task_id, seeded
        ('textworld/cooking+recipe2+take1+go1', True)
    """
    body = spec.strip().removeprefix(PREFIX)
    if not body:
        raise ConfigError(f"{spec!r} names no game: write textworld:cooking?recipe=2 or textworld:PATH")
    name, _, query = body.partition("?")
    if name in ("cooking", "custom"):
        settings, dense, lines = _settings(query, spec)
        recipe = Recipe(challenge=name, settings=settings)
        return [generated_task(recipe, dense=dense, lines=lines, cache_root=cache_root, max_steps=max_steps)], True
    path = Path(body).expanduser()
    if not path.exists():
        raise ConfigError(f"{spec!r}: no game file or folder at {path} (generated games: textworld:cooking?...)")
    return file_tasks(path, max_steps=max_steps), False


def _settings(query: str, spec: str) -> tuple[dict[str, int], bool, DescriptionLines]:
    settings: dict[str, int] = {}
    lines: DescriptionLines = "sentence"
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "lines":
            if value not in DESCRIPTION_LINES:
                raise ConfigError(f"{spec!r}: lines must be one of {', '.join(DESCRIPTION_LINES)}, not {value!r}")
            lines = "paragraph" if value == "paragraph" else "sentence"
            continue
        try:
            settings[key] = int(value)
        except ValueError:
            raise ConfigError(f"{spec!r}: {key}={value!r} is not a whole number") from None
    dense = settings.pop("dense", 0)
    if dense not in (0, 1):
        raise ConfigError(f"{spec!r}: dense must be 0 or 1")
    return settings, bool(dense), lines


def generated_task(
    recipe: Recipe,
    *,
    dense: bool = False,
    lines: DescriptionLines = "sentence",
    cache_root: Path | None = None,
    max_steps: int = 0,
) -> Task:
    """The task of a recipe's games (one per seed), cached under ``cache_root``."""
    config = {
        "kind": "generated",
        "challenge": recipe.challenge,
        "settings": dict(recipe.settings),
        "dense": dense,
        "lines": lines,
        "cache": str(GameCache(cache_root).root),
    }
    return Task(
        task_id=f"textworld/{recipe.key}"
        + ("+dense" if dense else "")
        + ("+paragraphs" if lines == "paragraph" else ""),
        instruction=INSTRUCTION,
        site=BENCHMARK,
        benchmark=BENCHMARK,
        max_steps=max_steps,
        config_json=json.dumps(config),
    )


def file_tasks(path: Path, *, max_steps: int = 0, dense: bool = False) -> list[Task]:
    """One task per game file at ``path`` (a file, or every game file under a folder, sorted).

    Raises:
        ConfigError: The file is not a game TextWorld plays, or the folder holds none.
    """
    path = path.expanduser().resolve()
    if path.is_file():
        if not path.name.endswith(GAME_SUFFIXES):
            raise ConfigError(f"{path} is not a game TextWorld plays here: give a {', '.join(GAME_SUFFIXES)} file")
        files, base = [path], path.parent
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(GAME_SUFFIXES))
        base = path
        if not files:
            raise ConfigError(f"{path} holds no game file ({', '.join(GAME_SUFFIXES)}); an ALFWorld data folder "
                              "holds one game.tw-pddl per task")  # fmt: skip
    tasks = []
    for file in files:
        name = file.stem if path.is_file() else f"{base.name}/{file.relative_to(base).with_suffix('').as_posix()}"
        config = {"kind": "file", "path": str(file), "dense": dense}
        tasks.append(Task(task_id=f"textworld/{name}", instruction=INSTRUCTION, site=BENCHMARK, benchmark=BENCHMARK,
                          max_steps=max_steps, config_json=json.dumps(config)))  # fmt: skip
    return tasks


def task_settings(task: Task) -> dict[str, Any]:
    """A text-world task's ``config_json`` as a dict.

    Raises:
        ConfigError: The task is not a text-world task, or its config is damaged.
    """
    if not is_text_world(task):
        raise ConfigError(f"task {task.task_id} is not a text-world task (benchmark {task.benchmark!r})")
    try:
        config = json.loads(task.config_json)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"task {task.task_id} has a config_json that is not JSON: {exc}") from exc
    if not isinstance(config, dict) or config.get("kind") not in ("generated", "file"):
        raise ConfigError(f"task {task.task_id}: its config_json names no generated or file game")
    return config


def game_for(task: Task, seed: int | None) -> GameInfo:
    """The game ``task`` plays with ``seed`` (generated now if the cache lacks it; a file game ignores the seed).

    Raises:
        ConfigError: The task names no game, the recipe is refused, or the file is gone.
    """
    config = task_settings(task)
    if config["kind"] == "file":
        return file_game_info(Path(config["path"]))
    if seed is None:
        raise ConfigError(f"task {task.task_id} generates one game per seed: give a seed")
    recipe = Recipe(challenge=config["challenge"], settings=config["settings"])
    return GameCache(Path(config["cache"])).game(recipe, seed)


def seeds_apart(task: Task, seeds: Sequence[int], held_out: Sequence[int]) -> list[int]:
    """The seeds of ``seeds`` whose games are none of the ``held_out`` seeds' games, told apart by content.

    Small worlds repeat: two seeds can make the same game, and a held-out game must stay unseen whatever
    seed makes it. Generates the games it does not have cached.

    Example:
        >>> seeds_apart(task, range(80), range(1000, 1040))  # training seeds whose worlds no held-out game has
    """
    held = {game_for(task, seed).content_hash for seed in held_out}
    return [seed for seed in seeds if game_for(task, seed).content_hash not in held]
