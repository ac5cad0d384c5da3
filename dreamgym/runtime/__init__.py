"""The runtime: episodes of a policy in an environment, recorded with provenance.

Today: :func:`run_episode`. The async scheduler that interleaves real and
synthetic episodes into the replay store is the runtime issue's.
"""

from dreamgym.runtime.episode import run_episode

__all__ = ["run_episode"]
