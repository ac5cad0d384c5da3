"""The report: validation.json and a self-contained report.html that Chromium opens without errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from validate_helpers import SEEDS_FOR_REPORT, BrokenModel, OracleModel, WrongModel, all_steps, fill_store, open_store

from dreamgym.bridge import BrowserPool
from dreamgym.validate import ValidationConfig, ValidationReport, render_html, validate, write_report

pytestmark = pytest.mark.anyio


async def wrong_report(tmp_path: Path) -> ValidationReport:
    steps = all_steps(SEEDS_FOR_REPORT)
    async with open_store(tmp_path / "store") as store:
        await fill_store(store, range(0, 14))
        return await validate(
            WrongModel(steps), steps, store=store, config=ValidationConfig(open_loop=3),
            ablations={"no_retrieval": OracleModel(steps), "no_reasoning": "the model was trained without reasoning"},
        )  # fmt: skip


async def test_the_report_files_hold_every_section(tmp_path: Path) -> None:
    report = await wrong_report(tmp_path)
    json_path, html_path = write_report(report, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["steps"] == 20 and data["one_step"]["model"]["hallucination_rate"] == 0.25
    assert [p["k"] for p in data["open_loop"]["model"]] == [1, 2, 3]
    html = html_path.read_text()
    headings = (
        "One step, teacher-forced", "Reward confusion", "Deciding steps", "Failed actions",
        "By site, task, step depth and whether the page changed", "Ablations", "Open loop", "Worst cases",
    )  # fmt: skip
    for heading in headings:
        assert heading in html
    assert html.count("<svg") == 3 + 8 + 3  # confusion per predictor, 2 bars × 4 breakdowns, 3 drift curves
    assert "n/a" in html and "trained without reasoning" in html
    assert "<td>0/20</td>" in html  # the wrong model's deciding steps: all 20 (every end flipped), none right
    assert '<span class="added">[e99] dialog &quot;Bogus&quot;</span>' in html  # the invented line, marked
    # Self-contained: no script, no fetched asset, a policy that forbids loading any.
    assert "<script" not in html and not re.search(r"(src|href)=", html)
    assert "default-src 'none'" in html


async def test_chromium_opens_the_report_without_console_errors(tmp_path: Path, pool: BrowserPool) -> None:
    _, html_path = write_report(await wrong_report(tmp_path), tmp_path / "out")
    problems: list[str] = []
    async with pool.context() as lease:
        page = await lease.context.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: problems.append(f"request {r.url}") if r.url != html_path.as_uri() else None)
        await page.goto(html_path.as_uri())
        assert await page.locator("svg").count() == 14
        assert await page.locator("div.case").count() == 2
        # The charts have room: every bar and label lies inside its SVG.
        overflow = await page.evaluate(
            """() => [...document.querySelectorAll('svg')].filter(svg => {
                   const box = svg.getBoundingClientRect();
                   return [...svg.querySelectorAll('rect,text,circle')].some(el => {
                       const r = el.getBoundingClientRect();
                       return r.right > box.right + 1 || r.bottom > box.bottom + 1;
                   });
               }).length"""
        )
        assert overflow == 0
        await page.close()
    assert problems == []


async def test_unusable_answers_are_listed_with_their_reason(tmp_path: Path) -> None:
    steps = all_steps(SEEDS_FOR_REPORT)
    report = await validate(BrokenModel(), steps, store=None)
    html = render_html(report)
    assert "Unusable answers (20 of 20 steps; examples)" in html and "why: <code>no usable answer</code>" in html
    assert "Worst cases" not in html
