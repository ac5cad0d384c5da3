"""The Gymnasium adapter: the registered ids, made with gymnasium.make, pass check_env, real and simulated."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.utils.env_checker import check_env

import dreamgym  # noqa: F401  (registers the ids)
from dreamgym.adapters import UnicodeText
from dreamgym.core import ConfigError

REAL_ID = "dreamgym/miniwob.click-button-v0"
SIM_ID = "dreamgym/sim.miniwob.click-button-v0"


@pytest.fixture(scope="module")
def real_env() -> Iterator[gymnasium.Env[Any, Any]]:
    env = gymnasium.make(REAL_ID, max_steps=5, render_mode="ansi")
    yield env
    env.close()


def button_for_goal(observation: dict[str, str]) -> str:
    """The id of the button the goal names (``Click on the "okay" button.``), read from the state text."""
    label = re.search(r'"(.+)"', observation["goal"])
    assert label is not None, observation["goal"]
    element = re.search(rf'\[(e\d+)\] button "{re.escape(label.group(1))}"', observation["state"])
    assert element is not None, observation["state"]
    return element.group(1)


def test_unicode_text_holds_any_string_of_its_lengths() -> None:
    space = UnicodeText(20)
    assert space.contains('button "Oui ✓"')
    assert space.contains("")
    assert not space.contains("x" * 21)
    assert not space.contains(b"bytes")
    assert space.sample() in space


def test_the_real_id_passes_gymnasiums_env_checker(real_env: gymnasium.Env[Any, Any]) -> None:
    check_env(real_env.unwrapped)


def test_a_scripted_episode_clicks_the_button_the_goal_names_and_succeeds(real_env: gymnasium.Env[Any, Any]) -> None:
    observation, info = real_env.reset(seed=3)
    assert info == {"task_id": "miniwob/click-button", "seed": 3, "source": "real"}
    assert observation["state"] in str(real_env.render())
    observation, reward, terminated, truncated, info = real_env.step(f"click [{button_for_goal(observation)}]")
    assert reward > 0
    assert terminated is True
    assert truncated is False
    assert info["step"] == 1


def test_reset_draws_the_task_and_the_seed_when_given_neither(real_env: gymnasium.Env[Any, Any]) -> None:
    observation, info = real_env.reset()
    assert observation in real_env.observation_space
    assert info["task_id"] == "miniwob/click-button"
    assert isinstance(info["seed"], int)
    real_env.reset(seed=7)
    _, first = real_env.reset()
    real_env.reset(seed=7)
    _, second = real_env.reset()
    assert first == second


def test_options_name_a_task_by_id_and_an_unknown_id_is_a_clear_error(real_env: gymnasium.Env[Any, Any]) -> None:
    _, info = real_env.reset(seed=1, options={"task": "miniwob/click-button"})
    assert info["task_id"] == "miniwob/click-button"
    with pytest.raises(ConfigError, match=r"no task 'miniwob/nope' in this env; known: miniwob/click-button"):
        real_env.reset(options={"task": "miniwob/nope"})
    with pytest.raises(ConfigError, match="takes the option 'task' only"):
        real_env.reset(options={"taks": "miniwob/click-button"})


def test_unparseable_text_comes_back_as_last_action_error(real_env: gymnasium.Env[Any, Any]) -> None:
    real_env.reset(seed=1)
    observation, reward, terminated, truncated, info = real_env.step("dance wildly")
    assert "unknown action" in observation["last_action_error"]
    assert reward == 0.0
    assert (terminated, truncated) == (False, False)
    assert info["action"] == "dance wildly"


def test_identical_seeded_runs_give_equal_steps_and_infos_and_the_step_limit_truncates(
    real_env: gymnasium.Env[Any, Any],
) -> None:
    actions = ["hover [e1]", "nonsense", "click [e99]", "hover [e2]", "hover [e1]"]

    def run() -> list[tuple[Any, ...]]:
        real_env.reset(seed=11)
        return [real_env.step(action) for action in actions]

    first, second = run(), run()
    assert first == second
    assert [info for *_, info in first][-1] == {
        "task_id": "miniwob/click-button",
        "seed": 11,
        "source": "real",
        "step": 5,
        "action": "hover [e1]",
        "truncation_reason": "step_limit",
    }
    assert [truncated for _, _, _, truncated, _ in first] == [False] * 4 + [True]


def test_closing_twice_is_fine_and_stops_the_portal_thread() -> None:
    """Every thread the environment started has ended once it is closed (a thread of another test that ends
    meanwhile, or one still winding down for a moment after close, is not the environment's leak)."""
    before = set(threading.enumerate())
    env = gymnasium.make(REAL_ID)
    started = set(threading.enumerate()) - before
    env.close()
    env.close()
    deadline = time.monotonic() + 5
    while any(thread.is_alive() for thread in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started and not [thread.name for thread in started if thread.is_alive()]
    with pytest.raises(ClosedEnvironmentError):
        env.reset()


def test_importing_dreamgym_registers_the_ids_without_importing_torch_or_a_browser() -> None:
    code = (
        "import sys, dreamgym, gymnasium; "
        f"print({REAL_ID!r} in gymnasium.registry, {SIM_ID!r} in gymnasium.registry, "
        "[m for m in ('torch', 'transformers', 'playwright') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "True True []"


def test_the_simulated_id_needs_a_model() -> None:
    with pytest.raises(ConfigError, match="needs an experience model"):
        gymnasium.make(SIM_ID)


def test_the_simulated_id_passes_gymnasiums_env_checker_and_its_model_answers(tiny_models: tuple[Path, Path]) -> None:
    _, sim_dir = tiny_models
    env = gymnasium.make(SIM_ID, model=str(sim_dir), store=str(sim_dir.parent / "store"), render_mode="ansi")
    try:
        check_env(env.unwrapped)
        observation, info = env.reset(seed=0)
        assert info == {"task_id": "miniwob/click-button", "seed": 0, "source": "synthetic"}
        observation, reward, *_, info = env.step(f"click [{button_for_goal(observation)}]")
        assert observation in env.observation_space
        assert reward in (0.0, 1.0)
        assert info["action"].startswith("click [")
    finally:
        env.close()
