"""Text worlds: TextWorld's games (generated, a user's own, ALFWorld's PDDL) behind the one Environment protocol.

The real side for text games, a sibling of :mod:`dreamgym.bridge` (web pages): it imports only
:mod:`dreamgym.core`, and the runtime, the store, the experience model and the trainer use it through
the protocols. See ``docs/concepts/text-worlds.md`` for the state decision and
``docs/guides/text-worlds.md`` for the command line.

- :class:`TextWorldEnv`: ``reset``/``step`` on a game; :class:`TextWorldConfig` its step limit and deadlines;
  :func:`open_text_world_envs`: what a job's stack opens in place of browsers.
- :func:`parse_text_world_tasks`: the ``textworld:`` grammar of ``--tasks``; :class:`Recipe` and
  :class:`GameCache`: generated games, once per (recipe, seed); :func:`game_hash`: a game's content digest, and
  :func:`seeds_apart`: training seeds whose games no held-out seed makes.
- :func:`render_text_state`: a text observation in ``core``'s state format; :func:`command_f1`: how well
  a predicted state's commands match the game's.
- :class:`WalkthroughDemonstrator`: a scripted policy that plays each game's walkthrough.
- :func:`policy_context`: the context a local policy's model needs for a text-world episode of a step limit.
"""

from dreamgym.textworlds._context import TURN_TOKENS, policy_context
from dreamgym.textworlds._demonstrator import WalkthroughDemonstrator, walkthrough_action
from dreamgym.textworlds._env import TextWorldConfig, TextWorldEnv, open_game, open_text_world_envs
from dreamgym.textworlds._games import (
    CHALLENGES,
    TEXTWORLD_LOCK,
    GameCache,
    GameInfo,
    Recipe,
    default_cache_root,
    file_game_info,
    game_hash,
)
from dreamgym.textworlds._state import (
    COMMAND_BOX,
    CommandIds,
    TextFrame,
    clean_game_text,
    command_f1,
    render_text_state,
    state_commands,
)
from dreamgym.textworlds._tasks import (
    BENCHMARK,
    COOKING_FAMILY,
    GAME_SUFFIXES,
    INSTRUCTION,
    PREFIX,
    file_tasks,
    game_for,
    generated_task,
    is_text_world,
    parse_text_world_tasks,
    seeds_apart,
    task_settings,
)

__all__ = [
    "BENCHMARK",
    "CHALLENGES",
    "COMMAND_BOX",
    "COOKING_FAMILY",
    "GAME_SUFFIXES",
    "INSTRUCTION",
    "PREFIX",
    "TEXTWORLD_LOCK",
    "TURN_TOKENS",
    "CommandIds",
    "GameCache",
    "GameInfo",
    "Recipe",
    "TextFrame",
    "TextWorldConfig",
    "TextWorldEnv",
    "WalkthroughDemonstrator",
    "clean_game_text",
    "command_f1",
    "default_cache_root",
    "file_game_info",
    "file_tasks",
    "game_for",
    "game_hash",
    "generated_task",
    "is_text_world",
    "open_game",
    "open_text_world_envs",
    "parse_text_world_tasks",
    "policy_context",
    "render_text_state",
    "seeds_apart",
    "state_commands",
    "task_settings",
    "walkthrough_action",
]
