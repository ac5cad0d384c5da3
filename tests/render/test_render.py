"""The shared renderer: the line diff of a real and a predicted page, step boxes, the page shell, the charts."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import OVERFLOWING_CHARTS, open_page

from dreamgym.bridge import BrowserPool
from dreamgym.render import CSP, NA, StepView, charts, episode_box, line_chart, page, side_by_side, step_box, table

REAL = '[e1] heading "Login"\n[e2] textbox "Username" value="ana"\n[e3] button "Submit"'
PREDICTED = '[e1] heading "Login"\n[e2] textbox "Username"\n[e3] button "Submit"\n[e4] dialog "<Bogus>"'


BASE = StepView(
    task_id="miniwob/login-user", seed=3, step_index=1, goal="Log in as ana", action='type(e2, "ana")',
    state='[e1] heading "Login"', real_state=REAL, predicted_state=PREDICTED, real_reward=0.0,
    predicted_reward=1.0, real_done=False, predicted_done=True, similarity=0.5, f1=0.667,
)  # fmt: skip


def view(**changes: Any) -> StepView:
    return dataclasses.replace(BASE, **changes)


def test_side_by_side_marks_the_lines_only_one_page_has() -> None:
    real, predicted = side_by_side(REAL, PREDICTED)
    assert real.split("\n") == [
        '[e1] heading &quot;Login&quot;',
        '<span class="only">[e2] textbox &quot;Username&quot; value=&quot;ana&quot;</span>',
        '[e3] button &quot;Submit&quot;',
    ]  # fmt: skip
    assert predicted.split("\n") == [
        '[e1] heading &quot;Login&quot;',
        '<span class="added">[e2] textbox &quot;Username&quot;</span>',
        '[e3] button &quot;Submit&quot;',
        '<span class="added">[e4] dialog &quot;&lt;Bogus&gt;&quot;</span>',
    ]  # fmt: skip


def test_side_by_side_of_identical_pages_marks_nothing() -> None:
    real, predicted = side_by_side(REAL, REAL)
    assert real == predicted
    assert "<span" not in real


def test_side_by_side_without_a_prediction_marks_every_real_line() -> None:
    real, predicted = side_by_side(REAL, "")
    assert real.count('<span class="only">') == 3
    assert predicted == "(no page)"


def test_a_step_box_shows_both_outcomes_and_both_pages() -> None:
    html = step_box(view(real_error="", predicted_error="no element e9"))
    assert "<b>miniwob/login-user</b> seed 3 step 1" in html
    assert "goal: Log in as ana" in html
    assert "real: reward 0, continues · predicted: reward 1, ends" in html
    assert "action errors: real -; predicted no element e9" in html
    assert html.count('<div class="side">') == 1
    assert "<summary>page before the action</summary>" in html


def test_a_step_box_without_a_usable_prediction_says_why_and_folds_the_real_page() -> None:
    html = step_box(view(predicted_reward=None, predicted_done=None, predicted_state="", error="malformed answer"))
    assert "why: <code>malformed answer</code>" in html
    assert '<div class="side">' not in html
    assert "<summary>real next page</summary>" in html


def test_a_blank_action_is_shown_quoted() -> None:
    assert "action: <code>&#x27;\\n&#x27;</code>" in step_box(view(action="\n"))


def test_an_episode_box_names_its_goal_once_and_boxes_each_step() -> None:
    html = episode_box("solved", "reward 1", [view(step_index=0), view(step_index=1)])
    assert html.count("goal: Log in as ana") == 1
    assert html.count('<div class="case">') == 2
    assert "<b>step 0</b>" in html


def test_a_page_forbids_loading_anything_and_escapes_its_title() -> None:
    html = page("a <b> report", [table(["", "model"], [["F1", 0.8], ["judge", NA("no judge given")]])])
    assert f'content="{CSP}"' in html
    assert "<title>a &lt;b&gt; report</title>" in html
    assert '<td class="num">0.800</td>' in html
    assert '<td class="num na" title="no judge given">n/a</td>' in html
    assert "<script" not in html
    assert not re.search(r"(src|href)=", html)


def test_a_line_chart_leaves_gaps_where_a_series_has_no_value() -> None:
    svg = line_chart(
        "curve", ["before", "u1", "u2", "after"], {"held-out": [0.4, None, None, 0.6], "real": [None, 0.2, 0.3]}
    )
    assert svg.count("<polyline") == 1  # only the two neighbouring points of "real" are joined
    assert svg.count("<circle") == 4
    assert "held-out at k=after: 0.600" in svg


LAST_POINT_SHOWN = f"""() => ({{
    overflowing: ({OVERFLOWING_CHARTS})(),
    fits: document.querySelector('svg').getBoundingClientRect().right <= window.innerWidth,
    scrolls: document.documentElement.scrollWidth > window.innerWidth,
}})"""


@pytest.mark.anyio
async def test_a_chart_wider_than_the_page_shrinks_whole_instead_of_losing_its_right_end(
    tmp_path: Path, pool: BrowserPool
) -> None:
    """A curve of 40 updates is drawn 2,500 px wide: on a narrower page every point must still be on screen."""
    xs = ["before", *(f"{n}" for n in range(1, 40)), "after"]
    path = tmp_path / "long.html"
    path.write_text(page("long", [charts([line_chart("a long curve", xs, {"reward": [0.5] * len(xs)})])]))
    opened = await open_page(pool, path, LAST_POINT_SHOWN)
    assert opened.problems == []
    assert opened.probe == {"overflowing": 0, "fits": True, "scrolls": False}
