"""The offline default's recipe as ``make sim-default`` runs it (its store, its template, its training settings),
trained end to end at a tiny size."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest
import toy_form
from sim_helpers import EMBEDDER, TINY, fill_toy_store, open_store

from dreamgym.core.devices import cpu_has_bfloat16
from dreamgym.jobs.sim_default import (
    DEFAULT_TEMPLATE,
    DEFAULT_TRAINING,
    CollectPlan,
    build_default,
    outdated,
    train_on_store,
    warn_if_outdated,
)
from dreamgym.simulator import (
    LocalBackend,
    OutcomeJudge,
    as_recorded,
    load_experience_model,
    read_metadata,
    weights_digest,
)

pytestmark = pytest.mark.anyio

# the default's settings but the model's shape and the number of steps
TINY_DEFAULT = dataclasses.replace(
    DEFAULT_TRAINING,
    scratch=dataclasses.replace(TINY, split=DEFAULT_TRAINING.scratch.split),
    batch_size=4,
    max_steps=2,
)


async def test_the_default_recipe_trains_on_a_store_without_its_held_out_seeds_and_records_what_it_is(
    tmp_path: Path,
) -> None:
    config = TINY_DEFAULT
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        target = await train_on_store(
            store, tmp_path / "model", config, held_out=[("toy/form", 3)], recipe={"recipe": "a test"}
        )
    meta = read_metadata(target)
    assert meta["template_id"] == DEFAULT_TEMPLATE.template_id and meta["template"]["past_actions"]
    assert meta["config"]["loop"] == "plain" and meta["config"]["outcome_weight"] == 3.0
    assert meta["config"]["scratch"]["split"] == "whitespace"
    assert meta["precision"] == ("bfloat16" if cpu_has_bfloat16() else "float32")
    assert meta["recipe"] == "a test"
    assert meta["episodes"] == 6  # two episodes of each seed but the held-out one
    assert not (tmp_path / "model.partial").exists()
    # cut at spaces: a piece can join a bracket and the letters after it (GPT-2's rule keeps them apart)
    pieces = LocalBackend.load(target).tokenizer.tokenize(toy_form.page(1).state)
    assert any(re.fullmatch(r"\[e\d*\]?", piece) for piece in pieces)
    # the outcome judge is fit on the same real steps, the held-out seed left out, and saved with the model
    judge = OutcomeJudge.load(target)
    assert judge is not None
    assert judge.trained_on == 12


async def test_the_default_recipe_without_a_judge_saves_none(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        target = await train_on_store(store, tmp_path / "model", TINY_DEFAULT, held_out=[], recipe={}, judge=False)
    assert OutcomeJudge.load(target) is None
    assert "+judge@" not in load_experience_model(target).model_id


async def test_build_default_keeps_a_model_of_its_recipe_and_rebuilds_one_of_another_keeping_the_old(
    tmp_path: Path,
) -> None:
    target = tmp_path / "sim-miniwob"
    async with open_store(tmp_path / "sim-miniwob-data" / "store") as store:  # where build_default keeps its data
        await fill_toy_store(store, range(4))
    plan = CollectPlan(tasks=("toy-form",), seeds=range(3))  # never collected: the store holds real steps already
    older = dataclasses.replace(TINY_DEFAULT, outcome_weight=1.0)  # a recipe the default no longer trains with
    await build_default(plan=plan, train=older, embedder=EMBEDDER, out=target)
    first = weights_digest(target)
    assert outdated(target, older) == []
    assert outdated(target, TINY_DEFAULT) == ["outcome_weight: 1.0 -> 3.0"]

    # the same recipe again: the model is kept as it is, nothing is trained
    assert await build_default(plan=plan, train=older, embedder=EMBEDDER, out=target) == target
    assert weights_digest(target) == first and not (tmp_path / "sim-miniwob.previous").exists()

    # the recipe moved on: rebuilt with it, the old model kept beside it
    await build_default(plan=plan, train=TINY_DEFAULT, embedder=EMBEDDER, out=target)
    assert read_metadata(target)["config"] == as_recorded(TINY_DEFAULT) and outdated(target, TINY_DEFAULT) == []
    assert weights_digest(tmp_path / "sim-miniwob.previous") == first
    assert read_metadata(tmp_path / "sim-miniwob.previous")["config"]["outcome_weight"] == 1.0
    assert not (tmp_path / "sim-miniwob.partial").exists()


def test_a_recorded_template_without_the_earlier_actions_is_an_older_recipe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # what a default built before 2026-12-05 records: no past_actions field, TRL's loop, GPT-2's split
    recorded = as_recorded(DEFAULT_TRAINING) | {"loop": "trl", "scratch": {"split": "punctuation"}}
    template = {k: v for k, v in as_recorded(DEFAULT_TEMPLATE).items() if k != "past_actions"}
    model = tmp_path / "old-default"
    model.mkdir()
    (model / "dreamgym_model.json").write_text(json.dumps({"config": recorded, "template": template}))
    assert outdated(model) == [
        "loop: 'trl' -> 'plain'",
        "scratch.split: 'punctuation' -> 'whitespace'",
        "template.past_actions: False -> True",
    ]
    (model / "config.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="dreamgym.jobs.sim_default"):
        warn_if_outdated(model)  # what train, validate and the demo say when given such a default
    assert "older recipe (loop: 'trl' -> 'plain';" in caplog.text and "sim build-default" in caplog.text
    (model / "dreamgym_model.json").write_text(json.dumps({"config": as_recorded(DEFAULT_TRAINING)}))
    assert outdated(model) == ["template: not recorded"]
