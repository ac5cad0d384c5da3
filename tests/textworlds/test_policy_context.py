"""A long text-world episode fits the context policy_context gives a tiny index policy, and outgrows the default."""

from __future__ import annotations

import dataclasses
import random

import pytest

from dreamgym.agents import LocalPolicy, LocalPolicyConfig
from dreamgym.core import BackendError, Observation, Step, Task, candidate_actions, parse_state
from dreamgym.textworlds import TextWorldEnv, policy_context
from dreamgym.trainer import TINY_POLICY, tiny_index_policy

pytestmark = pytest.mark.anyio

STEPS = 10


async def _long_episode(task: Task) -> tuple[list[Step], Observation]:
    """``STEPS`` seeded random commands on a cooking game, never eating (so the episode does not end)."""
    env, rng, history = TextWorldEnv(), random.Random(0), []
    observation = await env.reset(task, seed=0)
    for n in range(STEPS):
        choices = [a for a in candidate_actions(parse_state(observation.state), observation.goal)
                   if a.name == "click" and not (a.label or "").startswith("eat")]  # fmt: skip
        action = rng.choice(choices)
        result = await env.step(action)
        history.append(Step(source="real", task_id=task.task_id, episode_id="long", step_index=n,
                            observation=observation, action=action, next_observation=result.observation))  # fmt: skip
        assert not (result.terminated or result.truncated)
        observation = result.observation
    await env.aclose()
    return history, observation


def _policy(task: Task, history: list[Step], max_positions: int) -> LocalPolicy:
    pages = [(task, step.observation) for step in history]
    model, tokenizer = tiny_index_policy(pages, dataclasses.replace(TINY_POLICY, max_positions=max_positions))
    return LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", seed=0, list_actions=False))


async def test_every_prompt_of_a_long_episode_fits_policy_context(cooking_task: Task) -> None:
    history, last = await _long_episode(cooking_task)
    policy = _policy(cooking_task, history, policy_context(STEPS))
    lengths = [len(policy.input_ids(cooking_task, history[:n], step.observation)) for n, step in enumerate(history)]
    lengths.append(len(policy.input_ids(cooking_task, history, last)))
    assert lengths == sorted(lengths)
    assert lengths[-1] + 2 <= policy_context(STEPS)  # the last prompt and its reply (label, end of turn)


async def test_the_default_context_holds_only_a_few_turns(cooking_task: Task) -> None:
    history, last = await _long_episode(cooking_task)
    policy = _policy(cooking_task, history, TINY_POLICY.max_positions)
    lengths = [len(policy.input_ids(cooking_task, history[:n], step.observation)) for n, step in enumerate(history)]
    assert sum(length <= TINY_POLICY.max_positions for length in lengths) <= 5
    with pytest.raises(BackendError, match="outgrew the model.s context"):
        await policy.act(cooking_task, history, last)


async def test_the_policy_acts_at_the_end_of_a_long_episode(cooking_task: Task) -> None:
    history, last = await _long_episode(cooking_task)
    policy = _policy(cooking_task, history, policy_context(STEPS))
    decision = await policy.act(cooking_task, history, last)
    assert decision.action.name == "click" or decision.action.is_invalid
