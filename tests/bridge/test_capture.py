"""The snapshot → state mapping, on snapshots recorded from Chromium (no browser needed)."""

from __future__ import annotations

import pytest

from dreamgym.bridge import RefMap, render_snapshot
from dreamgym.core import StateFormatError, parse_state

# Recorded with Playwright 1.65 + Chromium from a page of awkward content.
TRICKY = """\
- generic [ref=e1]:
  - 'heading "Title: with colon" [level=1] [ref=e2]'
  - 'button "Say \\"hi\\": now" [ref=e3]'
  - button "it's - dash" [ref=e4]: x
  - paragraph [ref=e5]: "- starts with dash"
  - paragraph [ref=e6]: line one line two spaced
  - link "Next page" [ref=e7] [cursor=pointer]:
    - /url: /next?a=1
  - textbox "Your name" [active] [ref=e8]: bob
  - checkbox [checked] [ref=e9]
  - text: Agree
  - combobox [ref=e10]:
    - option "Red"
    - option "Blue" [selected]
  - list [ref=e12]:
    - listitem [ref=e13]: one
    - listitem [ref=e14]: "two: three"
  - generic [ref=e15] [cursor=pointer]: clickable div
  - text: "#hash 'single' \\"double\\" [brackets] {braces}"
  - iframe [ref=e26]:
    - button "In frame" [ref=f1e2]"""

EXPECTED = """\
[e1] heading "Title: with colon" [level=1]
[e2] button "Say \\"hi\\": now"
[e3] button "it's - dash": x
[e4] paragraph: - starts with dash
[e5] paragraph: line one line two spaced
[e6] link "Next page" [cursor=pointer]
[e7] textbox "Your name": bob
[e8] checkbox [checked]
text: Agree
[e9] combobox
  option "Red"
  option "Blue" [selected]
[e10] list
  [e11] listitem: one
  [e12] listitem: two: three
[e13] generic [cursor=pointer]: clickable div
text: #hash 'single' "double" [brackets] {braces}
[e14] iframe
  [e15] button "In frame\""""


def test_a_recorded_snapshot_renders_into_the_state_grammar() -> None:
    refs = RefMap()
    captured = render_snapshot(TRICKY, refs)
    assert captured.text == EXPECTED
    parse_state(captured.text)  # valid in core's grammar
    assert captured.focused_id == "e7"  # [active] became the focus, not a prop
    assert captured.cut_note == ""
    # the anonymous wrapper took no id; ids map back to Playwright's refs, frames included
    assert refs.ref("e1") == "e2" and refs.ref("e15") == "f1e2" and refs.ref("e16") is None


def test_ids_follow_first_appearance_so_re_rendered_elements_get_new_ids() -> None:
    refs = RefMap()
    first = render_snapshot('- button "A" [ref=e5]\n- button "B" [ref=e6]', refs).text
    # B re-rendered (new ref e9); A kept its ref
    second = render_snapshot('- button "A" [ref=e5]\n- button "B" [ref=e9]', refs).text
    assert first == '[e1] button "A"\n[e2] button "B"'
    assert second == '[e1] button "A"\n[e3] button "B"'
    assert refs.ref("e2") == "e6" and refs.ref("e3") == "e9"
    # a new episode (a fresh map) numbers the same page the same way
    assert render_snapshot('- button "A" [ref=e17]\n- button "B" [ref=e18]', RefMap()).text == first


def test_the_length_cap_cuts_whole_lines_and_says_so() -> None:
    snapshot = "\n".join(f'- button "Button number {i}" [ref=e{i}]' for i in range(100))
    captured = render_snapshot(snapshot, RefMap(), max_chars=300, position=None)  # no windowing: the end goes
    assert len(captured.text) <= 300
    parse_state(captured.text)
    lines = captured.text.count("\n") + 1
    assert captured.cut_note == f"cut {100 - lines} of 100 lines to stay under 300 characters"


def _orders(rows: int) -> str:
    body = "\n".join(f'    - row "Order {n}" [ref=r{n}]:\n      - cell "{n * 7} EUR" [ref=c{n}]' for n in range(rows))
    return f'- heading "Orders" [level=1] [ref=h1]\n- table [ref=t1]:\n  - rowgroup [ref=g1]:\n{body}\n' + (
        '- link "Next page" [ref=n1]\n- button "Export" [ref=x1]'
    )


def test_a_long_table_is_windowed_where_the_page_is_scrolled_and_its_tail_stays() -> None:
    top = render_snapshot(_orders(500), RefMap(), max_chars=4000, position=0.0)
    bottom = render_snapshot(_orders(500), RefMap(), max_chars=4000, position=1.0)
    for captured in (top, bottom):
        assert len(captured.text) <= 4000
        parse_state(captured.text)
        assert 'heading "Orders"' in captured.text
        assert 'link "Next page"' in captured.text and 'button "Export"' in captured.text  # the tail stays
    assert 'row "Order 0"' in top.text and 'row "Order 499"' not in top.text
    assert 'row "Order 499"' in bottom.text and 'row "Order 0"' not in bottom.text
    assert "of the 500 in a row" in top.cut_note and "(scroll down)" in top.cut_note
    assert "(scroll up)" in bottom.cut_note and "scroll down" not in bottom.cut_note
    next_top = next(line for line in top.text.splitlines() if "Next page" in line)
    assert next_top == next(line for line in bottom.text.splitlines() if "Next page" in line)  # the same ids


def test_nested_wrappers_collapse_but_named_or_clickable_ones_stay() -> None:
    snapshot = """\
- generic [ref=e1]:
  - generic [ref=e2]:
    - generic [ref=e3]:
      - button "Deep" [ref=e4]
  - generic "Named region" [ref=e5]:
    - text: inside
  - generic [ref=e6] [cursor=pointer]"""
    assert render_snapshot(snapshot, RefMap()).text == (
        '[e1] button "Deep"\n[e2] generic "Named region"\n  text: inside\n[e3] generic [cursor=pointer]'
    )


def test_a_line_that_is_not_a_snapshot_line_is_an_error() -> None:
    with pytest.raises(StateFormatError, match="line 2"):
        render_snapshot('- button "A" [ref=e1]\nnot a snapshot line', RefMap())
    assert render_snapshot("", RefMap()).text == ""
