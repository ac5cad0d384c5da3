from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamgym.core import (
    DiffApplyError,
    Element,
    State,
    StateFormatError,
    apply_diff,
    diff_states,
    flatten,
    match_elements,
    parse_state,
    render_state,
)

PAGE = """[e1] heading "Sign in" [level=1]
[e2] form "Login"
  [e3] textbox "Username": lyda
  [e4] checkbox "Remember \\"me\\"" [checked] [disabled]
  [e5] button "Sign in" [cursor=pointer]
text: Forgot your password?
[e6] list
  [e7] listitem
    [e8] link "Help"
  listitem: plain item"""


def test_a_rendered_page_parses_back_to_the_same_text_and_tree() -> None:
    state = parse_state(PAGE)
    assert render_state(state) == PAGE
    form = state.elements[1]
    assert (form.id, form.role, form.name) == ("e2", "form", "Login")
    assert form.children[1] == Element(role="checkbox", name='Remember "me"', id="e4", props=("checked", "disabled"))
    assert form.children[0].text == "lyda"
    assert state.elements[2] == Element(role="text", text="Forgot your password?")
    assert state.find("e8") == Element(role="link", name="Help", id="e8")
    assert state.find("e99") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[e1 button", "line 1"),
        ('button "unterminated', "malformed quoted name"),
        ('button "x" trailing', "unexpected text"),
        ("button\n      link", "indented 3 levels"),
        (" button", "odd number"),
        ("[e1] 9button", "line 1"),
        ("ok\n[bad id!] button", "line 2"),
    ],
)
def test_malformed_state_text_names_the_line(text: str, message: str) -> None:
    with pytest.raises(StateFormatError, match=message):
        parse_state(text)


def test_elements_reject_text_that_would_not_round_trip() -> None:
    with pytest.raises(StateFormatError, match="one line"):
        Element(role="text", text="two\nlines")
    with pytest.raises(StateFormatError, match="prop"):
        Element(role="button", props=("a]b",))


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Zl", "Zp", "Cc")), max_size=12).map(
    lambda s: " ".join(s.split())
)
_elements = st.recursive(
    st.builds(
        Element,
        role=st.sampled_from(["button", "link", "text", "textbox", "generic", "heading"]),
        name=_names,
        id=st.sampled_from(["", "e1", "e2", "e10", "a-b"]),
        props=st.lists(st.sampled_from(["checked", "level=2", "cursor=pointer"]), max_size=2).map(tuple),
        text=_text,
    ),
    lambda children: st.builds(
        Element,
        role=st.sampled_from(["list", "form", "main"]),
        name=_names,
        children=st.lists(children, max_size=4).map(tuple),
    ),
    max_leaves=12,
)
_states = st.lists(_elements, max_size=5).map(lambda els: State(tuple(els)))


@settings(max_examples=200, deadline=None)
@given(_states)
def test_any_state_round_trips(state: State) -> None:
    assert parse_state(render_state(state)) == state


@settings(max_examples=300, deadline=None)
@given(_states, _states)
def test_a_diff_turns_the_old_state_into_the_new_one(old: State, new: State) -> None:
    assert apply_diff(old, diff_states(old, new)) == new


def test_diffs_of_repeated_lines_carry_enough_context() -> None:
    old = "text: same\nbutton\ntext: same\nlink\ntext: same"
    new = "text: same\nbutton\ntext: same\nlink\ntext: changed"
    diff = diff_states(old, new)
    assert diff.splitlines() == ["  link", "- text: same", "+ text: changed"]
    assert render_state(apply_diff(old, diff)) == new
    assert diff_states(old, old) == ""
    assert render_state(apply_diff(old, "")) == old


def test_a_diff_that_does_not_fit_the_state_is_an_error() -> None:
    with pytest.raises(DiffApplyError, match="removes a line that is not there"):
        apply_diff(PAGE, '- [e9] button "Gone"')
    with pytest.raises(DiffApplyError, match="context not found"):
        apply_diff(PAGE, '  [e9] button "Gone"\n+ text: new')
    with pytest.raises(DiffApplyError, match="must start with"):
        apply_diff(PAGE, "* nonsense")


def test_lenient_apply_finds_a_removal_further_down() -> None:
    diff = '- [e1] heading "Sign in" [level=1]\n-   [e5] button "Sign in" [cursor=pointer]\n+   [e5] button "Wait"'
    with pytest.raises(DiffApplyError):
        apply_diff(PAGE, diff)
    result = apply_diff(PAGE, diff, strict=False)
    assert result.find("e1") is None
    assert result.find("e5") == Element(role="button", name="Wait", id="e5")


def test_elements_match_by_role_name_and_ancestry_not_by_id() -> None:
    real = parse_state('[e1] list "A"\n  [e2] link "Go"\n[e3] list "B"\n  [e4] link "Go"\n[e5] button "OK"')
    predicted = parse_state('[x9] list "B"\n  [x8] link "Go"\n[x7] button "OK"\n[x6] button "Extra"')
    matches = match_elements(real, predicted)
    flat_real, flat_pred = flatten(real), flatten(predicted)
    pairs = {(flat_real[m.left].element.id, flat_pred[m.right].element.id, m.same_ancestry) for m in matches}
    # the link under list "B" matches its twin under "B", not the first "Go" link it meets
    assert pairs == {("e3", "x9", True), ("e4", "x8", True), ("e5", "x7", True)}


def test_matching_falls_back_to_the_nearest_shared_ancestors() -> None:
    real = parse_state('[e1] main\n  [e2] form "F"\n    [e3] button "Save"')
    predicted = parse_state('[e1] region\n  [e2] form "F"\n    [e3] button "Save"\n[e9] button "Save"')
    matches = match_elements(real, predicted)
    by_left = {m.left: m for m in matches}
    assert by_left[2].right == 2 and by_left[2].same_ancestry is False  # shares form "F", not the top-level one
    assert len(matches) == 2  # "main" has no twin
