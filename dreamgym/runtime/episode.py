"""One episode of a policy in an environment, recorded as Steps with their provenance.

The runtime issue builds the concurrent scheduler on top of this; today the
demo, the benchmarks and the tests run episodes through it.
"""

from __future__ import annotations

import time
import uuid

from dreamgym.core.protocols import Environment, Policy
from dreamgym.core.types import Episode, Step, StepTimings, Task, observation_hash

__all__ = ["run_episode"]


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
    seed, policy, timings and the policy's token record.

    Returns:
        The steps, in order, and the episode's summary.
    """
    episode_id = uuid.uuid4().hex
    started = time.time()
    observation = await env.reset(task, seed=seed)
    first = observation
    steps: list[Step] = []
    for index in range(max_steps):
        began = time.time()
        t0 = time.perf_counter()
        decision = await policy.act(task, steps, observation)
        t1 = time.perf_counter()
        result = await env.step(decision.action)
        t2 = time.perf_counter()
        cut = not result.terminated and not result.truncated and index == max_steps - 1
        steps.append(
            Step(
                source=env.source,
                task_id=task.task_id,
                episode_id=episode_id,
                group_id=group_id,
                step_index=index,
                seed=seed,
                site=task.site,
                observation=observation,
                action=decision.action,
                next_observation=result.observation,
                reward=result.reward,
                terminated=result.terminated,
                truncated=result.truncated or cut,
                truncation_reason=result.truncation_reason or ("step_limit" if cut else ""),
                policy_id=policy.policy_id,
                # A simulated env names the model and template of each step (they change when it is refitted).
                experience_model_id=result.info.get("experience_model_id", experience_model_id),
                prompt_template_id=result.info.get("prompt_template_id", ""),
                timings=StepTimings(started_at=began, policy_s=t1 - t0, env_s=t2 - t1),
                policy_tokens=decision.tokens,
            )
        )
        observation = result.observation
        if steps[-1].done:
            break
    last = steps[-1]
    summary = Episode(
        episode_id=episode_id,
        task_id=task.task_id,
        source=env.source,
        group_id=group_id,
        seed=seed,
        site=task.site,
        policy_id=policy.policy_id,
        experience_model_id=steps[-1].experience_model_id,
        num_steps=len(steps),
        total_reward=sum(step.reward for step in steps),
        success=last.terminated and last.reward > 0,
        terminated=last.terminated,
        truncated=last.truncated,
        truncation_reason=last.truncation_reason,
        started_at=started,
        ended_at=time.time(),
        initial_observation_hash=observation_hash(first),
    )
    return steps, summary
