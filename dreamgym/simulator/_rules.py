"""The simulator's rules: what a prediction must say whatever the model wrote, as the real side would.

Every predictor's answer passes through :func:`apply_rules`, in
:class:`~dreamgym.simulator.SimulatedEnv` and in teacher-forced fidelity alike,
so a simulator is scored as it runs. Three rules:

- ``stop`` ends the episode (the model still predicts its reward).
- A ``type`` action leaves its text in the field it typed into. ``type``
  replaces a field's content (``core.actions``), so where the predicted page
  still has that field (same id, role and name, a text-entry role), its text
  becomes the typed text. A page the action led away from (no such field) is
  left as the model wrote it. A tiny model trained from scratch predicts the
  field changed but rarely copies a name it has never seen letter by letter;
  without this rule its synthetic episodes type the wrong text and never
  succeed. Real pages agree: ``tests/bridge/test_miniwob.py`` checks that
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

A rule that changes a prediction is recorded in ``info["rules"]`` of the
simulated step (``SimulatedEnv``) and counted in its stats.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec

from dreamgym.core.errors import StateFormatError
from dreamgym.core.protocols import ExperienceQuery, Prediction
from dreamgym.core.state import Element, State, flatten, parse_state

__all__ = ["LIST_ROLES", "TEXT_ROLES", "apply_rules", "selected_option_page", "typed_text_page"]

TEXT_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
"""Roles whose element text is the field's content (what ``type`` writes)."""
LIST_ROLES = frozenset({"combobox", "listbox"})
"""Roles of the lists ``select`` chooses from (a select box, single or multiple)."""
_BEFORE_SELECTED = ("checked", "disabled", "expanded", "level=", "pressed")
"""Props an accessibility snapshot writes before ``selected`` (Playwright's order); the rest come after it."""


def apply_rules(query: ExperienceQuery, prediction: Prediction) -> tuple[Prediction, tuple[str, ...]]:
    """``prediction`` with the simulator's rules applied, and the names of the rules that changed it."""
    applied: list[str] = []
    if query.action.name == "type":
        page = typed_text_page(query.observation.state, prediction.observation.state, query.action.args)
        if page is not None:
            observation = msgspec.structs.replace(prediction.observation, state=page)
            prediction = replace(prediction, observation=observation)
            applied.append("typed_text")
    if query.action.name == "select":
        page = selected_option_page(query.observation.state, prediction.observation.state, query.action.args)
        if page is not None:
            observation = msgspec.structs.replace(prediction.observation, state=page)
            prediction = replace(prediction, observation=observation)
            applied.append("selected_option")
    if query.action.name == "stop" and not prediction.terminated:
        prediction = replace(prediction, terminated=True)
        applied.append("stop_ends")
    return prediction, tuple(applied)


def typed_text_page(before: str, after: str, args: tuple[str, ...]) -> str | None:
    """The predicted page ``after`` with the typed text in its field, or ``None`` when the rule changes nothing.

    ``args`` are a ``type`` action's (element id, text, press-enter flag). The
    field must be a text-entry element of ``before`` and still be on ``after``
    with the same id, role and name.
    """
    element_id, text = args[0], " ".join(args[1].split())
    try:
        field = parse_state(before).find(element_id)
        predicted = parse_state(after)
    except StateFormatError:
        return None
    if field is None or field.role not in TEXT_ROLES:
        return None
    target = predicted.find(element_id)
    if target is None or (target.role, target.name) != (field.role, field.name) or target.text == text:
        return None
    return _page_with(predicted, replace(target, text=text))


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
    if element.role == "option":
        props = tuple(p for p in element.props if p != "selected")
        if element is chosen:
            at = next((n for n, p in enumerate(props) if not p.startswith(_BEFORE_SELECTED)), len(props))
            props = (*props[:at], "selected", *props[at:])
        element = replace(element, props=props) if props != element.props else element
    if not element.children:
        return element
    return replace(element, children=tuple(_selecting(child, chosen) for child in element.children))


def _page_with(page: State, new: Element) -> str:
    """``page`` rendered with its element of ``new``'s id replaced by ``new``."""
    return State(tuple(_replaced(element, new) for element in page.elements)).render()


def _replaced(element: Element, new: Element) -> Element:
    if element.id == new.id:
        return new
    if not element.children:
        return element
    return replace(element, children=tuple(_replaced(child, new) for child in element.children))
