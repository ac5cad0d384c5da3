"""The runtime: groups of episodes on real pages and on the simulator, recorded in the replay store.

- ``Runtime``: runs :class:`GroupSpec`\\ s (G episodes of one task from one
  start, on one side) under one task group, with pooled environments, a
  deadline per episode, one store-writer task, shadow mode and branching.
- Source choosers (``RatioSource``, ``RuleSource``, ``ScheduledSource``)
  decide which side runs a group; a group never mixes sources.
- ``RuntimePortal``: the same runtime for synchronous callers, in one
  event loop held for the whole run.
- ``run_episode``: one episode, for scripts and tests.
- ``Sides``: what a run plays on (store, environment factories, the
  experience model's ``ModelSlot``), opened by a job (``dreamgym.jobs.open_stack``).
- ``RayWorkers``: real episodes in Ray actors that own their browsers
  (``RemoteEnv``), the policy and the store's writer staying here.
"""

from dreamgym.runtime._config import RuntimeConfig
from dreamgym.runtime._envs import ResetHook, SyntheticEnvironment
from dreamgym.runtime._episode import run_episode
from dreamgym.runtime._groups import Branch, GroupResult, GroupSpec, Rollout
from dreamgym.runtime._portal import RuntimePortal
from dreamgym.runtime._runtime import Runtime
from dreamgym.runtime._sides import ModelSlot, OpenSides, Refit, Sides
from dreamgym.runtime._sources import RatioSource, RuleSource, ScheduledSource, SourceChooser
from dreamgym.runtime._stats import RuntimeSnapshot, RuntimeStats
from dreamgym.runtime._workers import OpenEnvs, RayWorkers, RemoteEnv, WorkerConfig

__all__ = [
    "Branch",
    "GroupResult",
    "GroupSpec",
    "ModelSlot",
    "OpenEnvs",
    "OpenSides",
    "RatioSource",
    "RayWorkers",
    "Refit",
    "RemoteEnv",
    "ResetHook",
    "Rollout",
    "RuleSource",
    "Runtime",
    "RuntimeConfig",
    "RuntimePortal",
    "RuntimeSnapshot",
    "RuntimeStats",
    "ScheduledSource",
    "Sides",
    "SourceChooser",
    "SyntheticEnvironment",
    "WorkerConfig",
    "run_episode",
]
