"""The real side: Chromium through Playwright, pages captured into ``core``'s state format.

``BrowserPool`` runs headless Chromium processes; ``BrowserEnv`` implements the
Environment protocol on them; sites (``MiniWobSite``, ``GenericSite``) hold
what differs between kinds of task. See each module's docstring.
"""

from dreamgym.bridge.allowlist import Allowlist, origin_of
from dreamgym.bridge.browser import CHROMIUM_ARGS, BrowserConfig, BrowserPool, ContextLease, find_chromium
from dreamgym.bridge.capture import CapturedState, RefMap, render_snapshot
from dreamgym.bridge.demonstrators import DEMONSTRATORS, MiniWobDemonstrator, demonstrate
from dreamgym.bridge.env import BrowserEnv, EnvConfig
from dreamgym.bridge.miniwob import EXCLUDED, FLIGHT_TASKS, NONDETERMINISTIC, MiniWobSite, all_tasks, text_tasks
from dreamgym.bridge.sites import GenericSite, Site, task_config

__all__ = [
    "CHROMIUM_ARGS",
    "DEMONSTRATORS",
    "EXCLUDED",
    "FLIGHT_TASKS",
    "NONDETERMINISTIC",
    "Allowlist",
    "BrowserConfig",
    "BrowserEnv",
    "BrowserPool",
    "CapturedState",
    "ContextLease",
    "EnvConfig",
    "GenericSite",
    "MiniWobDemonstrator",
    "MiniWobSite",
    "RefMap",
    "Site",
    "all_tasks",
    "demonstrate",
    "find_chromium",
    "origin_of",
    "render_snapshot",
    "task_config",
    "text_tasks",
]
