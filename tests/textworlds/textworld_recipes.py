"""The tiny TextWorld recipes the text-world tests generate (a module of its own: ``conftest`` names another
directory's module in a full run)."""

from __future__ import annotations

from dreamgym.textworlds import Recipe

TINY = Recipe(challenge="custom", settings={"rooms": 2, "objects": 3, "quest": 2})
"""Two rooms, three objects, a quest of two commands."""
COOKING = Recipe(challenge="cooking", settings={"recipe": 1, "take": 1})
"""One kitchen, a recipe of one ingredient to fetch."""
