"""The simulator's rules: what a prediction must say whatever the model wrote, as the real side would.

Every predictor's answer passes through :func:`apply_rules`, in
:class:`~dreamgym.simulator.SimulatedEnv` and in teacher-forced fidelity alike,
so a simulator is scored as it runs. Two rules:

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

A rule that changes a prediction is recorded in ``info["rules"]`` of the
simulated step (``SimulatedEnv``) and counted in its stats.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec

from dreamgym.core.errors import StateFormatError
from dreamgym.core.protocols import ExperienceQuery, Prediction
from dreamgym.core.state import Element, State, parse_state

__all__ = ["TEXT_ROLES", "apply_rules", "typed_text_page"]

TEXT_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
"""Roles whose element text is the field's content (what ``type`` writes)."""


def apply_rules(query: ExperienceQuery, prediction: Prediction) -> tuple[Prediction, tuple[str, ...]]:
    """``prediction`` with the simulator's rules applied, and the names of the rules that changed it."""
    applied: list[str] = []
    if query.action.name == "type":
        page = typed_text_page(query.observation.state, prediction.observation.state, query.action.args)
        if page is not None:
            observation = msgspec.structs.replace(prediction.observation, state=page)
            prediction = replace(prediction, observation=observation)
            applied.append("typed_text")
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
    return State(tuple(_with_text(element, element_id, text) for element in predicted.elements)).render()


def _with_text(element: Element, element_id: str, text: str) -> Element:
    if element.id == element_id:
        return replace(element, text=text)
    if not element.children:
        return element
    return replace(element, children=tuple(_with_text(child, element_id, text) for child in element.children))
