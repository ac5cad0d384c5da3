"""Small record builders shared by the tests."""

from __future__ import annotations

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
