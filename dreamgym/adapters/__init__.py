"""dreamgym for other frameworks' users: Gymnasium, BrowserGym and TRL.

- ``WebEnv``: any dreamgym environment, real or simulated, as a synchronous
  ``gymnasium.Env`` (observations: dicts of ``UnicodeText``; actions: strings).
- ``register_envs``: the ids ``dreamgym/miniwob.<task>-v0`` (real Chromium) and
  ``dreamgym/sim.miniwob.<task>-v0`` (a simulator; ``model=`` names its
  experience model), registered by ``import dreamgym``, with ``register_text_world_envs``' ids
  ``dreamgym/textworld.cooking-v0`` and ``dreamgym/textworld.custom-v0`` (``textworld_env``: TextWorld's
  generated games, the recipe's settings as make kwargs, one game per reset seed).
- ``from_browsergym`` / ``to_browsergym``: BrowserGym's high-level action
  strings (``click('e5')``) to dreamgym actions and back;
  ``browsergym_observation``: BrowserGym's observation dict, with an
  ``axtree_object`` that its ``flatten_axtree_to_str`` renders;
  ``BrowserGymEnv``: a ``WebEnv`` that BrowserGym agents drive unchanged.
- ``TRLWebEnvironment``, ``TRLEnvironmentFactory``, ``trl_miniwob_factory``,
  ``trl_simulated_miniwob_factory``, ``trl_dataset``: environments for TRL's
  ``GRPOTrainer(environment_factory=...)``, with the actions as tools.

Example:
    >>> import dreamgym, gymnasium
    >>> env = gymnasium.make("dreamgym/miniwob.click-button-v0")
    >>> observation, info = env.reset(seed=0)
    >>> observation, reward, terminated, truncated, info = env.step("click [e3]")
"""

from dreamgym.adapters._browsergym import from_browsergym, to_browsergym
from dreamgym.adapters._browsergym_env import BROWSERGYM_OBSERVATION_KEYS, BrowserGymEnv, browsergym_observation
from dreamgym.adapters._gymnasium import (
    MAX_ACTION_CHARS,
    MAX_TEXT_CHARS,
    OBSERVATION_KEYS,
    OpenEnvironment,
    UnicodeText,
    WebEnv,
)
from dreamgym.adapters._miniwob import miniwob_env, register_envs, simulated_miniwob_env
from dreamgym.adapters._textworld import register_text_world_envs, textworld_env
from dreamgym.adapters._trl import (
    TOOL_NAMES,
    TRL_PROMPT,
    TRLEnvironmentFactory,
    TRLWebEnvironment,
    trl_dataset,
    trl_miniwob_factory,
    trl_simulated_miniwob_factory,
)

__all__ = [
    "BROWSERGYM_OBSERVATION_KEYS",
    "MAX_ACTION_CHARS",
    "MAX_TEXT_CHARS",
    "OBSERVATION_KEYS",
    "TOOL_NAMES",
    "TRL_PROMPT",
    "BrowserGymEnv",
    "OpenEnvironment",
    "TRLEnvironmentFactory",
    "TRLWebEnvironment",
    "UnicodeText",
    "WebEnv",
    "browsergym_observation",
    "from_browsergym",
    "miniwob_env",
    "register_envs",
    "register_text_world_envs",
    "simulated_miniwob_env",
    "textworld_env",
    "to_browsergym",
    "trl_dataset",
    "trl_miniwob_factory",
    "trl_simulated_miniwob_factory",
]
