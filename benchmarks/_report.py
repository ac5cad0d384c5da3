"""How every benchmark prints a figure: one JSON line, the figure beside its same-run baseline and their ratio."""

from __future__ import annotations

import datetime
import functools
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any


def emit(
    figure: str, value: float, unit: str, baseline: str, baseline_value: float, *, digits: int = 4, **extra: Any
) -> dict[str, Any]:
    """Print the figure's row as one JSON line, and return it (for a results file)."""
    row = {
        "figure": figure,
        "value": round(value, digits),
        "unit": unit,
        "baseline": baseline,
        "baseline_value": round(baseline_value, digits),
        "ratio": round(value / baseline_value, 4) if baseline_value else None,
        **extra,
    }
    print(json.dumps(row), flush=True)
    return row


@functools.cache
def commit() -> str:
    """The commit the run started from (call it first), ``+dirty`` if tracked files differed from it."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], capture_output=True).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty else "")


def provenance() -> dict[str, str]:
    """What a results file records of its run: the date, :func:`commit` and the command
    (``python benchmarks/<this script> <its arguments>``)."""
    script = f"benchmarks/{Path(sys.argv[0]).name}"
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "command": "python " + shlex.join([script, *sys.argv[1:]]),
    }
