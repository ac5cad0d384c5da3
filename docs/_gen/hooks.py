"""MkDocs hooks: the pages that must not drift are written at build time from the code and the results files.

A page asks for a generated block with a marker on a line of its own, ``<!-- generated: NAME -->``; NAME is one
of :data:`reference.GENERATORS` (the command line from its parsers, the config dataclasses from their fields,
the benchmark figures from ``benchmarks/results/*.json``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference  # this folder, put on the path above

_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each generated-block marker by its block; an unknown name fails the build."""

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in reference.GENERATORS:
            known = sorted(reference.GENERATORS)
            raise ValueError(f"{page.file.src_path}: no generator named {name!r}; known: {known}")
        return reference.GENERATORS[name]()

    return _MARKER.sub(block, markdown)
