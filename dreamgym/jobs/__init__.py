"""Jobs: recipes that open one stack for any task set and hand it to the library.

- ``StackSettings`` / ``open_stack``: the store, the sites (MiniWoB++, a
  user's own, WebArena configs), the browsers and the simulator of a run, as
  :class:`~dreamgym.runtime.Sides`; ``open_runtime`` puts a runtime over them
  and ``stack_sides`` hands them to the trainer; ``open_browser_envs``: the
  real side alone (what a Ray rollout worker opens); ``real_envs_for``: text-world
  tasks' real side in its place (``StackSettings.real_envs``).
- ``mixed_groups``: groups over tasks and seeds with a share of them real;
  ``held_out``: the (task, seed) pairs a run must never retrieve or refit on;
  ``collected``: the groups a store does not hold yet (re-runs add nothing twice);
  ``policy_episodes``: one policy's real episodes in a store (a demonstrator's, to clone or anchor to).
"""

from dreamgym.jobs._groups import collected, held_out, mixed_groups, policy_episodes
from dreamgym.jobs._stack import (
    PolicyFactory,
    RealEnvs,
    StackSettings,
    grounded_simulator,
    open_browser_envs,
    open_runtime,
    open_stack,
    real_envs_for,
    stack_sides,
)

__all__ = [
    "PolicyFactory",
    "RealEnvs",
    "StackSettings",
    "collected",
    "grounded_simulator",
    "held_out",
    "mixed_groups",
    "open_browser_envs",
    "open_runtime",
    "open_stack",
    "policy_episodes",
    "real_envs_for",
    "stack_sides",
]
