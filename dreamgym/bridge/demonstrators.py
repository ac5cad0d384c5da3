"""Scripted demonstrators for MiniWoB++ tasks: rules that read the goal and the state.

Each rule looks only at the current observation (the goal and the abstract
state), so it recovers when an action did not have the expected effect, and
returns one action in the text of ``core.actions``. Tests use them to prove
the success path of the bridge; later issues use them to seed real data.
They cover clicking, typing, selecting, logging in, scrolling text and
searching (see :data:`DEMONSTRATORS`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence

from dreamgym.core.actions import parse_action
from dreamgym.core.protocols import PolicyDecision
from dreamgym.core.state import Element, State, flatten, parse_state
from dreamgym.core.types import Action, Observation, Step, Task

__all__ = ["DEMONSTRATORS", "MiniWobDemonstrator", "NearMissDemonstrator", "demonstrate", "mistaken_goal"]

Rule = Callable[[str, State, Sequence[Action]], str]
"""(goal, state, the episode's earlier actions) -> the next action's text."""


def _elements(state: State, role: str | None = None) -> list[Element]:
    return [f.element for f in flatten(state) if f.element.id and (role is None or f.element.role == role)]


def _named(state: State, role: str, name: str) -> Element | None:
    return next((e for e in _elements(state, role) if e.name == name), None)


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def _click(element: Element | None) -> str:
    """A click that carries the element's name as its label, so history can tell what was clicked."""
    if element is None:
        return "scroll [down]"
    label = element.name or element.text
    return f"click [{element.id}] {json.dumps(label)}" if label else f"click [{element.id}]"


def _submit(state: State, text: str = "Submit") -> str:
    return _click(next((e for e in _elements(state, "button") if e.name.lower() == text.lower()), None))


def _fill_then_submit(state: State, fields: Sequence[tuple[Element, str]], button: str = "Submit") -> str:
    for field, value in fields:
        if field.text != value:
            return f"type [{field.id}] [{value}] [0]"
    return _submit(state, button)


def click_button(goal: str, state: State, history: Sequence[Action]) -> str:
    quoted = _quoted(goal)
    name = quoted[0] if quoted else goal.removeprefix("Click button ").rstrip(".")
    return _click(_named(state, "button", name))


def click_test(goal: str, state: State, history: Sequence[Action]) -> str:
    return _click(_elements(state, "button")[0])


def click_tab(goal: str, state: State, history: Sequence[Action]) -> str:
    number = re.search(r"Tab #(\d+)", goal)
    return _click(_named(state, "link", f"Tab #{number.group(1)}") if number else None)


def click_dialog(goal: str, state: State, history: Sequence[Action]) -> str:
    return _click(_named(state, "button", "Close"))


def focus_text(goal: str, state: State, history: Sequence[Action]) -> str:
    return _click(_elements(state, "textbox")[0])


def enter_text(goal: str, state: State, history: Sequence[Action]) -> str:
    return _fill_then_submit(state, [(_elements(state, "textbox")[0], _quoted(goal)[0])])


def enter_text_2(goal: str, state: State, history: Sequence[Action]) -> str:
    word = _quoted(goal)[0]
    value = word.lower() if "lower case" in goal else word.upper()
    return _fill_then_submit(state, [(_elements(state, "textbox")[0], value)])


def enter_password(goal: str, state: State, history: Sequence[Action]) -> str:
    password = _quoted(goal)[0]
    return _fill_then_submit(state, [(box, password) for box in _elements(state, "textbox")])


def login_user(goal: str, state: State, history: Sequence[Action]) -> str:
    user, password = _quoted(goal)[:2]
    username, secret = _elements(state, "textbox")[:2]
    return _fill_then_submit(state, [(username, user), (secret, password)], button="Login")


def choose_list(goal: str, state: State, history: Sequence[Action]) -> str:
    choice = re.search(r"Select (.+?) from the list", goal)
    box = _elements(state, "combobox")[0]
    selected = next((c.name for c in box.children if "selected" in c.props), "")
    if choice and selected != choice.group(1):
        return f"select [{box.id}] [{choice.group(1)}]"
    return _submit(state)


def _wanted(goal: str) -> list[str]:
    match = re.search(r"Select (.*?) and click Submit", goal)
    if match is None or match.group(1) == "nothing":
        return []
    return [w.strip() for w in match.group(1).split(",") if w.strip()]


def click_checkboxes(goal: str, state: State, history: Sequence[Action]) -> str:
    wanted = set(_wanted(goal))
    for box in _elements(state, "checkbox"):
        if (box.name in wanted) != ("checked" in box.props):
            return _click(box)
    return _submit(state)


def click_option(goal: str, state: State, history: Sequence[Action]) -> str:
    wanted = _wanted(goal)
    target = _named(state, "radio", wanted[0]) if wanted else None
    if target is not None and "checked" not in target.props:
        return _click(target)
    return _submit(state)


def click_button_sequence(goal: str, state: State, history: Sequence[Action]) -> str:
    clicked_one = any(a.label == "ONE" for a in history)
    return _click(_named(state, "button", "TWO" if clicked_one else "ONE"))


def simple_arithmetic(goal: str, state: State, history: Sequence[Action]) -> str:
    problem = next((e.text for e in _elements(state, "generic") if e.text.endswith("=")), "")
    match = re.fullmatch(r"(-?\d+) ([+\-x*]) (-?\d+) =", problem)
    if match is None:
        return "scroll [down]"
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    return _fill_then_submit(state, [(_elements(state, "textbox")[0], str(answer))])


def scroll_text(goal: str, state: State, history: Sequence[Action]) -> str:
    area, answer_box = _elements(state, "textbox")[:2]
    words = re.findall(r"[A-Za-z]+", area.text)
    word = words[-1] if "last word" in goal else words[0]
    return _fill_then_submit(state, [(answer_box, word)])


def click_collapsible(goal: str, state: State, history: Sequence[Action]) -> str:
    header = next((e for e in _elements(state, "tab") if e.name.startswith("Section")), None)
    if header is not None and "expanded" not in header.props and "selected" not in header.props:
        return _click(header)
    return _submit(state)


def search_engine(goal: str, state: State, history: Sequence[Action]) -> str:
    query = _quoted(goal)[0]
    rank = re.search(r"(\d+)(?:st|nd|rd|th) search result", goal)
    box = _elements(state, "textbox")[0]
    if not any(a.label == "Search" for a in history):
        return f"type [{box.id}] [{query}] [0]" if box.text != query else _submit(state, "Search")
    page, index = divmod(int(rank.group(1)) - 1 if rank else 0, 3)  # three results a page
    links = _elements(state, "link")
    if page and not any(a.label.isdigit() for a in history):
        return _click(next((e for e in links if e.name == str(page + 1)), None))
    results = [e for e in links if not re.fullmatch(r"\d+|[<>]", e.name)]
    return _click(results[index] if index < len(results) else None)


DEMONSTRATORS: dict[str, Rule] = {
    "click-button": click_button,
    "click-test": click_test,
    "click-test-2": click_button,
    "click-button-sequence": click_button_sequence,
    "click-tab": click_tab,
    "click-dialog": click_dialog,
    "click-collapsible-nodelay": click_collapsible,
    "focus-text": focus_text,
    "enter-text": enter_text,
    "enter-text-2": enter_text_2,
    "enter-password": enter_password,
    "login-user": login_user,
    "choose-list": choose_list,
    "click-checkboxes": click_checkboxes,
    "click-option": click_option,
    "simple-arithmetic": simple_arithmetic,
    "scroll-text": scroll_text,
    "search-engine": search_engine,
}
"""Task name → rule. Kinds: click, type, select, login, scroll (text areas), search."""


def demonstrate(task_name: str, goal: str, state_text: str, history: Sequence[Action] = ()) -> str:
    """The demonstrator's next action (text) for a MiniWoB task.

    Raises:
        KeyError: No demonstrator for this task.
    """
    return DEMONSTRATORS[task_name](goal, parse_state(state_text), history)


class MiniWobDemonstrator:
    """The demonstrators as a :class:`~dreamgym.core.protocols.Policy` (no token records)."""

    policy_id = "miniwob-demonstrator"

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        name = task.task_id.removeprefix("miniwob/")
        history_actions = [step.action for step in history]
        text = demonstrate(name, observation.goal or task.instruction, observation.state, history_actions)
        return PolicyDecision(action=parse_action(text))


class NearMissDemonstrator:
    """The demonstrator following a goal that is wrong in one detail: near misses, failures that look like successes.

    At an episode's first step it changes one thing the goal names: a quoted
    text gets one character wrong, or a named choice (a checkbox, a radio
    button, a tab...) becomes another choice of the same kind on the page.
    Then it plays the demonstrator's rule on that goal to the end, Submit
    included. These are the failures a policy cloned from the demonstrator
    makes, and the ones an experience model must tell from a success by their
    detail (a random explorer seldom fills a form and submits it). A goal
    with nothing to change is played as it is. Deterministic for a ``seed``.
    """

    policy_id = "near-miss-demonstrator"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)
        self._mistaken = ("", "")  # (the episode's goal, the goal it plays instead)

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        goal = observation.goal or task.instruction
        if not history or self._mistaken[0] != goal:
            self._mistaken = (goal, mistaken_goal(goal, parse_state(observation.state), self.rng))
        name = task.task_id.removeprefix("miniwob/")
        text = demonstrate(name, self._mistaken[1], observation.state, [step.action for step in history])
        return PolicyDecision(action=parse_action(text))


def mistaken_goal(goal: str, state: State, rng: random.Random) -> str:
    """``goal`` with one named detail changed (see :class:`NearMissDemonstrator`); ``goal`` if it names none."""
    quoted = [q for q in _quoted(goal) if q]
    if quoted:
        wrong = rng.choice(quoted)
        last = "x" if wrong[-1] != "x" else "y"
        return goal.replace(f'"{wrong}"', f'"{wrong[:-1]}{last}"', 1)
    choices = [e for e in _elements(state) if e.name and e.role not in ("button", "generic", "text")]
    named = [e for e in choices if re.search(rf"(?<!\w){re.escape(e.name)}(?!\w)", goal)]
    if not named:
        return goal
    target = rng.choice(named)
    others = sorted({e.name for e in choices if e.role == target.role and e.name not in goal})
    if not others:
        return goal
    return re.sub(rf"(?<!\w){re.escape(target.name)}(?!\w)", rng.choice(others), goal, count=1)
