"""The real side: Chromium through Playwright, pages captured into ``core``'s state format.

``BrowserPool`` runs headless Chromium processes; ``BrowserEnv`` implements the
Environment protocol on them; sites (``MiniWobSite``, ``WebArenaSite``,
``GenericSite``) hold what differs between kinds of task, and ``evaluators``
WebArena's end-of-episode evaluation. See each module's docstring.
"""

from dreamgym.bridge.allowlist import Allowlist, origin_of
from dreamgym.bridge.browser import CHROMIUM_ARGS, BrowserConfig, BrowserPool, ContextLease, find_chromium
from dreamgym.bridge.capture import CapturedState, RefMap, render_snapshot
from dreamgym.bridge.demonstrators import (
    DEMONSTRATORS,
    MiniWobDemonstrator,
    NearMissDemonstrator,
    demonstrate,
    mistaken_goal,
)
from dreamgym.bridge.env import BrowserEnv, EnvConfig
from dreamgym.bridge.evaluators import HELPERS, Judge, SiteUrls, evaluate_webarena, helper
from dreamgym.bridge.miniwob import (
    EXCLUDED,
    FLIGHT_TASKS,
    NONDETERMINISTIC,
    MiniWobSite,
    all_tasks,
    miniwob_tasks,
    text_tasks,
)
from dreamgym.bridge.sites import GenericSite, Site, generic_task, task_config
from dreamgym.bridge.webarena import (
    SITE_VARIABLES,
    WebArenaSite,
    load_webarena,
    placeholders,
    site_urls,
    site_urls_from_env,
)

__all__ = [
    "CHROMIUM_ARGS",
    "DEMONSTRATORS",
    "EXCLUDED",
    "FLIGHT_TASKS",
    "HELPERS",
    "NONDETERMINISTIC",
    "SITE_VARIABLES",
    "Allowlist",
    "BrowserConfig",
    "BrowserEnv",
    "BrowserPool",
    "CapturedState",
    "ContextLease",
    "EnvConfig",
    "GenericSite",
    "Judge",
    "MiniWobDemonstrator",
    "MiniWobSite",
    "NearMissDemonstrator",
    "RefMap",
    "Site",
    "SiteUrls",
    "WebArenaSite",
    "all_tasks",
    "demonstrate",
    "evaluate_webarena",
    "find_chromium",
    "generic_task",
    "helper",
    "load_webarena",
    "miniwob_tasks",
    "mistaken_goal",
    "origin_of",
    "placeholders",
    "render_snapshot",
    "site_urls",
    "site_urls_from_env",
    "task_config",
    "text_tasks",
]
