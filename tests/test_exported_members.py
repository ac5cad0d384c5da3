"""Each package's ``__all__`` lists exactly its public names."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "dreamgym.core",
    "dreamgym.replay",
    "dreamgym.bridge",
    "dreamgym.simulator",
    "dreamgym.agents",
    "dreamgym.runtime",
    "dreamgym.trainer",
    "dreamgym.validate",
    "dreamgym.render",
    "dreamgym.jobs",
    "dreamgym.adapters",
    "dreamgym.textworlds",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_every_public_name_and_nothing_else(name: str) -> None:
    package = importlib.import_module(name)
    exported = set(package.__all__)
    public = {
        attr
        for attr, value in vars(package).items()
        if not attr.startswith("_") and not inspect.ismodule(value) and attr != "annotations"
    }
    assert exported == public, f"{name}.__all__ drifted: missing {public - exported}, stale {exported - public}"
    assert len(package.__all__) == len(exported), f"{name}.__all__ has duplicates"
