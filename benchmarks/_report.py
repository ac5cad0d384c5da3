"""How every benchmark prints a figure: one JSON line, the figure beside its same-run baseline and their ratio."""

from __future__ import annotations

import json
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
