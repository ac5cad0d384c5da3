"""Bad input on the command line: one clear line, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import dreamgym


def test_a_recipe_textworld_refuses_exits_2_with_one_line(tmp_path: Path) -> None:
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", "textworld:cooking?recipe=2&take=3",
                      check=False)  # fmt: skip
    assert (result.returncode, result.stderr.strip().count("\n")) == (2, 0)


def test_the_refusal_says_which_setting(tmp_path: Path) -> None:
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", "textworld:cooking?recipe=2&take=3",
                      check=False)  # fmt: skip
    assert "take=3" in result.stderr


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    root = tmp_path_factory.mktemp("broken")
    game = root / "broken.z8"
    game.write_bytes(b"not a story file")
    return dreamgym("collect", "--store", str(root / "s"), "--tasks", f"textworld:{game}", "--policy", "random",
                    "--embedder", "hashing-64", check=False)  # fmt: skip


def test_a_game_file_that_does_not_load_ends_its_episode_with_the_reason(
    broken_run: subprocess.CompletedProcess[str],
) -> None:
    assert "does not load" in broken_run.stderr


def test_a_game_file_that_does_not_load_prints_no_traceback(broken_run: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in broken_run.stderr
