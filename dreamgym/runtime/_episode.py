"""One episode of a policy in an environment, recorded as Steps with their provenance.

:func:`run_episode` runs one episode and lets whatever the environment or the
policy raises propagate; :class:`~dreamgym.runtime.Runtime` runs many episodes
through the same :func:`play` loop and records such failures instead
(:func:`finish_episode`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from dreamgym.core.protocols import Environment, Policy, StepResult
from dreamgym.core.types import (
    Episode,
    Observation,
    Source,
    Step,
    StepTimings,
    Task,
    observation_hash,
    shadow_episode_id,
)

__all__ = ["EpisodePlan", "finish_episode", "play", "run_episode", "shadow_step"]

OnStep = Callable[[Step, Sequence[Step]], None]
"""Called with each finished step and the history before it (the prefix and the earlier steps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodePlan:
    """The identity every step of one episode carries, and where the episode starts."""

    task: Task
    """The task played."""
    episode_id: str
    """Key of the episode's steps in the store."""
    seed: int | None = None
    """The seed the episode started with."""
    group_id: str = ""
    """The group (G episodes of one task from one start) the episode belongs to."""
    max_steps: int = 30
    """Step limit, the prefix included; the last step is then truncated (``step_limit``)."""
    prefix: tuple[Step, ...] = ()
    """Steps recorded before the start (a real prefix when branching): the policy reads them as
    history, and this episode's step indexes continue after them."""
    experience_model_id: str = ""
    """Recorded on steps whose environment names no experience model."""


async def play(
    env: Environment,
    policy: Policy,
    plan: EpisodePlan,
    observation: Observation,
    steps: list[Step],
    on_step: OnStep | None = None,
) -> None:
    """Let ``policy`` act from ``observation`` until the episode ends, appending each finished step to ``steps``.

    The episode ends when the environment terminates or truncates it, or at
    ``plan.max_steps`` (the last step is then truncated, ``step_limit``).
    ``steps`` holds every finished step even when this raises or is cancelled.
    """
    history = list(plan.prefix)
    for index in range(len(plan.prefix), plan.max_steps):
        step = await _step(env, policy, plan, index, history, observation)
        steps.append(step)
        if on_step is not None:
            on_step(step, history)
        history.append(step)
        if step.done:
            return
        observation = step.next_observation


async def _step(
    env: Environment, policy: Policy, plan: EpisodePlan, index: int, history: list[Step], observation: Observation
) -> Step:
    began = time.time()
    t0 = time.perf_counter()
    decision = await policy.act(plan.task, history, observation)
    t1 = time.perf_counter()
    result = await env.step(decision.action)
    t2 = time.perf_counter()
    cut = not result.terminated and not result.truncated and index == plan.max_steps - 1
    return Step(
        source=env.source,
        task_id=plan.task.task_id,
        episode_id=plan.episode_id,
        group_id=plan.group_id,
        step_index=index,
        seed=plan.seed,
        site=plan.task.site,
        observation=observation,
        action=decision.action,
        next_observation=result.observation,
        reward=result.reward,
        terminated=result.terminated,
        truncated=result.truncated or cut,
        truncation_reason=result.truncation_reason or ("step_limit" if cut else ""),
        policy_id=policy.policy_id,
        # A simulated env names the model and template of each step (they change when it is refitted).
        experience_model_id=result.info.get("experience_model_id", plan.experience_model_id),
        prompt_template_id=result.info.get("prompt_template_id", ""),
        timings=StepTimings(started_at=began, policy_s=t1 - t0, env_s=t2 - t1),
        policy_tokens=decision.tokens,
    )


def finish_episode(
    plan: EpisodePlan,
    steps: Sequence[Step],
    *,
    source: Source,
    policy_id: str,
    started_at: float,
    initial_observation_hash: str = "",
    cut: str = "",
    error: str = "",
) -> tuple[tuple[Step, ...], Episode]:
    """The episode's final steps and its summary.

    Args:
        plan: The episode's identity.
        steps: Its finished steps, in order.
        source: ``real`` or ``synthetic``.
        policy_id: The policy that acted.
        started_at: Unix time of the start.
        initial_observation_hash: :func:`observation_hash` of the first observation ("" if there was none).
        cut: Why the episode was cut from outside (``deadline``, ``error``, ``cancelled``), or "".
            The last step, if it had not ended the episode, is marked truncated with this reason.
        error: The error that ended the episode, if one did.
    """
    final = list(steps)
    if cut and final and not final[-1].done:
        final[-1] = msgspec.structs.replace(final[-1], truncated=True, truncation_reason=cut)
    last = final[-1] if final else None
    reason = last.truncation_reason if last is not None and last.truncated else cut
    episode = Episode(
        episode_id=plan.episode_id,
        task_id=plan.task.task_id,
        source=source,
        group_id=plan.group_id,
        seed=plan.seed,
        site=plan.task.site,
        policy_id=policy_id,
        experience_model_id=last.experience_model_id if last is not None else "",
        num_steps=len(final),
        total_reward=_outcome(last),
        success=last is not None and last.terminated and last.reward > 0,
        terminated=last is not None and last.terminated,
        truncated=bool(reason),
        truncation_reason=reason,
        error=error,
        started_at=started_at,
        ended_at=time.time(),
        initial_observation_hash=initial_observation_hash,
    )
    return tuple(final), episode


def _outcome(last: Step | None) -> float:
    """The reward of the terminating step, clipped to [0, 1]; 0 for an episode that never terminated.

    Rewards on middle steps (an experience model may predict them) and the
    raw value of the last one stay on the steps, as the environment said them.
    """
    if last is None or not last.terminated:
        return 0.0
    return min(1.0, max(0.0, last.reward))


def shadow_step(real: Step, prediction: StepResult, seconds: float) -> Step:
    """The simulator's prediction of a real step, as a synthetic step of episode ``<real episode>/shadow``.

    It keeps the real step's task, group, seed, index, observation and action;
    the next observation, reward and end are the prediction's.
    """
    return msgspec.structs.replace(
        real,
        source="synthetic",
        episode_id=shadow_episode_id(real.episode_id),
        next_observation=prediction.observation,
        reward=prediction.reward,
        terminated=prediction.terminated,
        truncated=prediction.truncated,
        truncation_reason=prediction.truncation_reason,
        experience_model_id=str(prediction.info.get("experience_model_id", "")),
        prompt_template_id=str(prediction.info.get("prompt_template_id", "")),
        timings=StepTimings(started_at=time.time() - seconds, env_s=seconds),
        policy_tokens=None,
    )


async def run_episode(
    env: Environment,
    policy: Policy,
    task: Task,
    *,
    seed: int | None = None,
    max_steps: int = 30,
    group_id: str = "",
    experience_model_id: str = "",
) -> tuple[list[Step], Episode]:
    """Reset ``env`` on ``task`` and let ``policy`` act until the episode ends.

    The episode ends when the environment terminates or truncates it, or after
    ``max_steps`` (then the last step is marked truncated, ``step_limit``).
    Each step records its source (the environment's), task, episode, group,
    seed, policy, timings and the policy's token record. What the environment
    or the policy raises propagates (the :class:`~dreamgym.runtime.Runtime`
    records it instead).

    Returns:
        The steps, in order, and the episode's summary.

    Example:
        >>> steps, episode = await run_episode(env, RandomExplorer(0), task, seed=3, max_steps=8)
    """
    plan = EpisodePlan(
        task=task,
        episode_id=uuid.uuid4().hex,
        seed=seed,
        group_id=group_id,
        max_steps=max_steps,
        experience_model_id=experience_model_id,
    )
    started = time.time()
    observation = await env.reset(task, seed=seed)
    steps: list[Step] = []
    await play(env, policy, plan, observation, steps)
    final, episode = finish_episode(
        plan,
        steps,
        source=env.source,
        policy_id=policy.policy_id,
        started_at=started,
        initial_observation_hash=observation_hash(observation),
    )
    return list(final), episode
