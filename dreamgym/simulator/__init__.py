"""The synthetic side: the reasoning experience model, SimulatedEnv, experience-model SFT, the curriculum.

Filled in by its own issue; it builds on ``dreamgym.core`` and talks to its siblings only through
the protocols there.
"""

__all__: list[str] = []
