"""The async scheduler that runs groups of episodes and interleaves real and synthetic steps into the replay store.

Filled in by its own issue; it builds on ``dreamgym.core`` and talks to its siblings only through
the protocols there.
"""

__all__: list[str] = []
