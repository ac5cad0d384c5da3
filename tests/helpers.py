"""Small record builders and the command-line runner shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys

from dreamgym.core import Observation, Step, parse_action


def make_step(
    index: int = 0,
    *,
    source: str = "real",
    task_id: str = "task-a",
    episode_id: str = "ep-0",
    site: str = "miniwob",
    seed: int | None = 0,
    state: str | None = None,
    action: str = "click [e1]",
) -> Step:
    """A small valid step; ``state`` defaults to a page that differs per index."""
    text = state if state is not None else f'[e1] button "Button {index}"\n[e2] textbox "Name": value {index}'
    return Step(
        source=source,  # type: ignore[arg-type]
        task_id=task_id,
        episode_id=episode_id,
        step_index=index,
        seed=seed,
        site=site,
        observation=Observation(state=text, url=f"http://127.0.0.1/{index}"),
        action=parse_action(action),
        next_observation=Observation(state=text + "\ntext: clicked"),
        reward=0.0,
        experience_model_id="test-model" if source == "synthetic" else "",
    )


def dreamgym(
    *args: str, check: bool = True, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``dreamgym ARGS`` as a user would, in a fresh process; ``check`` fails the test on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, "-m", "dreamgym.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"dreamgym {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result
