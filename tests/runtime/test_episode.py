from __future__ import annotations

from collections.abc import Sequence

import pytest

from dreamgym.core import Observation, PolicyDecision, PolicyTokens, Step, Task, observation_hash, parse_action
from dreamgym.runtime import run_episode

pytestmark = pytest.mark.anyio


class Counter:
    """A small environment: each step increments a counter; ``stop`` ends the episode with reward 1."""

    source = "real"

    def __init__(self) -> None:
        self.count = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        self.count = 0
        return Observation(state="text: 0")

    async def step(self, action):  # type: ignore[no-untyped-def]
        from dreamgym.core import StepResult

        self.count += 1
        done = action.name == "stop"
        return StepResult(observation=Observation(state=f"text: {self.count}"), reward=float(done), terminated=done,
                          truncated=False)  # fmt: skip

    async def aclose(self) -> None:
        pass


class StopAfter:
    policy_id = "stop-after"

    def __init__(self, n: int) -> None:
        self.n = n

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        text = "stop [done]" if len(history) + 1 >= self.n else "scroll [down]"
        tokens = PolicyTokens(action_ids=(len(history),), action_logprobs=(-0.5,))
        return PolicyDecision(action=parse_action(text), tokens=tokens)


TASK = Task(task_id="toy/count", instruction="Count, then stop.", site="toy")


async def test_an_episode_is_recorded_step_by_step_with_its_provenance() -> None:
    steps, episode = await run_episode(Counter(), StopAfter(3), TASK, seed=5, group_id="g", max_steps=10)
    assert [s.step_index for s in steps] == [0, 1, 2]
    assert [s.observation.state for s in steps] == ["text: 0", "text: 1", "text: 2"]
    assert steps[0].next_observation == steps[1].observation
    assert all(s.source == "real" and s.seed == 5 and s.group_id == "g" and s.site == "toy" for s in steps)
    assert steps[-1].terminated and steps[-1].reward == 1.0 and [s.done for s in steps] == [False, False, True]
    assert [s.policy_tokens.action_ids for s in steps] == [(0,), (1,), (2,)]  # type: ignore[union-attr]
    assert len({s.episode_id for s in steps}) == 1 and episode.episode_id == steps[0].episode_id
    assert (episode.num_steps, episode.success, episode.total_reward, episode.policy_id) == (3, True, 1.0, "stop-after")
    assert episode.initial_observation_hash == observation_hash(steps[0].observation)


async def test_running_out_of_steps_marks_the_last_step_truncated() -> None:
    steps, episode = await run_episode(Counter(), StopAfter(99), TASK, max_steps=4)
    assert len(steps) == 4 and steps[-1].truncated and steps[-1].truncation_reason == "step_limit"
    assert not episode.success and episode.truncated and not episode.terminated
