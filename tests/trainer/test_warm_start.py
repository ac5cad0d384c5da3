"""The tiny index policy and its behaviour-cloning warm start, on the toy form page."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from helpers import Recorder
from runtime_helpers import NAMES, TASK, page, solved

from dreamgym.agents import LocalPolicy, LocalPolicyConfig
from dreamgym.core import ConfigError, Step, parse_action
from dreamgym.core.progress import listening
from dreamgym.simulator import ScratchModelConfig
from dreamgym.trainer import WarmStartConfig, demonstrations, tiny_index_policy, warm_start

pytestmark = pytest.mark.timeout(600)  # a hang guard: the cloning tests take 148 s on a slow 2-core CPU

SMALL = ScratchModelConfig(vocab_size=400, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128)


def build() -> tuple[Any, Any]:
    pages = [(TASK, p) for seed in range(4) for p in (page(seed), page(seed, NAMES[seed]))]
    return tiny_index_policy(pages, SMALL)


def test_the_tiny_policy_is_small_and_answers_with_label_tokens() -> None:
    model, tokenizer = build()
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index"))
    decision = anyio.run(policy.act, TASK, [], page(0))
    assert decision.tokens is not None and len(decision.tokens.action_ids) in (1, 2)


@pytest.mark.parametrize("lm_weight", [0.0, 1.0])
def test_warm_start_teaches_the_demonstrated_choices(lm_weight: float) -> None:
    model, tokenizer = build()
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=0.0))
    examples, skipped = demonstrations(policy, [solved(seed) for seed in range(4)], [TASK])
    assert (len(examples), skipped) == (8, 0)  # "click [e3]" matches the labelled choice 'click [e3] "Submit"'
    config = WarmStartConfig(epochs=80, learning_rate=1e-2, batch_size=8, lm_weight=lm_weight)
    recorder = Recorder()
    with listening(recorder):
        result = warm_start(policy, examples, config)
    assert recorder.finished() == {"warm start: clone the demonstrations": result.updates}  # a bar, counted to its end
    assert result.last_loss < result.first_loss
    assert result.accuracy == 1.0
    for seed in range(4):  # greedy, the policy now does what it was shown, on every page it was shown
        first = anyio.run(policy.act, TASK, [], page(seed))
        assert (first.action.name, first.action.args) == ("type", ("e2", NAMES[seed], "0"))


def test_demonstrations_skip_actions_that_are_not_listed_choices() -> None:
    model, tokenizer = build()
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index"))
    steps = solved(0)
    odd = Step(source="real", task_id=TASK.task_id, episode_id="odd", step_index=0, observation=page(0),
               action=parse_action("hover [e3]"), next_observation=page(0))  # fmt: skip
    examples, skipped = demonstrations(policy, [steps, [odd]], [TASK])
    assert (len(examples), skipped) == (2, 1)
    with pytest.raises(ConfigError, match="index policy"):
        demonstrations(LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="generate")), [steps], [TASK])


def test_a_warm_start_pass_sees_every_example_once_in_batches_of_similar_length() -> None:
    import random

    from dreamgym.trainer._warm import Demonstration, _length_batches

    lengths = [random.Random(n).randint(5, 900) for n in range(300)]
    examples = [Demonstration(ids=(1,) * length, label=2, task_id="t", episode_id=f"e{n}", step_index=0)
                for n, length in enumerate(lengths)]  # fmt: skip
    batches = _length_batches(examples, 16, random.Random(0))
    assert sorted(n for batch in batches for n in batch) == list(range(300))
    assert all(1 <= len(batch) <= 16 for batch in batches)
    padded = sum(len(batch) * max(lengths[n] for n in batch) for batch in batches)
    shuffled = list(range(300))
    random.Random(1).shuffle(shuffled)
    unsorted = sum(16 * max(lengths[n] for n in shuffled[s : s + 16]) for s in range(0, 300, 16))
    assert padded < 0.75 * unsorted  # the padding the batching exists to save
    assert _length_batches(examples, 16, random.Random(0)) == batches  # seeded


def test_the_auxiliary_text_loss_learns_the_pages_text() -> None:
    """With ``lm_weight`` the model also learns to predict the episode's ids (what it is for: copying across
    the page); without it, only the label moves."""
    import torch

    from dreamgym.trainer._warm import _losses

    def text_loss_after(lm_weight: float) -> float:
        model, tokenizer = build()
        policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=0.0))
        examples, _ = demonstrations(policy, [solved(seed) for seed in range(4)], [TASK])
        warm_start(policy, examples, WarmStartConfig(epochs=20, learning_rate=1e-2, batch_size=8, lm_weight=lm_weight))
        with torch.no_grad():
            return float(_losses(model, examples, policy.turns.eos_id, text=True)[1])

    assert text_loss_after(1.0) < 0.5 * text_loss_after(0.0)
    with pytest.raises(ConfigError, match="lm_weight"):
        WarmStartConfig(lm_weight=-1.0)


def test_the_fits_accuracy_is_measured_on_the_examples_asked_for() -> None:
    model, tokenizer = build()
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=0.0))
    examples, _ = demonstrations(policy, [solved(seed) for seed in range(4)], [TASK])
    for asked, measured in ((None, 8), (3, 3), (50, 8)):
        result = warm_start(policy, examples, WarmStartConfig(epochs=1, batch_size=8, accuracy_examples=asked))
        assert result.accuracy_examples == measured
        assert round(result.accuracy * measured, 6) == round(result.accuracy * measured)  # a share of those
    with pytest.raises(ConfigError, match="accuracy_examples"):
        WarmStartConfig(accuracy_examples=0)
