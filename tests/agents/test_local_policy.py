"""LocalPolicy with a tiny real model: the chooser, the token record, batching, generation."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import torch
from agent_pages import BUTTONS, PAGES, TASK

from dreamgym.agents import LocalPolicy, LocalPolicyConfig, sequence_ids, user_message
from dreamgym.core import (
    BackendError,
    Observation,
    Policy,
    PolicyDecision,
    PolicyTokens,
    Step,
    Task,
    candidate_actions,
    decode_record,
    encode_record,
    parse_state,
)
from dreamgym.simulator import weights_digest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BUTTON_TASK = Task(task_id="toy/buttons", instruction="Click a button.")


def make_policy(tiny_chat: tuple[Any, Any], **settings: Any) -> LocalPolicy:
    model, tokenizer = tiny_chat
    return LocalPolicy(model, tokenizer, name="tiny", digest="ab" * 32, config=LocalPolicyConfig(**settings))


class PromptFeed:
    """Watches ``model``'s prompt passes (those with ``logits_to_keep``): row 0's ids by position, pads left out.

    A prompt reaches the model in pieces: the system turn once (its KV cache is
    kept), what a batch shares, each row's own rest. Putting the pieces of one
    turn back by their positions gives the ids the model saw on that turn.
    Tests that read it use an uncalibrated chooser, whose turn has one prompt.
    """

    def __init__(self, model: Any) -> None:
        self.passes: list[dict[int, int]] = []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if "logits_to_keep" not in kwargs:
            return  # a candidate pass, or a generated token
        ids = kwargs["input_ids"][0].tolist()
        given = kwargs.get("position_ids")
        positions = given[0].tolist() if given is not None else list(range(len(ids)))
        mask = kwargs.get("attention_mask")
        keep = mask[0, -len(ids) :].tolist() if mask is not None else [1] * len(ids)
        self.passes.append({p: t for p, t, k in zip(positions, ids, keep, strict=True) if k})

    def turn(self, since: int) -> list[int]:
        """The ids seen by the passes from ``since`` on, over the system turn's pass."""
        seen = dict(next(p for p in self.passes if 0 in p))
        for piece in self.passes[since:]:
            seen.update(piece)
        assert sorted(seen) == list(range(len(seen))), "the prompt reached the model with a hole"
        return [seen[n] for n in range(len(seen))]

    def close(self) -> None:
        self._handle.remove()


@contextmanager
def prompt_feed(model: Any) -> Iterator[PromptFeed]:
    feed = PromptFeed(model)
    try:
        yield feed
    finally:
        feed.close()


def step_of(index: int, decision: PolicyDecision, observation: Observation, following: Observation) -> Step:
    return Step(
        source="real",
        task_id=TASK.task_id,
        episode_id="ep",
        step_index=index,
        observation=observation,
        action=decision.action,
        next_observation=following,
        policy_tokens=decision.tokens,
    )


def full_logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """A fresh forward pass over the whole sequence: log p(ids[n] | ids[:n]) at position n (0 at 0)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return torch.cat([torch.zeros(1), logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]])


async def run_three_turns(policy: LocalPolicy) -> tuple[list[Step], list[PolicyTokens], list[list[int]]]:
    """Three turns over the hand-made pages; returns the steps, records and the prompt ids fed on each turn."""
    steps: list[Step] = []
    records: list[PolicyTokens] = []
    fed: list[list[int]] = []
    with prompt_feed(policy.model) as feed:
        for n, page in enumerate(PAGES):
            since = len(feed.passes)
            decision = await policy.act(TASK, steps, page)
            assert decision.tokens is not None
            fed.append(feed.turn(since))
            records.append(decision.tokens)
            steps.append(step_of(n, decision, page, PAGES[n + 1] if n + 1 < len(PAGES) else page))
    return steps, records, fed


async def test_policy_id_carries_the_weights_digest(tiny_chat: tuple[Any, Any], tmp_path: Path) -> None:
    model, tokenizer = tiny_chat
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = LocalPolicy.load(tmp_path)
    assert isinstance(loaded, Policy)
    assert loaded.policy_id == f"local:{tmp_path.name}@{weights_digest(tmp_path)[:16]}/choose"
    in_memory = LocalPolicy(model, tokenizer, name="tiny")
    assert in_memory.policy_id.startswith("local:tiny@") and len(in_memory.digest) == 64
    in_memory.refresh_digest()  # unchanged weights, unchanged id
    assert in_memory.policy_id == LocalPolicy(model, tokenizer, name="tiny").policy_id


async def test_scores_are_finite_and_their_probabilities_sum_to_one(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat)
    scores = await policy.scores(BUTTON_TASK, [], BUTTONS)
    assert [s.action for s in scores] == list(candidate_actions(parse_state(BUTTONS.state), BUTTONS.goal))
    assert all(math.isfinite(s.score) and math.isfinite(s.logprob) and s.logprob < 0 for s in scores)
    assert math.isclose(sum(s.probability for s in scores), 1.0, rel_tol=1e-9)


async def test_a_calibrated_score_is_the_logprob_less_the_goal_free_one(tiny_chat: tuple[Any, Any]) -> None:
    calibrated = await make_policy(tiny_chat).scores(BUTTON_TASK, [], BUTTONS)
    plain = await make_policy(tiny_chat, calibrate=False).scores(BUTTON_TASK, [], BUTTONS)
    goal_free = await make_policy(tiny_chat, calibrate=False).scores(
        Task(task_id="blank", instruction=""), [], msgspec.structs.replace(BUTTONS, goal="")
    )
    assert all(s.score == s.logprob for s in plain)
    for c, p, g in zip(calibrated, plain, goal_free, strict=True):
        assert c.action == p.action == g.action
        assert math.isclose(c.logprob, p.logprob, abs_tol=1e-4)
        assert math.isclose(c.score, p.logprob - g.logprob, abs_tol=1e-4)


async def test_temperature_zero_takes_the_best_candidate(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, temperature=0.0, include_scroll=False)
    scores = await policy.scores(BUTTON_TASK, [], BUTTONS)
    best = max(scores, key=lambda s: s.score)
    decisions = [await policy.act(BUTTON_TASK, [], BUTTONS) for _ in range(3)]
    assert {d.action for d in decisions} == {best.action}
    assert decisions[0].tokens is not None
    assert math.isclose(sum(decisions[0].tokens.action_logprobs), best.logprob, rel_tol=1e-6)


async def test_seeded_sampling_repeats_and_other_seeds_choose_otherwise(tiny_chat: tuple[Any, Any]) -> None:
    # A hot chooser over an untrained model, so that every button has a real chance.
    settings = {"temperature": 8.0, "include_scroll": False}
    scores = await make_policy(tiny_chat, **settings).scores(BUTTON_TASK, [], BUTTONS)
    assert max(s.probability for s in scores) < 0.8

    async def group(seed: int) -> list[str]:
        policy = make_policy(tiny_chat, seed=seed, **settings)
        return [str((await policy.act(BUTTON_TASK, [], BUTTONS)).action) for _ in range(10)]

    first = await group(1)
    assert await group(1) == first
    assert await group(2) != first
    assert len(set(first)) > 1  # a group's episodes differ


async def test_a_three_turn_record_is_exactly_what_the_model_was_fed(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, seed=3, calibrate=False)
    steps, records, fed = await run_three_turns(policy)
    for turn in range(3):
        assert fed[turn] == sequence_ids(records[:turn]) + list(records[turn].prompt_ids)
    assert fed[2] == policy.input_ids(TASK, steps[:2], PAGES[2])
    assert sequence_ids(records) == fed[2] + list(records[2].action_ids)


async def test_recorded_logprobs_match_a_fresh_forward_pass_over_the_episode(tiny_chat: tuple[Any, Any]) -> None:
    model, _ = tiny_chat
    _, records, _ = await run_three_turns(make_policy(tiny_chat, seed=4))
    reference = full_logprobs(model, sequence_ids(records))
    offset = 0
    for record in records:
        offset += len(record.prompt_ids)
        expected = reference[offset : offset + len(record.action_ids)]
        assert torch.allclose(torch.tensor(record.action_logprobs), expected, atol=1e-4)
        offset += len(record.action_ids) + len(record.env_ids)


async def test_action_ids_are_the_reply_and_env_ids_the_next_user_turn(tiny_chat: tuple[Any, Any]) -> None:
    _, tokenizer = tiny_chat
    steps, records, _ = await run_three_turns(make_policy(tiny_chat, seed=5))
    for step, record in zip(steps, records, strict=True):
        assert tokenizer.decode(record.action_ids) == f"{step.action}<|end|>"
        assert record.env_ids == ()
    for page, record in zip(PAGES[1:], records[1:], strict=True):
        # the rest of the closed assistant turn, the user turn, the generation prefix: never the policy's
        expected = f"\n<|user|>\n{user_message(TASK.instruction, page)}<|end|>\n<|assistant|>\n"
        assert tokenizer.decode(record.prompt_ids) == expected


async def test_records_survive_the_store_and_steps_without_records_rebuild_alike(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, seed=6, calibrate=False)
    steps, _, fed = await run_three_turns(policy)
    stored = [decode_record(encode_record(step), Step) for step in steps[:2]]
    assert policy.input_ids(TASK, stored, PAGES[2]) == fed[2]
    bare = [msgspec.structs.replace(step, policy_tokens=None) for step in steps[:2]]
    assert policy.input_ids(TASK, bare, PAGES[2]) == fed[2]


async def test_a_turn_after_a_step_without_record_starts_the_sequence_afresh(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, seed=7, calibrate=False)
    with prompt_feed(policy.model) as feed:
        steps, _, fed = await run_three_turns(policy)
        scripted = [msgspec.structs.replace(steps[0], policy_tokens=None)]
        since = len(feed.passes)
        second = await policy.act(TASK, scripted, PAGES[1])
        assert second.tokens is not None
        assert list(second.tokens.prompt_ids) == feed.turn(since) == fed[1]  # the scripted step folded in
        history = [*scripted, step_of(1, second, PAGES[1], PAGES[2])]
        since = len(feed.passes)
        third = await policy.act(TASK, history, PAGES[2])
        assert third.tokens is not None
        seen = feed.turn(since)
    assert seen == sequence_ids([second.tokens, third.tokens])[: len(seen)]  # the trailing recorded run


async def test_concurrent_episodes_share_one_batch_and_keep_separate_records(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, temperature=0.0, batch_window_s=0.2)
    solo_first = await policy.act(TASK, [], PAGES[0])
    history = [step_of(0, solo_first, PAGES[0], PAGES[1])]
    calls = [(TASK, [], PAGES[0]), (TASK, history, PAGES[1]), (BUTTON_TASK, [], BUTTONS), (TASK, [], PAGES[0])]
    solo = [await policy.act(*call) for call in calls]
    together: list[PolicyDecision | None] = [None] * len(calls)

    async def act(n: int) -> None:
        together[n] = await policy.act(*calls[n])

    before = policy.batches
    async with anyio.create_task_group() as tg:
        for n in range(len(calls)):
            tg.start_soon(act, n)
    assert policy.batches == before + 1
    for alone, batched in zip(solo, together, strict=True):
        assert batched is not None and alone.tokens is not None and batched.tokens is not None
        assert batched.action == alone.action
        assert (batched.tokens.prompt_ids, batched.tokens.action_ids) == (
            alone.tokens.prompt_ids,
            alone.tokens.action_ids,
        )
        assert torch.allclose(
            torch.tensor(batched.tokens.action_logprobs), torch.tensor(alone.tokens.action_logprobs), atol=1e-4
        )
    assert together[1] is not None and together[1].tokens is not None
    assert together[1].tokens.prompt_ids != together[0].tokens.prompt_ids  # type: ignore[union-attr]


async def test_weights_changed_in_place_are_never_scored_with_stale_keys(tiny_chat: tuple[Any, Any]) -> None:
    model, tokenizer = copy.deepcopy(tiny_chat[0]), tiny_chat[1]
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(temperature=0.0))
    sibling = policy.sibling(temperature=0.0)
    await policy.act(TASK, [], PAGES[0])  # keeps the system turn's KV cache
    await sibling.act(TASK, [], PAGES[0])
    with torch.no_grad():
        for parameter in model.parameters():
            # as a fused optimizer step does: in place, without bumping the tensors' version counters
            parameter.data.mul_(1.5)
    policy.weights_changed()  # the explicit count every weight change bumps (the trainer does, per step)
    after = await policy.act(TASK, [], PAGES[0])
    assert after.tokens is not None
    beside = await sibling.act(TASK, [], PAGES[0])  # a sibling shares the count
    assert beside.tokens is not None
    assert beside.tokens.action_logprobs == pytest.approx(after.tokens.action_logprobs, abs=1e-5)
    assert after.tokens is not None
    reference = full_logprobs(model, sequence_ids([after.tokens]))
    start = len(after.tokens.prompt_ids)
    assert torch.allclose(torch.tensor(after.tokens.action_logprobs), reference[start:], atol=1e-4)
    old_weights = full_logprobs(tiny_chat[0], sequence_ids([after.tokens]))
    assert not torch.allclose(old_weights[start:], reference[start:], atol=1e-2)  # the change matters


async def test_scoring_in_many_small_passes_changes_nothing(tiny_chat: tuple[Any, Any]) -> None:
    whole = await make_policy(tiny_chat).scores(TASK, [], PAGES[0])
    pieces = await make_policy(tiny_chat, max_pass_tokens=1).scores(TASK, [], PAGES[0])
    assert [s.action for s in pieces] == [s.action for s in whole]
    assert all(math.isclose(a.score, b.score, abs_tol=1e-4) for a, b in zip(whole, pieces, strict=True))


async def test_generate_mode_records_the_sampled_ids_and_reuses_them_next_turn(tiny_chat: tuple[Any, Any]) -> None:
    model, _ = tiny_chat
    policy = make_policy(tiny_chat, mode="generate", max_new_tokens=12, seed=0)
    with prompt_feed(model) as feed:
        first = await policy.act(TASK, [], PAGES[0])
        since = len(feed.passes)
        second = await policy.act(TASK, [step_of(0, first, PAGES[0], PAGES[1])], PAGES[1])
        fed = feed.turn(since)
    assert first.tokens is not None
    assert first.action.is_invalid  # an untrained model does not follow the format: data, not an exception
    assert first.tokens.action_ids[-1] == policy.turns.eos_id and len(first.tokens.action_ids) <= 13
    assert second.tokens is not None
    assert fed == sequence_ids([first.tokens]) + list(second.tokens.prompt_ids)
    reference = full_logprobs(model, sequence_ids([first.tokens, second.tokens]))
    for tokens, start in ((first.tokens, len(first.tokens.prompt_ids)), (second.tokens, len(fed))):
        drawn = torch.tensor(tokens.sampled, dtype=torch.bool)
        found = reference[start : start + len(tokens.action_ids)]
        assert torch.allclose(torch.tensor(tokens.action_logprobs)[drawn], found[drawn], atol=1e-4)


async def test_generate_mode_flags_a_forced_end_of_turn_as_not_sampled(tiny_chat: tuple[Any, Any]) -> None:
    policy = make_policy(tiny_chat, mode="generate", max_new_tokens=3, seed=0)
    decision = await policy.act(TASK, [], PAGES[0])
    assert decision.tokens is not None
    ids, sampled = decision.tokens.action_ids, decision.tokens.action_mask
    assert ids[-1] == policy.turns.eos_id
    if len(ids) == 4:  # the cap ran out: the end of turn was appended, not drawn
        assert sampled == (1, 1, 1, 0)
    else:
        assert sampled == (1,) * len(ids)


async def test_an_episode_longer_than_the_context_fails_with_a_clear_error(tiny_chat: tuple[Any, Any]) -> None:
    page = Observation(state="\n".join(f'[e{n}] button "Button number {n}"' for n in range(800)))
    with pytest.raises(BackendError, match="outgrew the model's context"):
        await make_policy(tiny_chat).act(BUTTON_TASK, [], page)
