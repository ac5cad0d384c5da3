"""What a trainable LocalPolicy records is what it sampled from: the index and generate modes.

For each mode, at a fixed prefix: the recorded log-probability of a drawn token
is ``log_softmax(logits / T)`` of a fresh forward pass (over the label tokens
alone for an index policy, ``labels_only``), and over many draws the
empirical frequency of each token matches ``exp(recorded log-probability)``
(a chi-square test at a fixed seed).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import replace
from typing import Any

import anyio
import pytest
import torch
from agent_pages import PAGES, TASK

from dreamgym.agents import IN_GOAL, INDEX_TOKENS, LocalPolicy, LocalPolicyConfig, add_index_tokens
from dreamgym.core import ConfigError, Observation, PolicyDecision, Task

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TEMPERATURE = 0.7
DRAWS = 2400
SHARPEN = 6.0


@pytest.fixture(scope="module")
def labelled_chat(tiny_chat: tuple[Any, Any]) -> tuple[Any, Any]:
    """The tiny chat model with the index policy's label tokens (copies: the session's fixture stays as it is).

    The label tokens' output rows are spread apart and the output layer is scaled
    up: a random model's next-token distribution is nearly flat, where a wrong
    temperature would hardly show; a peaked one shows it (a record at
    temperature 1 fails the frequency tests).
    """
    model, tokenizer = copy.deepcopy(tiny_chat[0]), copy.deepcopy(tiny_chat[1])
    add_index_tokens(model, tokenizer)
    labels = [tokenizer.convert_tokens_to_ids(label) for label in INDEX_TOKENS]
    with torch.no_grad():
        # the added labels start alike (an index policy draws among them alone): set them apart, as training does
        head = model.get_output_embeddings().weight
        spread = torch.randn((len(labels), head.size(1)), generator=torch.Generator().manual_seed(0))
        head[labels] += spread * head.std()
        head.mul_(SHARPEN)
    return model, tokenizer


def policy_of(chat: tuple[Any, Any], **settings: Any) -> LocalPolicy:
    model, tokenizer = chat
    return LocalPolicy(model, tokenizer, digest="ab" * 32, config=LocalPolicyConfig(seed=0, **settings))


def fresh_logprobs(policy: LocalPolicy, ids: list[int]) -> torch.Tensor:
    """``log_softmax(logits / T)`` of the next token after ``ids``, from one plain forward pass: over the label
    tokens alone for an index policy that draws only those (every other token at -inf), else the vocabulary."""
    with torch.inference_mode():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, -1].float() / policy.config.temperature
    among = policy.choice_token_ids
    if among is not None:
        kept = torch.full_like(logits, float("-inf"))
        kept[list(among)] = logits[list(among)]
        logits = kept
    return torch.log_softmax(logits, dim=-1)


async def draw_many(policy: LocalPolicy, count: int) -> list[PolicyDecision]:
    """``count`` first turns on the same page, eight at a time (the policy batches them)."""
    decisions: list[PolicyDecision] = []

    async def one() -> None:
        decisions.append(await policy.act(TASK, [], PAGES[0]))

    for _ in range(count // 8):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(one)
    return decisions


def chi_square_quantile(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at the normal quantile ``z`` (3.09: p = 0.999), Wilson-Hilferty's approximation."""
    a = 2 / (9 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def assert_frequencies_match(drawn: list[tuple[int, float]]) -> None:
    """Chi-square of the drawn tokens' counts against ``n * exp(recorded logprob)``; the rare ones pooled."""
    recorded: dict[int, float] = {}
    for token, logprob in drawn:
        assert math.isclose(recorded.setdefault(token, logprob), logprob, abs_tol=1e-5)  # one value per token
    counts = Counter(token for token, _ in drawn)
    n = len(drawn)
    binned = [token for token, logprob in recorded.items() if n * math.exp(logprob) >= 5]
    assert len(binned) >= 3, "too few tokens likely enough to test"
    expected = [n * math.exp(recorded[token]) for token in binned]
    observed = [counts[token] for token in binned]
    rest_expected = n - sum(expected)
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    bins = len(binned)
    if rest_expected >= 5:
        statistic += (n - sum(observed) - rest_expected) ** 2 / rest_expected
        bins += 1
    assert statistic < chi_square_quantile(bins - 1), f"chi-square {statistic:.1f} over {bins} bins"


async def test_index_mode_records_the_scaled_logprob_of_the_drawn_label(labelled_chat: tuple[Any, Any]) -> None:
    policy = policy_of(labelled_chat, mode="index", temperature=TEMPERATURE)
    decision = await policy.act(TASK, [], PAGES[0])
    tokens = decision.tokens
    assert tokens is not None
    assert len(tokens.action_ids) in (1, 2) and tokens.sampled[0] == 1
    if len(tokens.action_ids) == 2:  # a label, then the end of turn appended without being drawn
        assert tokens.action_ids[1] == policy.turns.eos_id and tokens.action_mask == (1, 0)
    fed = policy.input_ids(TASK, [], PAGES[0])
    assert list(tokens.prompt_ids) == fed  # the first turn's record is the prompt, its choices listed
    assert "Choices:" in policy.tokenizer.decode(fed)
    expected = fresh_logprobs(policy, fed)
    assert tokens.action_logprobs[0] == pytest.approx(float(expected[tokens.action_ids[0]]), abs=1e-3)


async def test_index_mode_reuses_a_prompts_logits_until_the_weights_change(labelled_chat: tuple[Any, Any]) -> None:
    model, tokenizer = copy.deepcopy(labelled_chat[0]), labelled_chat[1]  # its weights change below
    config = LocalPolicyConfig(seed=0, mode="index", temperature=TEMPERATURE)
    memo = LocalPolicy(model, tokenizer, digest="ab" * 32, config=config)
    plain = LocalPolicy(model, tokenizer, digest="ab" * 32, config=replace(config, logits_memo=0))
    assert memo.memo is not None and plain.memo is None
    pages = [PAGES[0]] * 6 + [PAGES[1]] * 2 + [PAGES[0]]  # one turn at a time: batches of one, nothing shared
    for page in pages:
        remembered, run = await memo.act(TASK, [], page), await plain.act(TASK, [], page)
        assert remembered.tokens is not None and run.tokens is not None
        assert remembered.tokens.action_ids == run.tokens.action_ids  # the same draws from the same generator
        assert remembered.tokens.action_logprobs == pytest.approx(run.tokens.action_logprobs, abs=1e-5)
    assert (memo.memo.runs, memo.memo.hits) == (2, 7)
    fed = memo.input_ids(TASK, [], PAGES[0])
    before = fresh_logprobs(memo, fed)
    with torch.no_grad():  # an optimizer step, in place
        model.get_output_embeddings().weight.mul_(0.5)
    memo.weights_changed()
    after = fresh_logprobs(memo, fed)
    assert not torch.allclose(before, after, atol=1e-3)
    decision = await memo.act(TASK, [], PAGES[0])
    assert memo.memo.runs == 3  # run again under the new weights, not read from the memo
    assert decision.tokens is not None
    token = decision.tokens.action_ids[0]
    assert decision.tokens.action_logprobs[0] == pytest.approx(float(after[token]), abs=1e-3)
    with pytest.raises(ConfigError, match="logits_memo"):
        LocalPolicyConfig(logits_memo=-1)


async def test_index_mode_draws_each_token_as_often_as_its_recorded_probability(
    labelled_chat: tuple[Any, Any],
) -> None:
    policy = policy_of(labelled_chat, mode="index", temperature=TEMPERATURE)
    decisions = await draw_many(policy, DRAWS)
    drawn = [(d.tokens.action_ids[0], d.tokens.action_logprobs[0]) for d in decisions if d.tokens is not None]
    assert len(drawn) == DRAWS
    assert_frequencies_match(drawn)


@pytest.mark.parametrize("labels_only", [True, False])
async def test_an_index_answer_maps_to_the_labelled_choice_or_is_invalid(
    labelled_chat: tuple[Any, Any], labels_only: bool
) -> None:
    policy = policy_of(labelled_chat, mode="index", temperature=TEMPERATURE, labels_only=labels_only)
    choices = policy.choices(TASK, PAGES[0])
    labels = {policy.turns.encode(label)[0]: n for n, label in enumerate(INDEX_TOKENS)}
    assert policy.choice_token_ids == (tuple(sorted(labels)) if labels_only else None)
    outside = 0
    for decision in await draw_many(policy, 64):
        assert decision.tokens is not None
        index = labels.get(decision.tokens.action_ids[0])
        outside += index is None
        if index is not None and index < len(choices):
            assert decision.action == choices[index]
        else:  # a label past the listed choices, or another token: an invalid action, data, not an exception
            assert decision.action.is_invalid and "labels none of the" in decision.action.error
    if labels_only:  # the random model's likeliest tokens are not labels, yet only labels are drawn
        assert outside == 0
    else:  # from the whole vocabulary it mostly answers outside the labels
        assert outside > 32


async def test_a_greedy_index_policy_takes_its_likeliest_label_not_its_likeliest_token(
    labelled_chat: tuple[Any, Any],
) -> None:
    policy = policy_of(labelled_chat, mode="index", temperature=0.0)
    fed = policy.input_ids(TASK, [], PAGES[0])
    with torch.inference_mode():
        logits = policy.model(input_ids=torch.tensor([fed])).logits[0, -1].float()
    among = list(policy.choice_token_ids or ())
    assert int(logits.argmax()) not in among  # the random model's likeliest token labels nothing
    decision = await policy.act(TASK, [], PAGES[0])
    assert decision.tokens is not None
    best = among[int(logits[among].argmax())]
    assert decision.tokens.action_ids[0] == best
    assert decision.tokens.action_logprobs[0] == pytest.approx(
        float(torch.log_softmax(logits[among], -1).max()), abs=1e-4
    )


async def test_generate_mode_draws_each_first_token_as_often_as_its_recorded_probability(
    labelled_chat: tuple[Any, Any],
) -> None:
    policy = policy_of(labelled_chat, mode="generate", temperature=TEMPERATURE, max_new_tokens=1)
    decisions = await draw_many(policy, DRAWS)
    drawn = [(d.tokens.action_ids[0], d.tokens.action_logprobs[0]) for d in decisions if d.tokens is not None]
    assert len(drawn) == DRAWS
    assert_frequencies_match(drawn)
    expected = fresh_logprobs(policy, policy.input_ids(TASK, [], PAGES[0]))
    token, logprob = drawn[0]
    assert logprob == pytest.approx(float(expected[token]), abs=1e-3)


def test_an_index_policy_without_its_label_tokens_is_refused(tiny_chat: tuple[Any, Any]) -> None:
    with pytest.raises(ConfigError, match="add_index_tokens"):
        LocalPolicy(*tiny_chat, digest="ab" * 32, config=LocalPolicyConfig(mode="index"))


async def test_an_index_policy_keeps_the_named_choice_on_a_page_with_more_candidates_than_labels(
    labelled_chat: tuple[Any, Any],
) -> None:
    rows = "\n".join(f'[e{n}] link "item {n}"' for n in range(1, 101))
    page = Observation(state=rows + '\n[e200] button "Checkout"', goal="Press Checkout.")
    policy = policy_of(labelled_chat, mode="index", temperature=0.0)
    choices = policy.choices(Task(task_id="toy/shop", instruction="Press Checkout."), page)
    assert len(choices) == len(INDEX_TOKENS) and str(choices[0]) == 'click [e200] "Checkout"'
    fed = policy.tokenizer.decode(policy.input_ids(Task(task_id="toy/shop", instruction=""), [], page))
    assert f'<a0> click [e200] "Checkout" {IN_GOAL}' in fed
