"""Salvaged answers are counted in fidelity results, and the figures are given without them too."""

from __future__ import annotations

from pathlib import Path

import pytest
import toy_form
from sim_helpers import ScriptedBackend, fill_toy_store, open_store

from dreamgym.core import ChatMessage
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, one_step_fidelity

pytestmark = pytest.mark.anyio

CLEAN = "<diff>\nno change\n</diff><reward>0</reward><done>no</done>"
BROKEN = (
    '<diff>\n+     [e9] link "Too deep"\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff><reward>1</reward><done>yes</done>'
)


def answer(messages: list[ChatMessage]) -> str:
    """A clean answer on pages asked to type, a diff that only salvage can use on the others."""
    return CLEAN if "Action: type" in messages[-1].content else BROKEN


async def test_salvaged_answers_are_counted_and_the_figures_are_also_given_without_them(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        steps = [step for episode in toy_form.episodes(range(10, 12)) for step in episode]
        model = LLMExperienceModel(ScriptedBackend(answer), config=ExperienceModelConfig(max_attempts=2), store=store)
        results = await one_step_fidelity(model, steps, store=store, neighbours=1)
    typed = sum(str(step.action).startswith("type") for step in steps)
    assert results["model"].salvaged == len(steps) - typed > 0
    clean = results["model_without_salvaged"]
    assert (clean.n, clean.salvaged) == (typed, 0)
    assert "copy_top_retrieved_without_salvaged" not in results  # baselines never salvage
    assert model.stats.salvaged_answers == results["model"].salvaged


async def test_validate_and_its_report_show_the_salvaged_answers_and_the_figures_without_them(tmp_path: Path) -> None:
    from dreamgym.validate import ValidationConfig, render_html, validate

    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        steps = [step for episode in toy_form.episodes(range(10, 12)) for step in episode]
        model = LLMExperienceModel(ScriptedBackend(answer), config=ExperienceModelConfig(max_attempts=2), store=store)
        report = await validate(model, steps, store=store, config=ValidationConfig(neighbours=1))
    typed = sum(str(step.action).startswith("type") for step in steps)
    assert report.one_step["model"].salvaged == len(steps) - typed
    assert report.one_step["model_without_salvaged"].n == typed
    assert report.as_dict()["one_step"]["model"]["salvaged"] == len(steps) - typed
    html = render_html(report)
    assert "salvaged answers" in html
    assert "model_without_salvaged" in html
