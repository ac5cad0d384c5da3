"""``check_environment`` on a small in-memory environment and on broken variants of it."""

from __future__ import annotations

import itertools

import pytest

from dreamgym.core import (
    Action,
    EnvironmentCheckError,
    Observation,
    StepResult,
    Task,
    check_environment,
)

TASK = Task(task_id="toy/click", instruction='Click "OK".')


class ButtonsEnv:
    """A page of two buttons; clicking OK ends the episode with reward 1."""

    source = "real"

    def __init__(self) -> None:
        self.closed = 0
        self.clicked = ""

    def _observation(self, error: str = "") -> Observation:
        text = '[e1] button "OK"\n[e2] button "Cancel"' + (f"\ntext: clicked {self.clicked}" if self.clicked else "")
        return Observation(state=text, url="http://127.0.0.1/toy", last_action_error=error)

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        self.clicked = ""
        return self._observation()

    async def step(self, action: Action) -> StepResult:
        if action.is_invalid:
            return StepResult(
                observation=self._observation(action.error), reward=0.0, terminated=False, truncated=False
            )
        if action.name != "click" or action.args[0] not in ("e1", "e2"):
            return StepResult(
                observation=self._observation(f"cannot {action}"), reward=0.0, terminated=False, truncated=False
            )
        self.clicked = action.args[0]
        done = action.args[0] == "e1"
        return StepResult(observation=self._observation(), reward=float(done), terminated=done, truncated=False)

    async def aclose(self) -> None:
        self.closed += 1


@pytest.mark.anyio
async def test_a_well_behaved_environment_passes_and_is_closed() -> None:
    env = ButtonsEnv()
    await check_environment(env, TASK)
    assert env.closed == 2


class CounterEnv(ButtonsEnv):
    counter = itertools.count()

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        return Observation(state=f"text: visit {next(self.counter)}")


class RaisingEnv(ButtonsEnv):
    async def step(self, action: Action) -> StepResult:
        if action.is_invalid:
            raise ValueError("bad action")
        return await super().step(action)


class SilentEnv(ButtonsEnv):
    async def step(self, action: Action) -> StepResult:
        return StepResult(observation=self._observation(), reward=0.0, terminated=False, truncated=False)


class BadStateEnv(ButtonsEnv):
    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        return Observation(state="<html><body>raw html</body></html>")


class NoSourceEnv(ButtonsEnv):
    source = "simulated"


class NanRewardEnv(ButtonsEnv):
    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        return StepResult(observation=result.observation, reward=float("nan"), terminated=False, truncated=False)


class SilentTruncationEnv(ButtonsEnv):
    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        return StepResult(observation=result.observation, reward=0.0, terminated=False, truncated=True)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("env_type", "message"),
    [
        (CounterEnv, "different observations"),
        (RaisingEnv, "raised on an invalid action"),
        (SilentEnv, "last_action_error"),
        (BadStateEnv, "state grammar"),
        (NoSourceEnv, "env.source"),
        (NanRewardEnv, "finite number"),
        (SilentTruncationEnv, "truncation_reason"),
    ],
)
async def test_each_broken_promise_is_named(env_type: type[ButtonsEnv], message: str) -> None:
    env = env_type()
    with pytest.raises(EnvironmentCheckError, match=message):
        await check_environment(env, TASK)
    assert env.closed >= 1
