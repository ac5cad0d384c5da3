"""Policies: an OpenAI-compatible chat agent, a local transformers policy with token records, scripted explorers.

Filled in by its own issue; it builds on ``dreamgym.core`` and talks to its siblings only through
the protocols there.
"""

__all__: list[str] = []
