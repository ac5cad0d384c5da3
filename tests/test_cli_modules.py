"""The command line's modules import alone, and nothing outside the command line imports them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dreamgym"
COMMAND_MODULES = sorted(
    "dreamgym." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
    for path in (PACKAGE / "cli").glob("*.py")
    if path.name != "__main__.py"
)
COMMANDS = ["collect", "demo", "replay", "rollout", "sim", "train", "validate"]


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_each_command_module_imports_alone(module: str) -> None:
    result = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_each_command_has_its_own_module() -> None:
    assert set(COMMANDS) <= {name.rsplit(".", 1)[-1] for name in COMMAND_MODULES}


def test_no_library_module_imports_the_command_line() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        name = "dreamgym." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if path.is_relative_to(PACKAGE / "cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[:2] == ["dreamgym", "cli"]:
                offenders.append(f"{name} imports {node.module}")
            if isinstance(node, ast.Import):
                offenders += [f"{name} imports {a.name}" for a in node.names if a.name.startswith("dreamgym.cli")]
    assert not offenders


def test_the_command_line_does_not_import_the_trainer_unless_it_trains() -> None:
    code = "import sys, dreamgym.cli as c; c._parser(['replay', 'stats', 'x']); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False"
