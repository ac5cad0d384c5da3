"""Text-world games: recipes that TextWorld generates from, the generation cache, and a game's content hash.

A :class:`Recipe` names a family of generated games (TextWorld's cooking games, or its custom games of a
few rooms and a quest); a (recipe, seed) pair names one game. :class:`GameCache` generates each pair once,
with TextWorld's own generator seeded by the seed, into ``<root>/<recipe key>/<seed>/`` (``game.z8``, the
``game.json`` TextWorld writes beside it, and ``meta.json``), written to a temporary folder first and moved
into place, so a cut generation leaves nothing half-made. Nothing is downloaded: TextWorld compiles its
games with the Inform 7 compiler its wheel ships.

Small worlds repeat across seeds, so a game is told apart by :func:`game_hash`, a digest of the generated
game's content (its world, quests and text, without the metadata that names the seed), not by its seed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.core.errors import ConfigError

__all__ = [
    "CHALLENGES",
    "TEXTWORLD_LOCK",
    "GameCache",
    "GameInfo",
    "Recipe",
    "default_cache_root",
    "file_game_info",
    "game_hash",
]

log = logging.getLogger(__name__)

CHALLENGES = ("cooking", "custom")
"""Recipe kinds: TextWorld's cooking games (``tw-cooking``) and its custom games (``tw-make custom``)."""

_COOKING_DEFAULTS: dict[str, int] = {"recipe": 1, "take": 1, "go": 1, "open": 0, "cook": 0, "cut": 0, "drop": 0}
_CUSTOM_DEFAULTS: dict[str, int] = {"rooms": 2, "objects": 4, "quest": 2}
_GO = (1, 6, 9, 12)
TEXTWORLD_LOCK = threading.RLock()
"""TextWorld keeps module-wide state (its knowledge base, its TatSu grammar parsers) that two threads at once
corrupt: every call into it, generating, loading or playing, holds this lock."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """A family of generated games: a challenge and its settings (integers; flags are 0 or 1).

    ``cooking``: ``recipe`` ingredients in the recipe (1-5), ``take`` of them to fetch (<= ``recipe``),
    ``go`` rooms (1, 6, 9 or 12), and the flags ``open``, ``cook``, ``cut``, ``drop``.
    ``custom``: ``rooms`` (1-10), ``objects`` (>= 0), ``quest`` (its length, 1-10).

    Raises:
        ConfigError: An unknown challenge or setting, or a value TextWorld would refuse.

    Example:
        >>> Recipe(challenge="cooking", settings={"recipe": 2, "take": 1}).key
        'cooking+recipe2+take1+go1'
    """

    challenge: str
    settings: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.challenge not in CHALLENGES:
            raise ConfigError(f"unknown text-world challenge {self.challenge!r}; use one of {', '.join(CHALLENGES)}")
        defaults = self.defaults()
        if unknown := sorted(set(self.settings) - set(defaults)):
            raise ConfigError(f"{self.challenge} games have no setting {unknown[0]!r}; use {', '.join(defaults)}")
        merged = {**defaults, **self.settings}
        object.__setattr__(self, "settings", merged)
        problem = _cooking_problem(merged) if self.challenge == "cooking" else _custom_problem(merged)
        if problem:
            raise ConfigError(f"TextWorld cannot make {self.challenge} games with {problem}")

    def defaults(self) -> dict[str, int]:
        return dict(_COOKING_DEFAULTS if self.challenge == "cooking" else _CUSTOM_DEFAULTS)

    @property
    def key(self) -> str:
        """A file-name-safe name of the recipe: the challenge, then every non-flag setting and the flags set."""
        parts = [self.challenge]
        for name, value in self.settings.items():
            if name in ("open", "cook", "cut", "drop"):
                parts += [name] if value else []
            else:
                parts.append(f"{name}{value}")
        return "+".join(parts)


def _cooking_problem(s: Mapping[str, int]) -> str:
    if not 1 <= s["recipe"] <= 5:
        return f"recipe={s['recipe']} (give 1 to 5 ingredients)"
    if not 0 <= s["take"] <= s["recipe"]:
        return f"take={s['take']} (give 0 to recipe={s['recipe']} ingredients to fetch)"
    if s["go"] not in _GO:
        return f"go={s['go']} (TextWorld's cooking games have 1, 6, 9 or 12 rooms)"
    if any(s[flag] not in (0, 1) for flag in ("open", "cook", "cut", "drop")):
        return "a flag other than 0 or 1 (open, cook, cut, drop)"
    return ""


def _custom_problem(s: Mapping[str, int]) -> str:
    if not 1 <= s["rooms"] <= 10:
        return f"rooms={s['rooms']} (give 1 to 10)"
    if s["objects"] < 0:
        return f"objects={s['objects']} (give 0 or more)"
    if not 1 <= s["quest"] <= 10:
        return f"quest={s['quest']} (give a quest length of 1 to 10)"
    return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class GameInfo:
    """One game on disk and what dreamgym needs to know of it."""

    path: Path
    """The game file TextWorld plays (``.z8``, or a ``.tw-pddl`` file)."""
    content_hash: str
    """:func:`game_hash` of a generated game; the file's digest for a user's game."""
    objective: str = ""
    walkthrough: tuple[str, ...] = ()
    """A winning command sequence where the game has one (TextWorld's walkthrough); empty otherwise."""
    max_score: int = 0


@contextmanager
def quiet_textworld() -> Iterator[None]:
    """Silence the warning Jericho gives on every TextWorld game (it cannot track their score; TextWorld does).
    Hold :data:`TEXTWORLD_LOCK` around it: warning filters are process-wide."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not fully supported", category=UserWarning)
        yield


def default_cache_root() -> Path:
    """``$DREAMGYM_CACHE/textworld`` (else ``$XDG_CACHE_HOME/dreamgym/textworld``, else ``~/.cache/...``)."""
    if configured := os.environ.get("DREAMGYM_CACHE"):
        return Path(configured).expanduser() / "textworld"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "dreamgym" / "textworld"


def game_hash(game: Any) -> str:
    """A digest of a TextWorld ``Game``'s content: world, quests, grammar and text, not the metadata that
    names its seed and uuid. Two seeds that make the same world get the same hash."""
    data = game.serialize()
    data.pop("metadata", None)
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


class GameCache:
    """Generates each (recipe, seed) game once under ``root`` and finds it again.

    Args:
        root: The cache folder (:func:`default_cache_root` by default).

    Example:
        >>> info = GameCache().game(Recipe(challenge="custom", settings={"rooms": 1, "quest": 1}), seed=3)
        >>> info.walkthrough
        ('take apple', ...)
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_cache_root()).expanduser()

    def folder(self, recipe: Recipe, seed: int) -> Path:
        return self.root / recipe.key / str(seed)

    def game(self, recipe: Recipe, seed: int) -> GameInfo:
        """The game of ``recipe`` and ``seed``, generated now if the cache does not hold it (seconds).

        Raises:
            ConfigError: TextWorld refused the recipe or could not make a game of it with this seed.
        """
        folder = self.folder(recipe, seed)
        meta = folder / "meta.json"
        if not meta.is_file():
            with TEXTWORLD_LOCK:
                if not meta.is_file():
                    self._generate(recipe, seed, folder)
        return _read_meta(folder)

    def _generate(self, recipe: Recipe, seed: int, folder: Path) -> None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{seed}-", dir=folder.parent))
        try:
            game = _make_game(recipe, seed, work / "game.z8")
            meta = {
                "recipe": recipe.key,
                "seed": seed,
                "content_hash": game_hash(game),
                "objective": game.objective,
                "walkthrough": list(game.metadata.get("walkthrough") or game.walkthrough or ()),
                "max_score": int(game.max_score),
            }
            (work / "meta.json").write_text(json.dumps(meta, indent=1))
            try:
                work.rename(folder)
            except OSError:  # another process made it first: theirs is the same game
                log.debug("game %s/%s was generated twice; keeping the first", recipe.key, seed)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("generated text-world game %s seed %d", recipe.key, seed)


def _make_game(recipe: Recipe, seed: int, path: Path) -> Any:
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    options = textworld.GameOptions()
    options.seeds = seed
    options.path = str(path)
    options.file_ext = ".z8"
    s = recipe.settings
    try:
        with quiet_textworld():
            if recipe.challenge == "cooking":
                _, make, _ = textworld.challenges.CHALLENGES["tw-cooking"]
                settings = {name: bool(value) if name in ("open", "cook", "cut", "drop") else value
                            for name, value in s.items()}  # fmt: skip
                game = make({**settings, "recipe_seed": seed, "split": None}, options)
            else:
                options.nb_rooms = s["rooms"]
                options.nb_objects = s["objects"]
                options.chaining.min_length = options.chaining.max_length = s["quest"]
                options.chaining.max_depth = s["quest"]
                game = textworld.generator.make_game(options)
            compile_game(game, options)
    except Exception as exc:  # TextWorld signals refusals with many types (ValueError, its own, assertions)
        raise ConfigError(f"TextWorld could not make a {recipe.key} game with seed {seed}: {exc}") from exc
    return game


def _read_meta(folder: Path) -> GameInfo:
    meta = json.loads((folder / "meta.json").read_text())
    return GameInfo(
        path=folder / "game.z8",
        content_hash=meta["content_hash"],
        objective=meta.get("objective", ""),
        walkthrough=tuple(meta.get("walkthrough", ())),
        max_score=int(meta.get("max_score", 0)),
    )


def file_game_info(path: Path) -> GameInfo:
    """A user's game file: its digest as content hash, and the walkthrough and objective of the
    ``.json`` TextWorld writes beside the games it makes (or of a ``.tw-pddl`` file's own data), when there.

    Raises:
        ConfigError: No such file, or a ``.tw-pddl`` file that is not JSON.
    """
    if not path.is_file():
        raise ConfigError(f"no game file at {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:32]
    data: dict[str, Any] = {}
    if path.suffix == ".tw-pddl":
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not a TextWorld PDDL game (not JSON: {exc})") from exc
    elif (sidecar := path.with_suffix(".json")).is_file():
        return _sidecar_info(path, digest, sidecar)
    metadata = data.get("metadata") or {}
    walkthrough = data.get("walkthrough") or metadata.get("walkthrough") or ()
    return GameInfo(
        path=path,
        content_hash=digest,
        objective=str(data.get("objective", "")),
        walkthrough=tuple(str(command) for command in walkthrough),
        max_score=int(metadata.get("max_score", 0) or 0),
    )


def _sidecar_info(path: Path, digest: str, sidecar: Path) -> GameInfo:
    from textworld import Game

    try:
        with TEXTWORLD_LOCK:
            game = Game.load(str(sidecar))
        walkthrough = tuple(game.walkthrough or ())
    except Exception as exc:  # a sidecar of another tool or version: the game still plays, without a walkthrough
        log.warning("ignoring %s (not a TextWorld game description: %s)", sidecar, exc)
        return GameInfo(path=path, content_hash=digest)
    return GameInfo(
        path=path, content_hash=digest, objective=game.objective, walkthrough=walkthrough, max_score=int(game.max_score)
    )
