"""dreamgym.runtime — see DESIGN.md; filled in by its own issue."""

__all__: list[str] = []
