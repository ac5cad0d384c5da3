"""The simulator's rules: what a prediction must say whatever the model wrote, as the real side would.

Every predictor's answer passes through :func:`apply_rules`, in
:class:`~dreamgym.simulator.SimulatedEnv` and in teacher-forced fidelity alike,
so a simulator is scored as it runs. Five rules:

- ``stop`` ends the episode (the model still predicts its reward).
- A ``type`` action leaves its text in the field it typed into. ``type``
  replaces a field's content (``core.actions``), so where the predicted page
  still has that field (same id, role and name, a text-entry role), its text
  becomes the typed text. A page the action led away from (no such field) is
  left as the model wrote it. A tiny model trained from scratch predicts the
  field changed but rarely copies a name it has never seen letter by letter;
  without this rule its synthetic episodes type the wrong text and never
  succeed. Without Enter, typing writes no other field: where the model's
  diff wrote or cleared another text field, that field keeps what it held
  (a demo-size build trained with permuted ids cleared the first password
  field when the second was typed, and the judge paid 2 of 89 wins open
  loop). Real pages agree: ``tests/bridge/test_miniwob.py`` checks that
  the rule changes nothing after every ``type`` of the MiniWoB demonstrators
  in Chromium (passwords and Enter included).
- A ``select`` action leaves its option selected. ``select`` makes the named
  option the list's only selected one (Playwright's ``select_option``, for a
  single and a multiple select alike), so where the predicted page still has
  that list (same id, role and name) with an option of that name, that option
  is marked ``[selected]`` and its siblings are not. The demo-size and default
  models, asked to select a name, often write the selection onto options
  retrieved from a neighbour's list; the same real-page test checks every
  ``select`` of the demonstrators.

- A ``click`` on a check control leaves it as a browser does: a checkbox
  or a switch flips its ``[checked]``, a radio button is checked and the
  radio buttons beside it are not; no other check control changes, and none
  leaves a page that stays. On the policy's own pages the model writes the
  flip, but a tiny model often marks the wrong box too, drops a box's line
  (or mangles it), and whether a later Submit pays is read from those marks
  (:class:`~dreamgym.simulator.OutcomeJudge`). The same real-page test checks
  the rule after every click of the demonstrators on a check control.

- The element an action works on takes the focus, as the browser gives it.
  A real page records which element has the focus (``Observation.focused_id``,
  shown to the policy and to the experience model as ``Focused: [id]``), and a
  model predicts the page, never the focus: without this rule every
  simulated page after the first had none, so a model trained on real pages
  (where a typed field or a clicked button always has it) saw prompts unlike
  any it trained on in its own episodes and, on the demo's tasks, paid none of
  the wins it paid on real pages. A ``click`` or ``type`` gives the focus to
  its element when the predicted page still has it with a focusable role
  (:data:`FOCUSABLE_ROLES`), else to nothing; any other action (``select``
  included: Playwright chooses an option without focusing the list) leaves
  the focus where it was, if that element is still on the page. Where the
  element left the page the rule cannot know where a page's script put the
  focus (a dialog that closes hands it back to what had it before) and says
  none. The same real-page test checks the rule against Chromium's focus
  after every action of the demonstrators that left the episode running and
  its element on the page.

A rule that changes a prediction is recorded in ``info["rules"]`` of the
simulated step (``SimulatedEnv``) and counted in its stats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import msgspec

from dreamgym.core.errors import StateFormatError
from dreamgym.core.protocols import ExperienceQuery, Prediction
from dreamgym.core.state import Element, State, flatten, parse_state
from dreamgym.core.types import Action

__all__ = ["CHECK_ROLES", "FOCUSABLE_ROLES", "LIST_ROLES", "TEXT_ROLES", "apply_rules", "checked_page", "focus_after",
           "rule_writes_page", "selected_option_page", "typed_text_page"]  # fmt: skip

TEXT_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
"""Roles whose element text is the field's content (what ``type`` writes)."""
LIST_ROLES = frozenset({"combobox", "listbox"})
"""Roles of the lists ``select`` chooses from (a select box, single or multiple)."""
CHECK_ROLES = frozenset({"checkbox", "switch", "radio"})
"""Roles a click checks: a checkbox or a switch flips, a radio button is checked and its siblings are not."""
FOCUSABLE_ROLES = frozenset({"button", "checkbox", "radio", "link", "textbox", "searchbox", "combobox", "listbox",
                             "spinbutton", "slider", "switch", "tab", "menuitem"})  # fmt: skip
"""Roles a click gives the focus to (form controls, links, tabs); a click elsewhere takes it away."""
FOCUSING_ACTIONS = frozenset({"click", "type"})
"""Actions that give the focus to their element (the first argument). Not ``select``: Playwright's
``select_option`` chooses without focusing, and Chromium's focus stays where it was."""
_BEFORE_SELECTED = ("checked", "disabled", "expanded", "level=", "pressed")
"""Props an accessibility snapshot writes before ``selected`` (Playwright's order); the rest come after it."""


def apply_rules(query: ExperienceQuery, prediction: Prediction) -> tuple[Prediction, tuple[str, ...]]:
    """``prediction`` with the simulator's rules applied, and the names of the rules that changed it."""
    applied: list[str] = []
    if query.action.name in PAGE_RULES:
        name, rule = PAGE_RULES[query.action.name]
        page = rule(query.observation.state, prediction.observation.state, query.action.args)
        if page is not None:
            observation = msgspec.structs.replace(prediction.observation, state=page)
            prediction = replace(prediction, observation=observation)
            applied.append(name)
    if query.action.name == "stop" and not prediction.terminated:
        prediction = replace(prediction, terminated=True)
        applied.append("stop_ends")
    focus = focus_after(query.observation.focused_id, prediction.observation.state, query.action)
    if focus != prediction.observation.focused_id:
        prediction = replace(prediction, observation=msgspec.structs.replace(prediction.observation, focused_id=focus))
        applied.append("focus")
    return prediction, tuple(applied)


def rule_writes_page(query: ExperienceQuery) -> bool:
    """Whether a rule writes the page ``query.action`` leads to from the page as it was: a ``type`` into a field
    that does not hold the text yet, a ``select`` of an option not selected yet, a click on a checkbox or radio
    button that changes it. A page the model left unchanged is then made right by :func:`apply_rules`."""
    if query.action.name not in PAGE_RULES:
        return False
    page = query.observation.state
    return PAGE_RULES[query.action.name][1](page, page, query.action.args) is not None


def focus_after(focused: str, after: str, action: Action) -> str:
    """Which element has the focus on the page ``after`` once ``action`` ran from a page whose focus was
    ``focused`` (an element id, ``""`` for none).

    A ``click`` or ``type`` focuses its element when ``after`` has it with a :data:`FOCUSABLE_ROLES` role, and
    nothing otherwise; any other action keeps ``focused`` where ``after`` still has that element.
    """
    try:
        page = parse_state(after)
    except StateFormatError:
        return ""
    if action.name in FOCUSING_ACTIONS and action.args:
        target = page.find(action.args[0])
        return action.args[0] if target is not None and target.role in FOCUSABLE_ROLES else ""
    return focused if focused and page.find(focused) is not None else ""


def typed_text_page(before: str, after: str, args: tuple[str, ...]) -> str | None:
    """The predicted page ``after`` with the typed text in its field, or ``None`` when the rule changes nothing.

    ``args`` are a ``type`` action's (element id, text, press-enter flag). The
    field must be a text-entry element of ``before`` and still be on ``after``
    with the same id, role and name. Without Enter (flag ``0``), every other
    text field of ``before`` still on ``after`` (same id, role and name) holds
    the text it held before: typing writes one field. With Enter the form may
    submit and clear or fill its fields, so the others are left as predicted.
    """
    element_id, text = args[0], " ".join(args[1].split())
    try:
        page = parse_state(before)
        field = page.find(element_id)
        predicted = parse_state(after)
    except StateFormatError:
        return None
    if field is None or field.role not in TEXT_ROLES:
        return None
    target = predicted.find(element_id)
    if target is None or (target.role, target.name) != (field.role, field.name):
        return None
    elements = predicted.elements
    if len(args) > 2 and args[2] == "0":  # no Enter: nothing submits, and typing changes no other field
        others = [flat.element for flat in flatten(page) if flat.element.role in TEXT_ROLES and flat.element.id]
        was = {other.id: (other.role, other.name, other.text) for other in others if other.id != element_id}
        elements = tuple(_keeping_texts(element, was) for element in elements)
    if target.text != text:
        elements = tuple(_replaced(element, replace(target, text=text)) for element in elements)
    return None if elements == predicted.elements else State(elements).render()


def _keeping_texts(element: Element, was: dict[str, tuple[str, str, str]]) -> Element:
    """``element``'s subtree with each text field of the page before (same id, role and name) holding the text it
    held there: typing into one field writes no other."""

    def keep(node: Element) -> Element:
        if node.id in was and was[node.id][:2] == (node.role, node.name) and node.text != was[node.id][2]:
            return replace(node, text=was[node.id][2])
        return node

    return _each(element, keep)


def _each(element: Element, change: Callable[[Element], Element]) -> Element:
    """``element``'s subtree with ``change`` applied to every element, the tree rebuilt only where it changed."""
    element = change(element)
    if not element.children:
        return element
    children = tuple(_each(child, change) for child in element.children)
    return element if children == element.children else replace(element, children=children)


def checked_page(before: str, after: str, args: tuple[str, ...]) -> str | None:
    """The predicted page ``after`` with a clicked check control as a click leaves it, or ``None`` when the rule
    changes nothing.

    ``args`` are a ``click`` action's (element id,). The element must be a
    :data:`CHECK_ROLES` element of ``before``, not disabled, and still be on
    ``after`` with the same id, role and name. A checkbox or a switch is
    checked after the click where it was not before, and not where it was; a
    radio button is checked, and the radio buttons beside it (the same parent's
    children: one group, as a form lays out its choices) are not. Every other
    check control of ``before`` still on ``after`` (same id, role and name) is
    checked as it was before: a browser's click changes no other box (a page
    script that ticks boxes itself, a "select all", is not what this models).
    Where ``after`` dropped check controls of ``before`` but kept every other
    element with an id (the click left the page in place), they are put back
    where they were, the clicked one included: a click removes no box.
    """
    element_id = args[0] if args else ""
    try:
        page = parse_state(before)
        predicted = parse_state(after)
    except StateFormatError:
        return None
    control = page.find(element_id)
    if control is None or control.role not in CHECK_ROLES or "disabled" in control.props:
        return None
    restored = _restoring_checks(page, predicted)
    target = restored.find(element_id)
    if target is None or (target.role, target.name) != (control.role, control.name):
        return None
    was = {flat.element.id: (flat.element.role, flat.element.name, "checked" in flat.element.props)
           for flat in flatten(page) if flat.element.role in CHECK_ROLES and flat.element.id}  # fmt: skip
    elements = tuple(_keeping_checks(element, was) for element in restored.elements)
    if control.role != "radio":
        elements = tuple(_replaced(element, _checked(target, "checked" not in control.props)) for element in elements)
    else:
        elements = _with_radio_checked(elements, element_id)
    return None if elements == predicted.elements else State(elements).render()


def _restoring_checks(before: State, after: State) -> State:
    """``after`` with the check controls of ``before`` it dropped put back where they were, where the click left
    the page in place (every other element of ``before`` with an id is on ``after``); ``after`` as it is where
    the page went elsewhere or a control cannot be put back into a valid page."""
    present = {flat.element.id for flat in flatten(after) if flat.element.id}
    elements = [flat.element for flat in flatten(before) if flat.element.id]
    if any(element.id not in present for element in elements if element.role not in CHECK_ROLES):
        return after
    dropped = [element.id for element in elements if element.role in CHECK_ROLES and element.id not in present]
    if not dropped:
        return after
    old, new = before.render().split("\n"), after.render().split("\n")
    for element_id in dropped:
        at = next(n for n, line in enumerate(old) if _line_id(line) == element_id)
        place = 0
        for anchor in reversed(old[:at]):  # after the nearest line above it that the new page has
            found = [n for n, line in enumerate(new) if (_line_id(line) or line) == (_line_id(anchor) or anchor)]
            if found:
                place = found[0] + 1
                break
        new.insert(place, old[at])
    try:
        return parse_state("\n".join(new))
    except StateFormatError:
        return after


def _line_id(line: str) -> str:
    """The element id a state line starts with (``""`` for a line without one)."""
    body = line.lstrip(" ")
    return body[1 : body.index("]")] if body.startswith("[") and "]" in body else ""


def _keeping_checks(element: Element, was: dict[str, tuple[str, str, bool]]) -> Element:
    """``element``'s subtree with each check control of the page before (same id, role and name) checked as it was
    there: a click changes no check control but the one it clicks and, for a radio button, the ones beside it."""

    def keep(node: Element) -> Element:
        if node.id in was and was[node.id][:2] == (node.role, node.name):
            on = was[node.id][2]
            return _checked(node, on) if on != ("checked" in node.props) else node
        return node

    return _each(element, keep)


def _checked(element: Element, on: bool) -> Element:
    """``element`` with its ``checked`` prop set or cleared (set, it comes first: Playwright's order)."""
    props = tuple(p for p in element.props if p != "checked")
    return replace(element, props=("checked", *props) if on else props)


def _with_radio_checked(elements: tuple[Element, ...], element_id: str) -> tuple[Element, ...]:
    """``elements`` with the radio ``element_id`` checked and its radio siblings unchecked, wherever it is."""
    if any(element.id == element_id for element in elements):
        return tuple(
            _checked(element, element.id == element_id) if element.role == "radio" else element for element in elements
        )
    return tuple(
        replace(element, children=_with_radio_checked(element.children, element_id)) if element.children else element
        for element in elements
    )


def selected_option_page(before: str, after: str, args: tuple[str, ...]) -> str | None:
    """The predicted page ``after`` with the chosen option the list's only selected one, or ``None`` when the rule
    changes nothing.

    ``args`` are a ``select`` action's (element id, option name). The list must
    be a :data:`LIST_ROLES` element of ``before`` and still be on ``after`` with
    the same id, role and name, holding an option of that name (the first such
    option is the one chosen, as a select box chooses).
    """
    element_id, name = args[0], args[1]
    try:
        box = parse_state(before).find(element_id)
        predicted = parse_state(after)
    except StateFormatError:
        return None
    if box is None or box.role not in LIST_ROLES:
        return None
    target = predicted.find(element_id)
    if target is None or (target.role, target.name) != (box.role, box.name):
        return None
    options = [flat.element for flat in flatten(State((target,))) if flat.element.role == "option"]
    chosen = next((option for option in options if option.name == name), None)
    if chosen is None:
        return None
    changed = _selecting(target, chosen)
    if changed == target:
        return None
    return _page_with(predicted, changed)


def _selecting(element: Element, chosen: Element) -> Element:
    """``element``'s subtree with ``chosen`` (by identity) the only option marked selected."""

    def select(node: Element) -> Element:
        if node.role != "option":
            return node
        props = tuple(p for p in node.props if p != "selected")
        if node is chosen:
            at = next((n for n, p in enumerate(props) if not p.startswith(_BEFORE_SELECTED)), len(props))
            props = (*props[:at], "selected", *props[at:])
        return replace(node, props=props) if props != node.props else node

    return _each(element, select)


def _page_with(page: State, new: Element) -> str:
    """``page`` rendered with its element of ``new``'s id replaced by ``new``."""
    return State(tuple(_replaced(element, new) for element in page.elements)).render()


def _replaced(element: Element, new: Element) -> Element:
    if element.id == new.id:
        return new
    if not element.children:
        return element
    return replace(element, children=tuple(_replaced(child, new) for child in element.children))


PageRule = Callable[[str, str, tuple[str, ...]], str | None]
PAGE_RULES: dict[str, tuple[str, PageRule]] = {
    "type": ("typed_text", typed_text_page),
    "select": ("selected_option", selected_option_page),
    "click": ("checked", checked_page),
}
"""The rules that write a page, by the action they follow: each takes (the page before, the predicted page, the
action's arguments) and gives the predicted page with the action's change written, or ``None`` where it changes
nothing; the name is what ``apply_rules`` records."""
