"""The random explorer: a uniform choice among the valid actions of the current state."""

from __future__ import annotations

import random
from collections.abc import Sequence

from dreamgym.core.actions import candidate_actions
from dreamgym.core.protocols import PolicyDecision
from dreamgym.core.state import parse_state
from dreamgym.core.types import Observation, Step, Task

__all__ = ["RandomExplorer"]


class RandomExplorer:
    """Picks uniformly among ``core.candidate_actions`` (type texts come from the goal's quoted spans).

    The baseline every learned policy must beat, and a way to explore a site.
    Deterministic for a given ``seed`` and sequence of observations.
    """

    policy_id = "random-explorer"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        candidates = candidate_actions(parse_state(observation.state), observation.goal or task.instruction)
        return PolicyDecision(action=self.rng.choice(candidates))
