"""The build check: an experience model asked its own seed set's steps, teacher-forced, its clean first answers
counted per task; and the job that retrains with the next seed while a build fails it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from sim_helpers import TOY_TEMPLATE, ScriptedBackend, fill_toy_store, open_store
from test_sim_default import TINY_DEFAULT

from dreamgym.core import ChatMessage, ConfigError
from dreamgym.jobs.sim_default import next_training, no_op_answer, train_checked
from dreamgym.simulator import (
    METADATA_FILE,
    CheckConfig,
    ExperienceModelConfig,
    LLMExperienceModel,
    check_build,
    read_metadata,
    real_episodes,
    teacher_forced_queries,
)
from dreamgym.simulator._build_check import check_steps

pytestmark = pytest.mark.anyio


def _clean_unless_submit(messages: Sequence[ChatMessage]) -> str:
    """A clean answer (the page stays) for a typing step, one that does not parse for a Submit."""
    return "no answer here" if 'click [e3] "Submit"' in messages[-1].content.splitlines()[-1] else no_op_answer()


async def test_the_check_counts_clean_first_answers_per_task_on_every_third_episode(tmp_path: Path) -> None:
    backend = ScriptedBackend(_clean_unless_submit)
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE))
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))  # 8 episodes of 2 steps: seed 0 right, seed 0 wrong, seed 1 right, ...
        result = await check_build(model, store, CheckConfig(every=3), exclude_task_seeds=[("toy/form", 3)])
    # episodes 0 and 3 of the 6 left (seed 3's are held out): seed 0 right, seed 1 wrong; a typing step each clean
    assert dict(result.asked) == {"toy/form": 4} and dict(result.clean) == {"toy/form": 2}
    assert result.worst == 0.5 and not result.passed
    assert result.unusable == {"toy/form": 2}  # every attempt at a Submit was malformed
    assert result.as_dict()["tasks"] == {"toy/form": {"asked": 4, "clean": 2, "unusable": 2}}
    assert dataclasses.replace(result, min_clean=0.5).passed


async def test_the_check_asks_episodes_it_is_given_on_pages_the_store_has_not_seen(tmp_path: Path) -> None:
    backend = ScriptedBackend(_clean_unless_submit)
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE))
    async with open_store(tmp_path / "unseen") as other:
        await fill_toy_store(other, range(10, 13))  # 6 episodes of seeds the model's store does not hold
        unseen = await real_episodes(other)
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        result = await check_build(model, store, CheckConfig(), episodes=unseen)
    assert dict(result.asked) == {"toy/form": 12} and dict(result.clean) == {"toy/form": 6}
    asked_goals = {line for messages, _ in backend.calls for line in messages[-1].content.splitlines() if
                   line.startswith("[e1] generic: Enter")}  # fmt: skip
    assert asked_goals and all(any(name in goal for name in ("Cyd", "Dee", "Eli")) for goal in asked_goals)


async def test_the_check_asks_at_most_its_steps_per_task_and_refuses_a_store_without_episodes(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        episodes = await real_episodes(store)
        chosen = check_steps(episodes, CheckConfig(every=1, steps_per_task=3))
        assert [(s.seed, s.step_index) for s in chosen["toy/form"]] == [(0, 0), (0, 1), (0, 0)]
        left_out = [episode[0].episode_id for episode in episodes[:2]]
        chosen = check_steps(episodes, CheckConfig(every=1, steps_per_task=2), exclude_episodes=left_out)
        assert {s.seed for s in chosen["toy/form"]} == {1}
        model = LLMExperienceModel(
            ScriptedBackend([no_op_answer()]), config=ExperienceModelConfig(template=TOY_TEMPLATE)
        )
        with pytest.raises(ConfigError, match="no real episode to check"):
            await check_build(model, store, exclude_task_seeds=[("toy/form", None)])
    with pytest.raises(ConfigError):
        CheckConfig(min_clean=1.5)


async def test_teacher_forced_retrieval_can_leave_out_the_steps_own_seed(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        steps = [step for episode in await real_episodes(store) for step in episode]
        shared = await teacher_forced_queries(steps, store=store, neighbours=2)
        apart = await teacher_forced_queries(steps, store=store, neighbours=2, exclude_own_seed=True)
    # the other episode of the same start page is the nearest transition, unless left out
    assert any(n.step.seed == step.seed for step, query in shared for n in query.neighbours)
    assert all(n.step.seed != step.seed for step, query in apart for n in query.neighbours)
    assert all(query.neighbours for _, query in apart)


async def test_a_build_that_fails_the_check_is_trained_again_with_the_next_seed_and_the_best_kept(
    tmp_path: Path,
) -> None:
    target = tmp_path / "model"
    few = CheckConfig(steps_per_task=2)
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        # two training steps cannot answer clean: no build passes, both are trained, the earliest of equals kept
        kept, checks = await train_checked(store, target, TINY_DEFAULT, builds=2, check=few, held_out=[],
                                           recipe={"recipe": "a test"}, judge=False)  # fmt: skip
        assert kept == target
        assert [(c["seed"], c["kept"], c["passed"]) for c in checks] == [(0, True, False), (1, False, False)]
        assert read_metadata(target)["checks"] == checks and read_metadata(target)["recipe"] == "a test"
        assert read_metadata(target)["config"]["seed"] == 0
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "store"]  # the other build is gone

        # a bar every build meets: the first build is kept, no second one trained
        _, checks = await train_checked(store, target, dataclasses.replace(TINY_DEFAULT, seed=5), builds=3,
                                        check=dataclasses.replace(few, min_clean=0.0), held_out=[], recipe={},
                                        judge=False)  # fmt: skip
        assert [(c["seed"], c["kept"], c["passed"]) for c in checks] == [(5, True, True)]
        assert json.loads((target / METADATA_FILE).read_text())["config"]["seed"] == 5
        with pytest.raises(ValueError, match="builds"):
            await train_checked(store, target, TINY_DEFAULT, builds=0, held_out=[], recipe={})


async def test_a_build_that_fails_the_check_can_instead_be_trained_further_from_its_own_weights(
    tmp_path: Path,
) -> None:
    target = tmp_path / "model"
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        kept, checks = await train_checked(store, target, TINY_DEFAULT, builds=3, check=CheckConfig(steps_per_task=2),
                                           held_out=[], recipe={}, judge=False, more_epochs=0.5)  # fmt: skip
        # every build is the first one's seed, half an epoch more each time; none passes, the earliest of equals kept
        epochs = TINY_DEFAULT.epochs
        assert [(c["seed"], c["epochs"], c["passed"]) for c in checks] == [
            (0, epochs, False), (0, epochs + 0.5, False), (0, epochs + 1.0, False)
        ]  # fmt: skip
        assert kept == target and sorted(p.name for p in tmp_path.iterdir()) == ["model", "store"]
        with pytest.raises(ValueError, match="more_epochs"):
            await train_checked(store, target, TINY_DEFAULT, builds=2, held_out=[], recipe={}, more_epochs=-1)


def test_a_further_build_starts_from_the_last_builds_weights_at_half_the_learning_rate(tmp_path: Path) -> None:
    first, epochs = next_training(TINY_DEFAULT, 0, None, 1.0, None)
    assert (first, epochs) == (TINY_DEFAULT, TINY_DEFAULT.epochs)
    fresh, _ = next_training(TINY_DEFAULT, 2, None, 1.0, None)
    assert fresh == dataclasses.replace(TINY_DEFAULT, seed=TINY_DEFAULT.seed + 2)
    further, epochs = next_training(TINY_DEFAULT, 1, (tmp_path, 2.5), 1.0, None)
    assert (further.base, further.lora, further.epochs, further.seed) == (str(tmp_path), False, 1.0, TINY_DEFAULT.seed)
    assert further.lr == TINY_DEFAULT.lr / 2 and epochs == 3.5
    assert next_training(TINY_DEFAULT, 1, (tmp_path, 2.5), 1.0, 1e-4)[0].lr == 1e-4
