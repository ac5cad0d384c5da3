"""Policies: an OpenAI-compatible chat agent, a local transformers policy with token records, scripted explorers.

Today: :class:`RandomExplorer` (the scripted MiniWoB demonstrators live with
the bridge). The LLM policies are the runtime issue's.
"""

from dreamgym.agents.explorer import RandomExplorer

__all__ = ["RandomExplorer"]
