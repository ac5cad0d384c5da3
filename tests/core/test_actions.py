from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamgym.core import (
    ACTIONS,
    Action,
    ActionParseError,
    candidate_actions,
    describe_actions,
    parse_action,
    parse_state,
    quoted_spans,
    try_parse_action,
)
from dreamgym.core.actions import click, goto, select, stop, type_text


@pytest.mark.parametrize(
    ("text", "name", "args", "label"),
    [
        ("click [e5]", "click", ("e5",), ""),
        ('click [e5] "Yes"', "click", ("e5",), "Yes"),
        ("  hover [12]  ", "hover", ("12",), ""),
        ("type [e3] [blue shoes] [0]", "type", ("e3", "blue shoes", "0"), ""),
        ("type [e3] [blue shoes]", "type", ("e3", "blue shoes", "1"), ""),
        ("type [e3] [a [b] c] [1]", "type", ("e3", "a [b] c", "1"), ""),
        ('type [e3] [x] [0] "First name"', "type", ("e3", "x", "0"), "First name"),
        ("press [Control+a]", "press", ("Control+a",), ""),
        ("scroll [down]", "scroll", ("down",), ""),
        ("select [e9] [Blue]", "select", ("e9", "Blue"), ""),
        ("new_tab", "new_tab", (), ""),
        ("tab_focus [2]", "tab_focus", ("2",), ""),
        ("close_tab", "close_tab", (), ""),
        ("goto [http://127.0.0.1:8000/a?b=[1]]", "goto", ("http://127.0.0.1:8000/a?b=[1]",), ""),
        ("go_back", "go_back", (), ""),
        ("go_forward", "go_forward", (), ""),
        ("stop [42 items]", "stop", ("42 items",), ""),
        ("stop []", "stop", ("",), ""),
        ("stop", "stop", ("",), ""),
    ],
)
def test_valid_actions_parse(text: str, name: str, args: tuple[str, ...], label: str) -> None:
    action = parse_action(text)
    assert (action.name, action.args, action.label, action.raw) == (name, args, label, text)
    assert parse_action(str(action)).args == args  # the canonical text parses to the same action


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "does not start with an action name"),
        ("clik [e1]", "unknown action 'clik'"),
        ("click e5", "does not match 'click \\[element\\]'"),
        ("click [e5] [e6]", "does not match"),
        ("click [e5]; click [e6]", "does not match"),
        ("scroll [sideways]", "does not match"),
        ("type [e3] [x] [2] extra", "does not match"),
        ("tab_focus [first]", "does not match"),
        ("go_back [now]", "does not match"),
        ("<action>click [e5]</action>", "does not start with an action name"),
        ("Click [e5]", "does not start with an action name"),
    ],
)
def test_invalid_actions_raise_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=message):
        parse_action(text)
    invalid = try_parse_action(text)
    assert invalid.is_invalid and invalid.raw == text and invalid.error


def test_the_prompt_lists_every_action_with_an_example() -> None:
    listing = describe_actions()
    for spec in ACTIONS.values():
        assert spec.signature() in listing
        assert spec.examples, f"{spec.name} needs a docstring example"
        for example in spec.examples:
            parse_action(example)  # every documented example is itself valid
    assert describe_actions(["click"]).startswith("click [element]:")


def test_quoted_spans_of_an_instruction() -> None:
    instruction = "Enter \"lyda\" and 'UM5' (don't type 'x y') or “Bob”, then \"lyda\" again"
    assert quoted_spans(instruction) == ("lyda", "UM5", "x y", "Bob")
    assert quoted_spans("Click the button.") == ()


LOGIN = parse_state(
    """[e1] form "Login"
  [e2] textbox "Username"
  [e3] textbox "Password"
  [e4] checkbox "Remember me" [checked]
  [e5] button "Login"
[e6] combobox "Color"
  [e7] option "Red" [selected]
  [e8] option "Blue"
[e9] generic [cursor=pointer]: Help
text: static
[e10] heading "Welcome\""""
)


def test_candidate_actions_cover_the_page_and_carry_names() -> None:
    texts = [str(a) for a in candidate_actions(LOGIN, 'Log in as "lyda" with password "UM5".')]
    assert texts == [
        'type [e2] [lyda] [0] "Username"',
        'type [e2] [UM5] [0] "Username"',
        'type [e3] [lyda] [0] "Password"',
        'type [e3] [UM5] [0] "Password"',
        'click [e4] "Remember me"',
        'click [e5] "Login"',
        'type [e6] [lyda] [0] "Color"',
        'type [e6] [UM5] [0] "Color"',
        'select [e6] [Blue] "Color"',
        'click [e7] "Red"',
        'click [e8] "Blue"',
        'click [e9] "Help"',
        "scroll [down]",
        "scroll [up]",
    ]
    for text in texts:
        parse_action(text)  # every candidate is a valid action


def test_candidates_without_quotes_or_scrolling() -> None:
    actions = candidate_actions(LOGIN, "Log in.", include_scroll=False, press_enter_after=("0", "1"))
    assert all(a.name in ("click", "select") for a in actions)
    page = parse_state('[e1] searchbox "Search"')
    both = candidate_actions(page, 'Search for "shoes"', include_scroll=False, press_enter_after=("0", "1"))
    assert [str(a) for a in both] == ['type [e1] [shoes] [0] "Search"', 'type [e1] [shoes] [1] "Search"']


_free_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["type", "select", "goto", "stop", "click"]),
    st.from_regex(r"[A-Za-z0-9_.:-]{1,6}", fullmatch=True),
    _free_text,
    st.sampled_from(["0", "1"]),
    _free_text,
)
def test_built_actions_survive_their_text_form(name: str, element: str, text: str, flag: str, label: str) -> None:
    build = {
        "type": lambda: type_text(element, text, flag),
        "select": lambda: select(element, text),
        "goto": lambda: goto(text),
        "stop": lambda: stop(text),
        "click": lambda: click(element),
    }[name]
    action = build()
    labelled = Action(name=action.name, args=action.args, label=label)
    for variant in (action, labelled):
        parsed = parse_action(str(variant))
        assert (parsed.name, parsed.args, parsed.label) == (variant.name, variant.args, variant.label)
