"""TextWorldEnv keeps the Environment protocol on real generated games."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dreamgym.core import (
    BackendError,
    ConfigError,
    Task,
    check_environment,
    observation_hash,
    parse_action,
    parse_state,
)
from dreamgym.core.state import flatten
from dreamgym.textworlds import GameInfo, TextWorldConfig, TextWorldEnv, file_tasks, walkthrough_action

pytestmark = pytest.mark.anyio


def _buttons(state: str) -> list[str]:
    return [f.element.name for f in flatten(parse_state(state)) if f.element.role == "button"]


async def _play(env: TextWorldEnv, task: Task, seed: int, commands: tuple[str, ...]) -> list[object]:
    observation = await env.reset(task, seed=seed)
    results = []
    for command in commands:
        result = await env.step(walkthrough_action(observation, command))
        results.append(result)
        observation = result.observation
    return results


async def test_generated_game_passes_check_environment(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    await check_environment(TextWorldEnv(), tiny_task, seed=0)


async def test_observation_lists_the_admissible_commands_as_buttons(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    observation = await env.reset(tiny_task, seed=0)
    commands = list(env.engine.reset().admissible_commands)
    await env.aclose()
    assert _buttons(observation.state) == commands


async def test_observation_goal_is_the_games_objective(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    observation = await env.reset(tiny_task, seed=0)
    await env.aclose()
    assert observation.goal == " ".join(tiny_games[0].objective.split())


async def test_observation_url_names_the_game_by_content(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    observation = await env.reset(tiny_task, seed=1)
    await env.aclose()
    assert observation.url == f"textworld://{tiny_games[1].content_hash}"


async def test_two_seeds_give_two_games(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    first = await env.reset(tiny_task, seed=0)
    second = await env.reset(tiny_task, seed=1)
    await env.aclose()
    assert observation_hash(first) != observation_hash(second)


async def test_walkthrough_wins_with_reward_one(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    results = await _play(env, tiny_task, 0, tiny_games[0].walkthrough)
    await env.aclose()
    assert results[-1].reward == 1.0  # type: ignore[attr-defined]


async def test_a_won_game_terminates(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    results = await _play(env, tiny_task, 0, tiny_games[0].walkthrough)
    await env.aclose()
    assert results[-1].terminated  # type: ignore[attr-defined]


async def test_sparse_reward_pays_nothing_before_the_end(cooking_task: Task, cache: object) -> None:
    from textworld_recipes import COOKING

    game = cache.game(COOKING, 0)  # type: ignore[attr-defined]
    env = TextWorldEnv()
    results = await _play(env, cooking_task, 0, game.walkthrough[:-1])
    await env.aclose()
    assert [r.reward for r in results] == [0.0] * len(results)  # type: ignore[attr-defined]


async def test_dense_reward_pays_score_changes_over_the_max_score(dense_cooking_task: Task, cache: object) -> None:
    from textworld_recipes import COOKING

    game = cache.game(COOKING, 0)  # type: ignore[attr-defined]
    env = TextWorldEnv()
    results = await _play(env, dense_cooking_task, 0, game.walkthrough[:-1])
    await env.aclose()
    assert sum(r.reward for r in results) == pytest.approx((game.max_score - 1) / game.max_score)  # type: ignore[attr-defined]


async def test_a_command_the_game_does_not_know_is_reported_not_raised(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    result = await env.step(parse_action("type [cmd] [dance wildly]"))
    await env.aclose()
    assert "not one of the game's commands" in result.observation.last_action_error


async def test_the_games_answer_to_an_unknown_command_is_its_feedback(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    result = await env.step(parse_action("type [cmd] [dance wildly]"))
    await env.aclose()
    assert 'region "feedback": That\'s not a verb I recognise.' in result.observation.state


async def test_a_click_on_an_id_the_state_lacks_is_reported(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    result = await env.step(parse_action("click [c999]"))
    await env.aclose()
    assert "no element [c999]" in result.observation.last_action_error


async def test_a_web_action_is_answered_with_what_text_worlds_take(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    result = await env.step(parse_action("scroll [down]"))
    await env.aclose()
    assert "click [cN]" in result.observation.last_action_error


async def test_the_step_limit_truncates_with_its_reason(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv(TextWorldConfig(max_steps=2))
    await env.reset(tiny_task, seed=0)
    await env.step(parse_action("type [cmd] [look]"))
    result = await env.step(parse_action("type [cmd] [look]"))
    await env.aclose()
    assert result.truncation_reason == "step_limit"


async def test_stop_ends_the_episode_with_no_reward(tiny_task: Task, tiny_games: dict[int, GameInfo]) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    result = await env.step(parse_action("stop []"))
    await env.aclose()
    assert (result.terminated, result.reward) == (True, 0.0)


async def test_an_engine_that_dies_mid_episode_cuts_it_with_its_reason(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    await env.reset(tiny_task, seed=0)
    env.engine.close()  # the game process is gone, as when Jericho crashes
    result = await env.step(parse_action("type [cmd] [look]"))
    await env.aclose()
    assert (result.truncated, result.truncation_reason) == (True, "error")


async def test_the_next_reset_after_a_dead_engine_starts_a_fresh_one(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    env = TextWorldEnv()
    first = await env.reset(tiny_task, seed=0)
    env.engine.close()
    await env.step(parse_action("type [cmd] [look]"))
    again = await env.reset(tiny_task, seed=0)
    await env.aclose()
    assert again == first


async def test_a_game_file_that_does_not_load_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.z8"
    broken.write_bytes(b"this is not a z-machine story file")
    env = TextWorldEnv()
    with pytest.raises(BackendError, match="does not load"):
        await env.reset(file_tasks(broken)[0])
    await env.aclose()


async def test_a_users_game_file_plays_with_its_walkthrough(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    game = tiny_games[0]
    shutil.copy(game.path, tmp_path / "mine.z8")
    shutil.copy(game.path.with_suffix(".json"), tmp_path / "mine.json")
    env = TextWorldEnv()
    results = await _play(env, file_tasks(tmp_path / "mine.z8")[0], 0, game.walkthrough)
    await env.aclose()
    assert results[-1].reward == 1.0  # type: ignore[attr-defined]


async def test_step_before_reset_is_a_lifecycle_error() -> None:
    with pytest.raises(ConfigError, match="reset"):
        await TextWorldEnv().step(parse_action("type [cmd] [look]"))


async def test_a_game_file_cut_short_is_one_clear_error(tmp_path: Path, tiny_games: dict[int, GameInfo]) -> None:
    data = tiny_games[0].path.read_bytes()
    cut = tmp_path / "cut.z8"
    cut.write_bytes(data[: len(data) // 2])
    env = TextWorldEnv()
    with pytest.raises(BackendError, match="cut short"):
        await env.reset(file_tasks(cut)[0])
    await env.aclose()


@pytest.fixture(scope="module")
def alfworld_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ALFWorld-style data folder with one hand-written PDDL game."""
    pytest.importorskip("fast_downward", reason="ALFWorld's PDDL games need textworld[pddl]")
    from pddl_game import write_pddl_game

    root = tmp_path_factory.mktemp("alfworld") / "valid_seen"
    write_pddl_game(root / "put-apple-in-fridge" / "trial_1")
    return root


async def test_an_alfworld_folder_gives_one_task_per_pddl_game(alfworld_folder: Path) -> None:
    from dreamgym.textworlds import parse_text_world_tasks

    tasks, _ = parse_text_world_tasks(f"textworld:{alfworld_folder}")
    assert [task.task_id for task in tasks] == ["textworld/valid_seen/put-apple-in-fridge/trial_1/game"]


async def test_a_pddl_game_states_its_task_as_the_goal(alfworld_folder: Path) -> None:
    env = TextWorldEnv()
    observation = await env.reset(file_tasks(alfworld_folder)[0])
    await env.aclose()
    assert observation.goal == "put the apple in the fridge."


async def test_a_pddl_game_lists_its_commands_as_buttons(alfworld_folder: Path) -> None:
    env = TextWorldEnv()
    observation = await env.reset(file_tasks(alfworld_folder)[0])
    await env.aclose()
    assert _buttons(observation.state) == ["go to fridge", "open counter", "take apple from counter"]


async def test_the_walkthrough_wins_a_pddl_game(alfworld_folder: Path) -> None:
    from pddl_game import WALKTHROUGH

    env = TextWorldEnv()
    results = await _play(env, file_tasks(alfworld_folder)[0], 0, WALKTHROUGH)
    await env.aclose()
    assert (results[-1].terminated, results[-1].reward) == (True, 1.0)  # type: ignore[attr-defined]


async def test_a_pddl_game_passes_check_environment(alfworld_folder: Path) -> None:
    await check_environment(TextWorldEnv(), file_tasks(alfworld_folder)[0])


async def test_the_demonstrator_plays_a_pddl_games_walkthrough(alfworld_folder: Path) -> None:
    from dreamgym.textworlds import WalkthroughDemonstrator

    task = file_tasks(alfworld_folder)[0]
    env, policy = TextWorldEnv(), WalkthroughDemonstrator()
    observation = await env.reset(task)
    decision = await policy.act(task, [], observation)
    await env.aclose()
    assert decision.action.label == "take apple from counter"


async def test_an_engine_hung_in_another_thread_cuts_the_episode_instead_of_hanging(
    tiny_task: Task, tiny_games: dict[int, GameInfo]
) -> None:
    import threading

    from dreamgym.textworlds import TEXTWORLD_LOCK

    env = TextWorldEnv(TextWorldConfig(step_deadline_s=0.5))
    await env.reset(tiny_task, seed=0)
    held, release = threading.Event(), threading.Event()

    def hang() -> None:  # stands for a game engine stuck inside TextWorld
        with TEXTWORLD_LOCK:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hang)
    thread.start()
    held.wait(5)
    try:
        result = await env.step(parse_action("type [cmd] [look]"))
    finally:
        release.set()
        thread.join()
    await env.aclose()
    assert result.truncated


async def test_a_real_rooms_sentences_are_lines_unless_the_task_asks_for_paragraphs(
    cooking_task: Task, cache: object
) -> None:
    from textworld_recipes import COOKING

    from dreamgym.textworlds import generated_task

    def paragraphs(state: str) -> list[str]:
        return [f.element.text for f in flatten(parse_state(state)) if f.element.role == "paragraph"]

    env = TextWorldEnv()
    by_sentence = paragraphs((await env.reset(cooking_task, seed=0)).state)
    whole = generated_task(COOKING, lines="paragraph", cache_root=cache.root)  # type: ignore[attr-defined]
    by_paragraph = paragraphs((await env.reset(whole, seed=0)).state)
    await env.aclose()
    assert len(by_sentence) > len(by_paragraph) >= 1
    assert " ".join(by_sentence) == " ".join(by_paragraph)
