"""The textworld: grammar, the generation cache and content hashes on real generated games."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from textworld_recipes import TINY

from dreamgym.core import ConfigError, Task
from dreamgym.textworlds import (
    GameCache,
    GameInfo,
    file_tasks,
    game_for,
    generated_task,
    parse_text_world_tasks,
    seeds_apart,
)


def test_a_cooking_spec_names_one_task_by_its_recipe() -> None:
    tasks, _ = parse_text_world_tasks("textworld:cooking?recipe=2&take=1")
    assert [task.task_id for task in tasks] == ["textworld/cooking+recipe2+take1+go1"]


def test_generated_games_take_seeds() -> None:
    _, seeded = parse_text_world_tasks("textworld:custom?rooms=1&quest=1")
    assert seeded


def test_the_flags_set_appear_in_the_task_id() -> None:
    tasks, _ = parse_text_world_tasks("textworld:cooking?recipe=2&take=2&go=6&open=1&cut=1")
    assert tasks[0].task_id == "textworld/cooking+recipe2+take2+go6+open+cut"


def test_dense_reward_is_its_own_task() -> None:
    tasks, _ = parse_text_world_tasks("textworld:cooking?recipe=1&dense=1")
    assert tasks[0].task_id.endswith("+dense")


def test_the_task_records_its_cache_folder(tmp_path: Path) -> None:
    tasks, _ = parse_text_world_tasks("textworld:cooking?recipe=1", cache_root=tmp_path)
    assert json.loads(tasks[0].config_json)["cache"] == str(tmp_path)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("textworld:cooking?recipe=2&take=3", "take=3"),
        ("textworld:cooking?go=5", "go=5"),
        ("textworld:cooking?recipe=9", "recipe=9"),
        ("textworld:cooking?rooms=2", "no setting 'rooms'"),
        ("textworld:custom?quest=two", "not a whole number"),
        ("textworld:", "names no game"),
        ("textworld:/no/such/folder", "no game file or folder"),
    ],
)
def test_a_spec_textworld_refuses_is_one_clear_config_error(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_text_world_tasks(spec)


def test_a_folder_without_games_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no game file"):
        file_tasks(tmp_path)


def test_a_folder_gives_one_task_per_game_file(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    for seed, game in tiny_games.items():
        (tmp_path / f"trial{seed}").mkdir()
        shutil.copy(game.path, tmp_path / f"trial{seed}" / "game.z8")
    tasks, _ = parse_text_world_tasks(f"textworld:{tmp_path}")
    assert [task.task_id for task in tasks] == [f"textworld/{tmp_path.name}/trial0/game",
                                                f"textworld/{tmp_path.name}/trial1/game"]  # fmt: skip


def test_file_games_take_no_seeds(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    shutil.copy(tiny_games[0].path, tmp_path / "mine.z8")
    _, seeded = parse_text_world_tasks(f"textworld:{tmp_path / 'mine.z8'}")
    assert not seeded


def test_a_game_is_generated_once_per_recipe_and_seed(cache: GameCache, tiny_games: dict[int, GameInfo]) -> None:
    before = (cache.folder(TINY, 0) / "game.z8").stat().st_mtime_ns
    cache.game(TINY, 0)
    assert (cache.folder(TINY, 0) / "game.z8").stat().st_mtime_ns == before


def test_the_same_recipe_and_seed_make_the_same_game_anywhere(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    again = GameCache(tmp_path).game(TINY, 1)
    assert again.content_hash == tiny_games[1].content_hash


def test_two_seeds_make_games_with_two_hashes(tiny_games: dict[int, GameInfo]) -> None:
    assert tiny_games[0].content_hash != tiny_games[1].content_hash


def test_a_generated_game_has_a_walkthrough(tiny_games: dict[int, GameInfo]) -> None:
    assert len(tiny_games[0].walkthrough) >= 1


def test_a_held_out_world_is_told_apart_by_content_not_by_seed(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    """Seed 1000 is made to hold seed 0's world, as a small recipe can by chance: seed 0 is then not
    a training seed, though its number is not held out."""
    cache = GameCache(tmp_path)
    for seed, source in ((0, 0), (1, 1), (1000, 0)):
        shutil.copytree(tiny_games[source].path.parent, cache.folder(TINY, seed))
    task = generated_task(TINY, cache_root=tmp_path)
    assert seeds_apart(task, [0, 1], [1000]) == [1]


def test_a_generated_task_needs_a_seed(tiny_task: Task) -> None:
    with pytest.raises(ConfigError, match="give a seed"):
        game_for(tiny_task, None)


def test_paragraph_lines_are_their_own_task() -> None:
    tasks, _ = parse_text_world_tasks("textworld:cooking?recipe=1&lines=paragraph")
    assert tasks[0].task_id.endswith("+paragraphs")
    assert json.loads(tasks[0].config_json)["lines"] == "paragraph"
    default, _ = parse_text_world_tasks("textworld:cooking?recipe=1&lines=sentence")
    assert "+paragraphs" not in default[0].task_id


def test_an_unknown_line_setting_is_one_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="lines must be one of sentence, paragraph, not 'words'"):
        parse_text_world_tasks("textworld:cooking?recipe=1&lines=words")
