"""How every benchmark prints a figure: one JSON line, the figure beside its same-run baseline and their ratio."""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
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


def provenance() -> dict[str, Any]:
    """What a results file records of its run: the date, :func:`commit`, the command
    (``python benchmarks/<this script> <its arguments>``) and the :func:`machine`."""
    script = _script(Path(sys.argv[0]))
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "command": "python " + shlex.join([script, *sys.argv[1:]]),
        "machine": machine(),
    }


def settings(args: Any, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A run's parsed arguments as its results file records them (paths as text, lists of paths too), but
    ``leave_out``."""
    return {key: _as_text(value) for key, value in vars(args).items() if key not in leave_out}


def _as_text(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return value


def _script(path: Path) -> str:
    """The script's path from the repository's root (``benchmarks/probes/x.py`` for a probe)."""
    try:
        return path.resolve().relative_to(Path(__file__).resolve().parents[1]).as_posix()
    except ValueError:
        return f"benchmarks/{path.name}"


def machine() -> dict[str, Any]:
    """The CPU a run measured on: its model, the CPUs this process may use, and whether it computes bfloat16
    natively (AVX-512 BF16 or AMX: the plain loop's and the embedder's ``bfloat16`` run in float32 elsewhere), so
    two results files are compared only where their machines match. Linux's ``/proc/cpuinfo``; elsewhere the
    model is ``platform.processor()`` and the bfloat16 flag ``None`` (unknown)."""
    model: str | None = None
    flags: set[str] | None = None
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and flags is None:
            flags = set(value.split())
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    bfloat16 = None if flags is None else bool(flags & {"avx512_bf16", "amx_bf16"})
    return {"cpu": model or platform.processor() or "unknown", "cpus": cpus, "bfloat16": bfloat16}
