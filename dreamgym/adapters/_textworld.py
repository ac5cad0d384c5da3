"""The registered Gymnasium ids of generated text worlds: ``dreamgym/textworld.cooking-v0`` and
``dreamgym/textworld.custom-v0``.

The recipe's settings are make kwargs (``gymnasium.make("dreamgym/textworld.cooking-v0", recipe=2,
take=1)``, see :class:`dreamgym.textworlds.Recipe`), and ``reset(seed=s)`` plays the recipe's game of
seed ``s``, generated into the cache the first time (seconds) and the same game ever after. Actions are
strings in dreamgym's grammar: ``click [c3]`` sends the third listed command, ``type [cmd] [open fridge]``
any command.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import gymnasium

from dreamgym.adapters._gymnasium import WebEnv
from dreamgym.core.protocols import Environment

__all__ = ["register_text_world_envs", "textworld_env"]


def register_text_world_envs() -> list[str]:
    """Register ``dreamgym/textworld.<challenge>-v0`` for TextWorld's cooking and custom games; returns the ids.

    Example:
        >>> env = gymnasium.make("dreamgym/textworld.cooking-v0", recipe=1, take=1)
        >>> observation, info = env.reset(seed=0)
    """
    ids = []
    for challenge in ("cooking", "custom"):
        env_id = f"dreamgym/textworld.{challenge}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="dreamgym.adapters:textworld_env", kwargs={"challenge": challenge})
        ids.append(env_id)
    return ids


def textworld_env(
    challenge: str = "cooking",
    *,
    max_steps: int = 50,
    dense: bool = False,
    cache: str | Path | None = None,
    render_mode: str | None = None,
    **settings: int,
) -> WebEnv:
    """TextWorld's generated games of one recipe as a ``gymnasium.Env`` (one game per reset seed).

    Args:
        challenge: ``cooking`` or ``custom``.
        max_steps: Steps before an episode is truncated (``step_limit``).
        dense: Reward each score change too (score delta / max score).
        cache: Where games are generated (default: ``$DREAMGYM_CACHE/textworld``).
        render_mode: ``"ansi"`` or ``None``.
        settings: The recipe's settings (``recipe=2, take=1``; ``rooms=2, quest=2``).

    Raises:
        ConfigError: An unknown challenge or setting, or a value TextWorld would refuse.
    """
    from dreamgym.textworlds import Recipe, generated_task

    recipe = Recipe(challenge=challenge, settings=settings)
    root = Path(cache).expanduser() if cache is not None else None
    task = generated_task(recipe, dense=dense, cache_root=root, max_steps=max_steps)
    return WebEnv(_open_text_world_env, [task], max_steps=max_steps, render_mode=render_mode)


@asynccontextmanager
async def _open_text_world_env() -> AsyncIterator[Environment]:
    from dreamgym.textworlds import TextWorldEnv

    env = TextWorldEnv()
    try:
        yield env
    finally:
        await env.aclose()
