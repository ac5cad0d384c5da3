"""A toy form task with real-format records, for the simulator's tests.

The page asks to enter a name and press Submit; typing fills the box, Submit
ends the episode with reward 1 when the box holds the asked name.
"""

from __future__ import annotations

from dreamgym.core import Observation, Step, Task, parse_action

NAMES = ("Ana", "Bo", "Cyd", "Dee", "Eli", "Flo", "Gus", "Hal")
TASK = Task(task_id="toy/form", instruction="Enter the name the page asks for and press Submit.", site="toy")


def goal(seed: int) -> str:
    return f'Enter "{NAMES[seed % len(NAMES)]}" and press Submit.'


def page(seed: int, typed: str = "") -> Observation:
    box = f"[e2] textbox: {typed}" if typed else "[e2] textbox"
    state = f'[e1] generic: {goal(seed)}\n{box}\n[e3] button "Submit"'
    return Observation(state=state, goal=goal(seed), url="http://127.0.0.1/toy")


def episode(seed: int, typed: str, *, episode_id: str = "", source: str = "real") -> list[Step]:
    """Two steps: type ``typed``, then click Submit."""
    episode_id = episode_id or f"toy-{seed}-{typed}"
    first, filled = page(seed), page(seed, typed)
    common = {
        "source": source,
        "task_id": TASK.task_id,
        "episode_id": episode_id,
        "seed": seed,
        "site": "toy",
        "experience_model_id": "test-model" if source == "synthetic" else "",
    }
    return [
        Step(
            **common,
            step_index=0,
            observation=first,
            action=parse_action(f"type [e2] [{typed}] [0]"),
            next_observation=filled,
            reward=0.0,
        ),
        Step(
            **common,
            step_index=1,
            observation=filled,
            action=parse_action('click [e3] "Submit"'),
            next_observation=filled,
            reward=1.0 if typed == NAMES[seed % len(NAMES)] else 0.0,
            terminated=True,
        ),
    ]


def episodes(seeds: range) -> list[list[Step]]:
    """Per seed, one successful episode and one that types the wrong name."""
    out = []
    for seed in seeds:
        right = NAMES[seed % len(NAMES)]
        wrong = NAMES[(seed + 3) % len(NAMES)]
        out.append(episode(seed, right))
        out.append(episode(seed, wrong))
    return out
