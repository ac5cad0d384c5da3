"""``check_environment``: run any environment, ours or a user's, through the protocol's promises."""

from __future__ import annotations

import math

import anyio

from dreamgym.core.actions import candidate_actions, invalid_action
from dreamgym.core.errors import EnvironmentCheckError, StateFormatError
from dreamgym.core.protocols import Environment, StepResult
from dreamgym.core.state import parse_state
from dreamgym.core.types import SOURCES, Observation, Task

__all__ = ["check_environment"]


async def check_environment(env: Environment, task: Task, *, seed: int = 0, timeout: float = 60.0) -> None:
    """Check that ``env`` keeps the Environment protocol on ``task``.

    Checks, in order: ``source`` is ``"real"`` or ``"synthetic"``; ``reset``
    returns an :class:`Observation` whose state parses; resetting again with
    the same seed gives the same observation; an invalid action comes back as
    ``last_action_error`` instead of an exception; a valid candidate action
    returns a well-formed :class:`StepResult`; ``aclose`` may be called twice.
    The environment is closed afterwards.

    Raises:
        EnvironmentCheckError: The first broken promise, with what was seen.
    """
    try:
        with anyio.fail_after(timeout):
            await _check(env, task, seed)
    except TimeoutError as exc:
        raise EnvironmentCheckError(f"the environment did not finish the checks within {timeout} s") from exc
    finally:
        await env.aclose()
    await env.aclose()  # idempotent: a second close must not raise


async def _check(env: Environment, task: Task, seed: int) -> None:
    if getattr(env, "source", None) not in SOURCES:
        raise EnvironmentCheckError(f"env.source must be 'real' or 'synthetic', got {getattr(env, 'source', None)!r}")
    first = _checked_observation(await env.reset(task, seed=seed), "reset")
    again = _checked_observation(await env.reset(task, seed=seed), "reset")
    if again != first:
        raise EnvironmentCheckError(
            "reset(task, seed=...) twice with the same seed gave different observations; "
            "element ids and content must be deterministic for a task and seed"
        )
    try:
        result = await env.step(invalid_action("not an action", "unknown action 'not'"))
    except Exception as exc:
        raise EnvironmentCheckError(
            "step() raised on an invalid action; report it in last_action_error instead"
        ) from exc
    _checked_result(result, "step(invalid action)")
    if not result.observation.last_action_error:
        raise EnvironmentCheckError("an invalid action must come back with last_action_error set")
    await env.reset(task, seed=seed)
    candidates = candidate_actions(parse_state(first.state), task.instruction)
    if candidates:
        _checked_result(await env.step(candidates[0]), f"step({candidates[0]})")


def _checked_observation(observation: object, where: str) -> Observation:
    if not isinstance(observation, Observation):
        raise EnvironmentCheckError(f"{where} returned {type(observation).__name__}, not an Observation")
    try:
        parse_state(observation.state)
    except StateFormatError as exc:
        raise EnvironmentCheckError(f"{where} returned a state outside the state grammar: {exc}") from exc
    return observation


def _checked_result(result: object, where: str) -> None:
    if not isinstance(result, StepResult):
        raise EnvironmentCheckError(f"{where} returned {type(result).__name__}, not a StepResult")
    _checked_observation(result.observation, where)
    if not isinstance(result.reward, int | float) or not math.isfinite(result.reward):
        raise EnvironmentCheckError(f"{where} returned reward {result.reward!r}; it must be a finite number")
    if not isinstance(result.terminated, bool) or not isinstance(result.truncated, bool):
        raise EnvironmentCheckError(f"{where} must return bool terminated and truncated")
    if result.truncated and not result.truncation_reason:
        raise EnvironmentCheckError(f"{where} truncated the episode without a truncation_reason")
