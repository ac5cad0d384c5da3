"""The offline default's recipe as ``make sim-default`` runs it (its store, its template, its training settings),
trained end to end at a tiny size."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import toy_form
from sim_helpers import TINY, fill_toy_store, open_store

from dreamgym.core.devices import cpu_has_bfloat16
from dreamgym.jobs.sim_default import DEFAULT_TEMPLATE, DEFAULT_TRAINING, train_on_store
from dreamgym.simulator import LocalBackend, read_metadata

pytestmark = pytest.mark.anyio


async def test_the_default_recipe_trains_on_a_store_without_its_held_out_seeds_and_records_what_it_is(
    tmp_path: Path,
) -> None:
    # the default's settings but the model's shape and the number of steps
    config = dataclasses.replace(
        DEFAULT_TRAINING,
        scratch=dataclasses.replace(TINY, split=DEFAULT_TRAINING.scratch.split),
        batch_size=4,
        max_steps=2,
    )
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
