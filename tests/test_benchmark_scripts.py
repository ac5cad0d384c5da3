"""Every benchmark script, and every probe, answers ``--help``: it imports, finds the shared ``_report`` module and
parses its arguments without running anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for folder in (BENCHMARKS, BENCHMARKS / "probes") for p in folder.glob("*.py") if p.name[0] != "_")


def test_the_benchmarks_folder_has_scripts_and_probes() -> None:
    assert {p.parent.name for p in SCRIPTS} == {"benchmarks", "probes"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_the_script_answers_help(script: Path) -> None:
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
