"""The GPU check (scripts/gpu_check.sh -> benchmarks/gpu_check.py) runs end to end, here on the CPU with a tiny
model, so the script a GPU session will run is known to work before a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_prints_each_figure_beside_its_baseline() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--size", "tiny", "--device", "cpu",
               "--decisions", "4", "--steps", "2", "--new-tokens", "4", "--updates", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = {row["figure"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert list(lines) == ["setup", "policy decisions per second", "synthetic steps per second",
                           "seconds per GRPO update"]  # fmt: skip
    for figure in list(lines)[1:]:
        row = lines[figure]
        assert row["value"] > 0 and row["baseline_value"] > 0 and row["ratio"] > 0, row
    assert lines["seconds per GRPO update"]["updates"] == 1
    check = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
