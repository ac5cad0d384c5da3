"""The real side: browser pool, page capture into the state format, action execution, task sources.

Filled in by the bridge issue; it builds on ``dreamgym.core``.
"""

__all__: list[str] = []
