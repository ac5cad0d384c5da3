"""The synthetic side: the reasoning experience model (prompts, parsing, backends), SimulatedEnv, experience-model SFT and the curriculum.

Filled in by its own issue; it builds on ``dreamgym.core`` and talks to its siblings only through
the protocols there.
"""

__all__: list[str] = []
