"""dreamgym for other frameworks' users: Gymnasium.

- ``WebEnv``: any dreamgym environment, real or simulated, as a synchronous
  ``gymnasium.Env`` (observations: dicts of ``UnicodeText``; actions: strings).
- ``register_envs``: the ids ``dreamgym/miniwob.<task>-v0`` (real Chromium) and
  ``dreamgym/sim.miniwob.<task>-v0`` (a simulator; ``model=`` names its
  experience model), registered by ``import dreamgym``.

Example:
    >>> import dreamgym, gymnasium
    >>> env = gymnasium.make("dreamgym/miniwob.click-button-v0")
    >>> observation, info = env.reset(seed=0)
    >>> observation, reward, terminated, truncated, info = env.step("click [e3]")
"""

from dreamgym.adapters._gymnasium import (
    MAX_ACTION_CHARS,
    MAX_TEXT_CHARS,
    OBSERVATION_KEYS,
    OpenEnvironment,
    UnicodeText,
    WebEnv,
)
from dreamgym.adapters._miniwob import miniwob_env, register_envs, simulated_miniwob_env

__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_TEXT_CHARS",
    "OBSERVATION_KEYS",
    "OpenEnvironment",
    "UnicodeText",
    "WebEnv",
    "miniwob_env",
    "register_envs",
    "simulated_miniwob_env",
]
