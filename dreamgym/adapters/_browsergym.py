"""BrowserGym's high-level actions, translated to dreamgym actions and back.

BrowserGym (and AgentLab, built on it) agents speak high-level actions, Python
calls such as ``click('a51')`` or ``fill('a12', 'text')`` whose element ids
("bids") come from the page's accessibility tree, and read observation dicts
whose ``axtree_object`` is Chrome's accessibility tree, rendered to prompt text
by ``browsergym.utils.obs.flatten_axtree_to_str``. This module translates the
actions both ways, so such an agent runs unchanged on dreamgym's real and
simulated environments, with dreamgym's element ids as its bids:

- :func:`from_browsergym` reads a BrowserGym action string into a dreamgym
  :class:`~dreamgym.core.types.Action` (parsed with :mod:`ast`, never
  executed); what dreamgym cannot express becomes an ``invalid`` action,
  which environments answer with ``last_action_error``.
- :func:`to_browsergym` writes a dreamgym action as BrowserGym's string, and
  ``from_browsergym(to_browsergym(a))`` gives ``a`` back (with the BrowserGym
  text as its ``raw``).

Observations are translated in :mod:`dreamgym.adapters._browsergym_env`.
Nothing here imports BrowserGym.

The translation, BrowserGym on the left (``bid`` is a dreamgym element id)::

    click(bid)                        click [bid]    (left button, no modifier keys)
    dblclick(bid)                     click [bid]    (dreamgym has no double click)
    fill(bid, text)                   type [bid] [text] [0]
    fill(bid, text)                   type [bid] [text] [1]   (two lines: the one pair of calls taken)
      press(bid, 'Enter')
    clear(bid)                        type [bid] [] [0]
    select_option(bid, option)        select [bid] [option]   (a list: its first option)
    hover(bid)                        hover [bid]
    press(bid, key)                   press [key]    (to the focused element; bid is not focused first)
    keyboard_press(key)               press [key]
    scroll(dx, dy)                    scroll [down] when dy > 0, scroll [up] when dy < 0 (dreamgym's distance)
    goto(url), go_back(), go_forward()                      the same
    new_tab(), tab_close(), tab_focus(i)                    new_tab, close_tab, tab_focus [i]
    send_msg_to_user(text)            stop [text]
    report_infeasible(reason)         stop [N/A]     (WebArena's answer for an impossible task)

``noop``, ``focus``, ``drag_and_drop``, ``upload_file`` and the coordinate
actions (``mouse_*``, ``scroll_at``, ``keyboard_*`` but ``keyboard_press``)
have no dreamgym form and become invalid actions. dreamgym takes one action a
step: a string with several calls is invalid, except the pair above.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from dreamgym.core.actions import (
    click,
    close_tab,
    go_back,
    go_forward,
    goto,
    hover,
    invalid_action,
    new_tab,
    press,
    scroll,
    select,
    stop,
    tab_focus,
    type_text,
)
from dreamgym.core.errors import ActionParseError
from dreamgym.core.state import ID_PATTERN
from dreamgym.core.types import Action

__all__ = ["from_browsergym", "to_browsergym"]

_INFEASIBLE_ANSWER = "N/A"
"""The ``stop`` answer ``report_infeasible`` becomes (WebArena's convention for an impossible task)."""

_SCROLL_PIXELS = 500
"""The ``delta_y`` :func:`to_browsergym` writes; dreamgym scrolls by its own distance either way."""
_ID = re.compile(ID_PATTERN)

# --------------------------------------------------------------------------- actions: BrowserGym -> dreamgym


@dataclass(frozen=True, slots=True)
class _Call:
    """One call of an action string, its arguments evaluated as literals."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def from_browsergym(action: str) -> Action:
    """Translate one BrowserGym high-level action string into a dreamgym action.

    The string is parsed with :mod:`ast` and its arguments read as literals;
    nothing is executed. The whole string must be calls, one a line (calls
    are not picked out of prose, as BrowserGym's non-strict parser does).
    The module docstring has the translation table.
    A string that is not a call, names an action dreamgym cannot express
    (``noop``, coordinates, drag and drop...), or holds several calls (other
    than ``fill(bid, text)`` then ``press(bid, 'Enter')``) becomes an
    ``invalid`` action whose ``error`` says why: environments answer it with
    ``last_action_error``, as BrowserGym does a failing action. The result's
    ``raw`` is the BrowserGym string.

    Example:
        >>> str(from_browsergym("fill('e3', 'lyda')"))
        'type [e3] [lyda] [0]'
        >>> from_browsergym("noop()").is_invalid
        True
    """
    try:
        translated = _translate(_calls(action))
    except ActionParseError as exc:
        return invalid_action(action, str(exc))
    return msgspec.structs.replace(translated, raw=action)


def _calls(text: str) -> list[_Call]:
    try:
        tree = ast.parse(textwrap.dedent(text).strip())
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise ActionParseError(f"{_short(text)} is not a BrowserGym action call such as click('e5'): {exc}") from exc
    if not tree.body:
        raise ActionParseError("the action is empty; write one call such as click('e5')")
    return [_call(statement) for statement in tree.body]


def _call(statement: ast.stmt) -> _Call:
    value = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
        written = _short(ast.unparse(statement))
        raise ActionParseError(f"{written} is not a call of a BrowserGym action such as click('e5')")
    if any(keyword.arg is None for keyword in value.keywords):
        raise ActionParseError(f"{value.func.id}() takes its arguments written out, not **unpacked")
    try:
        args = tuple(ast.literal_eval(arg) for arg in value.args)
        kwargs = {str(keyword.arg): ast.literal_eval(keyword.value) for keyword in value.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError) as exc:
        raise ActionParseError(
            f"the arguments of {value.func.id}() must be literals such as 'e5', 200 or ['a', 'b']: {exc}"
        ) from exc
    return _Call(value.func.id, args, kwargs)


def _translate(calls: list[_Call]) -> Action:
    if len(calls) == 1:
        return _translate_one(calls[0])
    if len(calls) == 2 and (calls[0].name, calls[1].name) == ("fill", "press"):
        typed = _translate_one(calls[0])
        if _bind(calls[1]).arguments == {"bid": typed.args[0], "key_comb": "Enter"}:
            return type_text(typed.args[0], typed.args[1], "1")
    raise ActionParseError(
        f"dreamgym takes one action a step, not {len(calls)}: send them one at a time "
        "(the one pair it takes is fill(bid, text) then press(bid, 'Enter'))"
    )


def _translate_one(call: _Call) -> Action:
    if call.name in _UNSUPPORTED:
        raise ActionParseError(f"BrowserGym's {call.name}() has no dreamgym form: {_UNSUPPORTED[call.name]}")
    if call.name not in _TRANSLATIONS:
        raise ActionParseError(f"unknown BrowserGym action {call.name!r}; dreamgym takes {', '.join(_TRANSLATIONS)}")
    bound = _bind(call)
    return _TRANSLATIONS[call.name](*bound.args, **bound.kwargs)


def _bind(call: _Call) -> inspect.BoundArguments:
    handler = _TRANSLATIONS[call.name]
    try:
        return inspect.signature(handler).bind(*call.args, **call.kwargs)
    except TypeError as exc:
        raise ActionParseError(f"{call.name}(): {exc}; e.g. {_EXAMPLES[call.name]}") from exc


def _bid(value: Any) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ActionParseError(f"element ids are strings such as 'e5' (the bids of axtree_object), not {value!r}")
    return value


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ActionParseError(f"{what} must be a string, not {value!r}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionParseError(f"{what} must be a number, not {value!r}")
    return float(value)


# The handlers take BrowserGym's parameter names, so keyword arguments bind as they do in BrowserGym.


def _click(bid: Any, button: Any = "left", modifiers: Any = ()) -> Action:
    if button != "left" or modifiers not in ([], ()):
        raise ActionParseError("dreamgym clicks with the left button and no modifier keys; drop button= and modifiers=")
    return click(_bid(bid))


def _fill(bid: Any, value: Any, enable_autocomplete_menu: Any = False) -> Action:
    # enable_autocomplete_menu is ignored: dreamgym types the way it always does, firing input events
    return type_text(_bid(bid), _string(value, "the text to fill"), "0")


def _clear(bid: Any) -> Action:
    return type_text(_bid(bid), "", "0")


def _select_option(bid: Any, options: Any) -> Action:
    if isinstance(options, list | tuple):
        if not options:
            raise ActionParseError("select_option() needs an option; dreamgym selects one, the first of a list")
        options = options[0]
    return select(_bid(bid), _string(options, "the option"))


def _hover(bid: Any) -> Action:
    return hover(_bid(bid))


def _press(bid: Any, key_comb: Any) -> Action:
    _bid(bid)
    return _keyboard_press(key_comb)


def _keyboard_press(key: Any) -> Action:
    if not _string(key, "the key"):
        raise ActionParseError("press needs a key such as 'Enter' or 'Control+a'")
    return press(key)


def _scroll(delta_x: Any, delta_y: Any) -> Action:
    _number(delta_x, "delta_x")
    dy = _number(delta_y, "delta_y")
    if dy > 0:
        return scroll("down")
    if dy < 0:
        return scroll("up")
    raise ActionParseError("dreamgym scrolls up or down only: give delta_y a sign, as in scroll(0, 200)")


def _goto(url: Any) -> Action:
    return goto(_string(url, "the url"))


def _go_back() -> Action:
    return go_back()


def _go_forward() -> Action:
    return go_forward()


def _new_tab() -> Action:
    return new_tab()


def _tab_close() -> Action:
    return close_tab()


def _tab_focus(index: Any) -> Action:
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ActionParseError(f"tab_focus() takes a tab index 0, 1, 2... (no negative indices), not {index!r}")
    return tab_focus(str(index))


def _send_msg_to_user(text: Any) -> Action:
    return stop(_string(text, "the message"))


def _report_infeasible(reason: Any) -> Action:
    _string(reason, "the reason")
    return stop(_INFEASIBLE_ANSWER)


_TRANSLATIONS: dict[str, Callable[..., Action]] = {
    "click": _click,
    "dblclick": _click,
    "fill": _fill,
    "clear": _clear,
    "select_option": _select_option,
    "hover": _hover,
    "press": _press,
    "keyboard_press": _keyboard_press,
    "scroll": _scroll,
    "goto": _goto,
    "go_back": _go_back,
    "go_forward": _go_forward,
    "new_tab": _new_tab,
    "tab_close": _tab_close,
    "tab_focus": _tab_focus,
    "send_msg_to_user": _send_msg_to_user,
    "report_infeasible": _report_infeasible,
}
_EXAMPLES = {
    "click": "click('e5')",
    "dblclick": "dblclick('e5')",
    "fill": "fill('e3', 'text')",
    "clear": "clear('e3')",
    "select_option": "select_option('e9', 'Blue')",
    "hover": "hover('e4')",
    "press": "press('e3', 'Enter')",
    "keyboard_press": "keyboard_press('Enter')",
    "scroll": "scroll(0, 200)",
    "goto": "goto('http://127.0.0.1:8000/')",
    "go_back": "go_back()",
    "go_forward": "go_forward()",
    "new_tab": "new_tab()",
    "tab_close": "tab_close()",
    "tab_focus": "tab_focus(1)",
    "send_msg_to_user": "send_msg_to_user('42')",
    "report_infeasible": "report_infeasible('there is no such field')",
}
_COORDINATES = "dreamgym acts on elements by id, not at coordinates; use click(bid) or fill(bid, text)"
_UNSUPPORTED = {
    "noop": "every dreamgym action already waits for the page to settle, so there is nothing to wait for; "
    "act, or stop with send_msg_to_user(answer)",
    "focus": "dreamgym cannot focus without clicking; use click(bid)",
    "drag_and_drop": "dreamgym has no drag and drop",
    "upload_file": "dreamgym has no file upload",
    "keyboard_type": "dreamgym types into an element; use fill(bid, text)",
    "keyboard_insert_text": "dreamgym types into an element; use fill(bid, text)",
    "keyboard_down": "dreamgym presses whole keys; use keyboard_press(key)",
    "keyboard_up": "dreamgym presses whole keys; use keyboard_press(key)",
    **dict.fromkeys(
        [
            "scroll_at",
            "mouse_move",
            "mouse_up",
            "mouse_down",
            "mouse_click",
            "mouse_dblclick",
            "mouse_drag_and_drop",
            "mouse_upload_file",
        ],
        _COORDINATES,
    ),
}


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


# --------------------------------------------------------------------------- actions: dreamgym -> BrowserGym


def to_browsergym(action: Action) -> str:
    """Write a dreamgym action as BrowserGym's high-level action string (string arguments ``repr``-quoted).

    ``type`` with Enter becomes two lines, ``fill(bid, text)`` then
    ``press(bid, 'Enter')``, which BrowserGym runs as a multi-action. An
    invalid action is given back as its raw text. The element label is
    dropped (BrowserGym has none).

    Raises:
        ActionParseError: The action's name is not one of dreamgym's actions.

    Example:
        >>> to_browsergym(type_text("e3", "lyda", "1"))
        "fill('e3', 'lyda')\\npress('e3', 'Enter')"
    """
    if action.is_invalid:
        return action.raw
    writer = _WRITERS.get(action.name)
    if writer is None:
        raise ActionParseError(f"dreamgym has no action {action.name!r}, so it has no BrowserGym form")
    return writer(*action.args)


def _written(name: str, *args: object) -> str:
    return f"{name}({', '.join(repr(arg) for arg in args)})"


def _write_type(element: str, text: str, press_enter_after: str = "1") -> str:
    fill = _written("fill", element, text)
    return fill + "\n" + _written("press", element, "Enter") if press_enter_after == "1" else fill


_WRITERS: dict[str, Callable[..., str]] = {
    "click": lambda element: _written("click", element),
    "type": _write_type,
    "hover": lambda element: _written("hover", element),
    "press": lambda key: _written("keyboard_press", key),
    "scroll": lambda direction: _written("scroll", 0, _SCROLL_PIXELS if direction == "down" else -_SCROLL_PIXELS),
    "select": lambda element, option: _written("select_option", element, option),
    "new_tab": lambda: _written("new_tab"),
    "tab_focus": lambda index: _written("tab_focus", int(index)),
    "close_tab": lambda: _written("tab_close"),
    "goto": lambda url: _written("goto", url),
    "go_back": lambda: _written("go_back"),
    "go_forward": lambda: _written("go_forward"),
    "stop": lambda answer="": _written("send_msg_to_user", answer),
}
