"""Source choice: ratios, rules and schedules, applied per group and never mixed inside one."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import msgspec
import pytest
from runtime_helpers import TASK, Counts, ToyBackend, ToyFormEnv, ToyPolicy, open_store, simulator

from dreamgym.core import ConfigError, Task
from dreamgym.runtime import GroupSpec, RatioSource, RuleSource, Runtime, ScheduledSource, SourceChooser

SHARES = (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.7, 0.9, 1.0)


def reals(chooser: SourceChooser, n: int, task: Task = TASK, start: int = 0) -> list[bool]:
    return [chooser.choose(task, index) == "real" for index in range(start, start + n)]


@pytest.mark.parametrize("share", SHARES)
def test_a_ratio_gives_exactly_the_rounded_share_of_real_groups_after_every_group(share: float) -> None:
    picks = reals(RatioSource(share), 300)
    for n in range(1, 301):
        assert sum(picks[:n]) == math.floor(n * Fraction(share).limit_denominator(1000) + Fraction(1, 2)), n


def test_a_ratio_spreads_real_groups_evenly() -> None:
    picks = reals(RatioSource(0.25), 100)
    gaps = [len(list(run)) for real, run in itertools.groupby(picks) if not real]
    assert max(gaps) <= 4 and not any(a and b for a, b in itertools.pairwise(picks))


def test_a_seeded_ratio_is_reproducible_and_never_more_than_one_group_off() -> None:
    first, again, other = (reals(RatioSource(0.3, seed=seed), 200) for seed in (7, 7, 8))
    assert first == again and first != other
    for n in range(1, 201):
        assert abs(sum(first[:n]) - n * 0.3) < 1


def test_rules_match_task_id_then_site_then_pattern_then_default() -> None:
    chooser = RuleSource({"toy/form": "real", "shop": "real", "miniwob/click-*": "real"}, default=RatioSource(0.0))
    assert chooser.choose(TASK, 0) == "real"
    assert chooser.choose(Task(task_id="shop/1", instruction="x", site="shop"), 0) == "real"
    assert chooser.choose(Task(task_id="miniwob/click-button", instruction="x"), 0) == "real"
    assert chooser.choose(Task(task_id="miniwob/enter-text", instruction="x"), 0) == "synthetic"
    with pytest.raises(ConfigError, match="real"):
        RuleSource({"toy": "simulated"})  # type: ignore[dict-item]


def test_a_schedule_changes_the_share_when_the_trainer_advances() -> None:
    chooser = ScheduledSource(lambda update: min(1.0, update / 10))
    assert sum(reals(chooser, 50)) == 0
    chooser.advance(5)
    assert chooser.real_share == 0.5 and sum(reals(chooser, 40)) == 20
    chooser.advance(10)
    assert all(reals(chooser, 10))
    wrong = ScheduledSource(lambda update: 0.1 if update < 3 else 1.5)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        wrong.advance(3)


def test_share_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        RatioSource(1.2)


def test_group_specs_refuse_mixtures_that_cannot_run() -> None:
    generated = msgspec.structs.replace(TASK, generated=True)
    with pytest.raises(ConfigError, match="generated"):
        GroupSpec(task=generated, source="real")
    with pytest.raises(ConfigError, match="shadow"):
        GroupSpec(task=TASK, source="synthetic", shadow=True)
    with pytest.raises(ConfigError, match="size"):
        GroupSpec(task=TASK, size=0)


@pytest.mark.anyio
async def test_the_runtime_keeps_the_ratio_per_group_and_never_mixes_sources(tmp_path: Path) -> None:
    generated = msgspec.structs.replace(TASK, task_id="toy/form-variant", generated=True)
    backend = ToyBackend()
    async with open_store(tmp_path / "store") as store:
        runtime = Runtime(
            policy=ToyPolicy(),
            store=store,
            real_env=lambda: ToyFormEnv(Counts()),
            synthetic_env=lambda: simulator(backend),
            chooser=RatioSource(0.25),
        )
        async with runtime:
            specs = [GroupSpec(task=TASK, size=3, seed=n) for n in range(8)]
            specs.insert(3, GroupSpec(task=generated, size=2, seed=0))  # always synthetic, not counted by the chooser
            results = await runtime.run_groups(specs)
    sources = [result.source for result in results]
    expected = ["synthetic", "real", "synthetic", "synthetic", "synthetic", "real", "synthetic", "synthetic"]
    assert sources == [*expected[:3], "synthetic", *expected[3:]]
    for result in results:
        assert {step.source for rollout in result.rollouts for step in rollout.steps} == {result.source}
        assert {rollout.episode.source for rollout in result.rollouts} == {result.source}
