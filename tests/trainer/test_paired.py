"""Comparing two evaluations on the same held-out (task, seed) pairs, pair by pair."""

from __future__ import annotations

import pytest

from dreamgym.trainer import EvalResult, SeedOutcome, paired_comparison


def played(outcomes: dict[tuple[str, int], bool | None]) -> EvalResult:
    scored = [solved for solved in outcomes.values() if solved is not None]
    return EvalResult(
        episodes=len(scored),
        successes=sum(scored),
        steps=len(outcomes),
        cut=len(outcomes) - len(scored),
        outcomes=tuple(SeedOutcome(task_id=t, seed=s, solved=solved) for (t, s), solved in outcomes.items()),
    )


def test_the_discordant_pairs_decide_with_an_exact_two_sided_sign_test() -> None:
    keys = [("a", seed) for seed in range(20)]
    # 9 solved only after, 4 only before, 5 both, 2 neither
    before = played(dict(zip(keys, [False] * 9 + [True] * 4 + [True] * 5 + [False] * 2, strict=True)))
    after = played(dict(zip(keys, [True] * 9 + [False] * 4 + [True] * 5 + [False] * 2, strict=True)))
    result = paired_comparison(before, after)
    assert (result.pairs, result.only_after, result.only_before, result.both) == (20, 9, 4, 5)
    # 2 * P(X <= 4), X ~ Binomial(13, 1/2) = 2 * (1 + 13 + 78 + 286 + 715) / 2**13
    assert result.p_value == pytest.approx(2 * 1093 / 8192)
    assert paired_comparison(after, before).p_value == pytest.approx(result.p_value)  # two-sided: symmetric
    seven = paired_comparison(played({("a", s): s == 0 for s in range(8)}), played({("a", s): True for s in range(8)}))
    assert (seven.only_after, seven.only_before, seven.p_value) == (7, 0, pytest.approx(2 / 128))


def test_cut_and_unmatched_episodes_are_left_out_and_no_change_is_p_one() -> None:
    before = played({("a", 0): True, ("a", 1): None, ("a", 2): False, ("b", 0): True})
    after = played({("a", 0): True, ("a", 1): True, ("a", 2): False, ("c", 0): True})
    result = paired_comparison(before, after)
    assert (result.pairs, result.only_after, result.only_before, result.both) == (2, 0, 0, 1)
    assert result.p_value == 1.0
    assert paired_comparison(played({}), after).pairs == 0
