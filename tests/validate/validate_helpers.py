"""Helpers of the validation tests: a toy task with known answers and small experience models.

The toy page asks for a name; typing fills the box, Submit ends the episode
(reward 1 when the box holds the asked name). Per seed there are two real
episodes: ``right`` (type the name, Submit) and ``detour`` (click a missing
element, which fails with an action error and leaves the page, then type a
wrong name, Submit). So per seed: 5 steps, 1 rewarded, 2 typing steps that
change the page, 1 action error.

The experience models are real implementations of the ``ExperienceModel``
protocol — neighbours of the metric code under test, not stand-ins for it:
``OracleModel`` answers what really happened, ``WrongModel`` answers the real
page plus one invented element with the reward and the end flipped,
``BrokenModel`` never gives a usable answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from dreamgym.core import ModelOutputError, Observation, Prediction, Step, Task, missing_element_error, parse_action
from dreamgym.core.protocols import ExperienceQuery, Neighbour
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import TemplateConfig
from dreamgym.simulator._sft import ScratchModelConfig

NAMES = ("Ana", "Bo", "Cyd", "Dee", "Eli", "Flo", "Gus", "Hal")
TASK = Task(task_id="toy/name", instruction="Enter the name the page asks for and press Submit.", site="toy")
EMBEDDER = HashingEmbedder(64)
MISSING = missing_element_error("e9")
INVENTED = '[e99] dialog "Bogus"'
TEMPLATE = TemplateConfig(history=1, neighbours=2)
TINY = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=2048)  # fmt: skip


def goal(seed: int) -> str:
    return f'Enter "{NAMES[seed % len(NAMES)]}" and press Submit.'


def page(seed: int, typed: str = "", error: str = "") -> Observation:
    box = f"[e2] textbox: {typed}" if typed else "[e2] textbox"
    state = f'[e1] generic: {goal(seed)}\n{box}\n[e3] button "Submit"'
    return Observation(state=state, goal=goal(seed), url="http://127.0.0.1/toy", last_action_error=error)


def _step(seed: int, episode: str, index: int, before: Observation, action: str, after: Observation,
          reward: float = 0.0, done: bool = False) -> Step:  # fmt: skip
    return Step(
        source="real", task_id=TASK.task_id, episode_id=f"toy-{seed}-{episode}", step_index=index, seed=seed,
        site="toy", observation=before, action=parse_action(action), next_observation=after, reward=reward,
        terminated=done,
    )  # fmt: skip


def episodes(seeds: Sequence[int]) -> list[list[Step]]:
    """Per seed, the ``right`` episode and the ``detour`` episode (see the module docstring)."""
    out = []
    for seed in seeds:
        name, wrong = NAMES[seed % len(NAMES)], NAMES[(seed + 3) % len(NAMES)]
        empty, filled, mistyped = page(seed), page(seed, name), page(seed, wrong)
        out.append([
            _step(seed, "right", 0, empty, f"type [e2] [{name}] [0]", filled),
            _step(seed, "right", 1, filled, 'click [e3] "Submit"', filled, reward=1.0, done=True),
        ])  # fmt: skip
        out.append([
            _step(seed, "detour", 0, empty, "click [e9]", page(seed, error=MISSING)),
            _step(seed, "detour", 1, page(seed, error=MISSING), f"type [e2] [{wrong}] [0]", mistyped),
            _step(seed, "detour", 2, mistyped, 'click [e3] "Submit"', mistyped, done=True),
        ])  # fmt: skip
    return out


def all_steps(seeds: Sequence[int]) -> list[Step]:
    return [step for episode in episodes(seeds) for step in episode]


def open_store(path: Path, **kwargs: object) -> LmdbReplayStore:
    return LmdbReplayStore(path, embedder=EMBEDDER, **kwargs)  # type: ignore[arg-type]


async def fill_store(store: LmdbReplayStore, seeds: Sequence[int]) -> None:
    await store.put_task(TASK)
    for steps in episodes(seeds):
        await store.append(steps)
    await store.flush()


def _key(goal: str, state: str, action: str) -> tuple[str, str, str]:
    return (goal, state, action)


class OracleModel:
    """Answers what really happened, looked up among the real steps it was given.

    It records the neighbours of every query, so tests can check the leakage rule.
    """

    model_id = "test:oracle"

    def __init__(self, steps: Sequence[Step]) -> None:
        self._answers = {_key(s.observation.goal, s.observation.state, str(s.action)): s for s in steps}
        self.seen: list[tuple[ExperienceQuery, tuple[Neighbour, ...]]] = []

    def real(self, query: ExperienceQuery) -> Step:
        return self._answers[_key(query.observation.goal, query.observation.state, str(query.action))]

    async def predict(self, query: ExperienceQuery) -> Prediction:
        self.seen.append((query, query.neighbours))
        step = self.real(query)
        return Prediction(observation=step.next_observation, reward=step.reward, terminated=step.terminated,
                          model_id=self.model_id)  # fmt: skip

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        raise ModelOutputError("the oracle starts from real pages only")


class WrongModel(OracleModel):
    """The real next page plus one invented element, with reward and end flipped and no action error."""

    model_id = "test:wrong"

    async def predict(self, query: ExperienceQuery) -> Prediction:
        step = self.real(query)
        observation = msgspec.structs.replace(
            step.next_observation, state=f"{step.next_observation.state}\n{INVENTED}", last_action_error=""
        )
        return Prediction(observation=observation, reward=1.0 - step.reward, terminated=not step.terminated,
                          model_id=self.model_id, raw="(wrong on purpose)")  # fmt: skip


class BrokenModel:
    """Never gives a usable answer."""

    model_id = "test:broken"

    async def predict(self, query: ExperienceQuery) -> Prediction:
        raise ModelOutputError("no usable answer")

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        raise ModelOutputError("no usable answer")


SEEDS_FOR_REPORT = range(10, 14)
