"""Bad input on the command line: one clear line, never a traceback."""

from __future__ import annotations

from pathlib import Path

from helpers import dreamgym


def test_a_recipe_textworld_refuses_exits_2_with_one_line(tmp_path: Path) -> None:
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", "textworld:cooking?recipe=2&take=3",
                      check=False)  # fmt: skip
    assert (result.returncode, result.stderr.strip().count("\n")) == (2, 0)


def test_the_refusal_says_which_setting(tmp_path: Path) -> None:
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", "textworld:cooking?recipe=2&take=3",
                      check=False)  # fmt: skip
    assert "take=3" in result.stderr


def test_a_game_file_that_does_not_load_ends_its_episode_with_the_reason(tmp_path: Path) -> None:
    game = tmp_path / "broken.z8"
    game.write_bytes(b"not a story file")
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", f"textworld:{game}", "--policy", "random",
                      "--embedder", "hashing-64", check=False)  # fmt: skip
    assert "does not load" in result.stderr


def test_a_game_file_that_does_not_load_prints_no_traceback(tmp_path: Path) -> None:
    game = tmp_path / "broken.z8"
    game.write_bytes(b"not a story file")
    result = dreamgym("collect", "--store", str(tmp_path / "s"), "--tasks", f"textworld:{game}", "--policy", "random",
                      "--embedder", "hashing-64", check=False)  # fmt: skip
    assert "Traceback" not in result.stderr
