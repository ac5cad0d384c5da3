"""A griffe extension for the API reference: dreamgym's docstrings title their doctests ``Example:``.

Griffe's Google parser reads ``Examples:`` as an examples section (doctest lines become code) and the singular
``Example:`` as a titled note of Markdown, where a doctest's output such as ``['OK', 'Cancel']`` after a line
ending in ``]`` reads as a reference link. The reference renders both titles as examples.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Read each ``Example:`` section title as ``Examples:``."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
