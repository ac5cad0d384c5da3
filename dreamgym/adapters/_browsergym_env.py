"""BrowserGym's observation dicts for dreamgym observations, and ``BrowserGymEnv``, which speaks BrowserGym.

:func:`browsergym_observation` builds the dict a BrowserGym environment
returns, with an ``axtree_object`` (Chrome's accessibility tree, as
``Accessibility.getFullAXTree`` gives it) built from dreamgym's abstract state,
so that BrowserGym's ``flatten_axtree_to_str`` renders the page and an
AgentLab-style agent's preprocessing runs unchanged. :class:`BrowserGymEnv`
wraps a :class:`~dreamgym.adapters.WebEnv`, real or simulated: its ``step``
takes BrowserGym action strings (:func:`~dreamgym.adapters.from_browsergym`)
and its observations are those dicts. Nothing here imports BrowserGym.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import gymnasium
import numpy as np
from gymnasium import spaces

from dreamgym.adapters._browsergym import from_browsergym
from dreamgym.adapters._gymnasium import MAX_ACTION_CHARS, MAX_TEXT_CHARS, UnicodeText, WebEnv
from dreamgym.core.actions import CLICKABLE_ROLES, SELECT_ROLES, TEXT_ROLES
from dreamgym.core.errors import ConfigError
from dreamgym.core.state import Element, State, flatten, parse_state
from dreamgym.core.types import Action, Observation

__all__ = ["BROWSERGYM_OBSERVATION_KEYS", "BrowserGymEnv", "browsergym_observation"]

BROWSERGYM_OBSERVATION_KEYS = (
    "chat_messages",
    "goal",
    "goal_object",
    "open_pages_urls",
    "open_pages_titles",
    "active_page_index",
    "url",
    "screenshot",
    "dom_object",
    "axtree_object",
    "extra_element_properties",
    "focused_element_bid",
    "last_action",
    "last_action_error",
    "elapsed_time",
)
"""The keys of every observation :func:`browsergym_observation` builds: BrowserGym's, in its order."""


def browsergym_observation(observation: Observation, *, goal: str, last_action: str = "") -> dict[str, Any]:
    """BrowserGym's observation dict for a dreamgym observation (keys: :data:`BROWSERGYM_OBSERVATION_KEYS`).

    - ``goal``, ``goal_object`` (``({"type": "text", "text": goal},)``) and
      ``chat_messages`` (the goal as the user's one message, timestamp 0).
    - ``url``; ``open_pages_titles`` are the observation's tabs,
      ``active_page_index`` the active one; dreamgym knows only the active
      tab's URL, so the other ``open_pages_urls`` are empty.
    - ``axtree_object``: the abstract state as Chrome's accessibility tree,
      which ``flatten_axtree_to_str`` renders: a ``RootWebArea`` named after
      the active tab, one node per element with its id as ``browsergym_id``,
      its props as properties (``checked``, ``selected``, ``level=2``...),
      the focused element ``focused``, a text field's text as its value and
      other elements' text as a ``StaticText`` child. BrowserGym hides the
      bid of an unnamed ``generic`` element without props (its text still
      shows), as it does on live pages.
    - ``extra_element_properties``: every element visible, in the set of
      marks, clickable when its role or ``cursor=pointer`` says so, and
      without a bounding box, so BrowserGym's visibility and set-of-marks
      filters keep every element with an id (its filters drop elements
      without a bid, such as a list's options, on live pages too).
    - ``focused_element_bid``, ``last_action`` (as given), ``last_action_error``.
    - What dreamgym does not capture: ``screenshot`` is ``None``;
      ``dom_object`` a DOM snapshot of one empty document, so that
      ``flatten_dom_to_str`` and ``prune_html`` run and give no HTML;
      ``elapsed_time`` is 0 (equal runs give equal observations).

    Raises:
        StateFormatError: ``observation.state`` is not in the state format.
    """
    tabs = observation.tabs or ("",)
    active = min(max(observation.active_tab, 0), len(tabs) - 1)
    state = parse_state(observation.state)
    return {
        "chat_messages": ({"role": "user", "timestamp": 0.0, "message": goal},),
        "goal": goal,
        "goal_object": ({"type": "text", "text": goal},),
        "open_pages_urls": tuple(observation.url if index == active else "" for index in range(len(tabs))),
        "open_pages_titles": tabs,
        "active_page_index": np.asarray([active]),
        "url": observation.url,
        "screenshot": None,
        "dom_object": _empty_dom(observation.url, tabs[active]),
        "axtree_object": _axtree(state, title=tabs[active], focused_id=observation.focused_id),
        "extra_element_properties": _extra_properties(state),
        "focused_element_bid": observation.focused_id,
        "last_action": last_action,
        "last_action_error": observation.last_action_error,
        "elapsed_time": np.asarray([0.0]),
    }


_VALUE_ROLES = frozenset(TEXT_ROLES | {"slider"})
"""Roles whose text is their value (what a field holds), not content shown as static text."""
_TRISTATE = frozenset({"checked", "pressed"})
"""Props that Chrome reports as ``"true"``/``"false"``/``"mixed"`` rather than booleans."""
_CLICKABLE = CLICKABLE_ROLES | TEXT_ROLES | SELECT_ROLES
"""Roles whose elements count as clickable (as in :func:`~dreamgym.core.actions.candidate_actions`, plus fields)."""


def _axtree(state: State, *, title: str, focused_id: str) -> dict[str, Any]:
    """``{"nodes": [...]}`` in ``Accessibility.getFullAXTree``'s shape, the root first, children in order."""
    nodes: list[dict[str, Any]] = []

    def add(role: str, name: str, parent: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
        node = {
            "nodeId": str(len(nodes)),
            "ignored": False,
            "role": {"type": "role", "value": role},
            "name": {"type": "computedString", "value": name},
            "properties": [],
            "childIds": [],
            **fields,
        }
        if parent is not None:
            node["parentId"] = parent["nodeId"]
            parent["childIds"].append(node["nodeId"])
        nodes.append(node)
        return node

    def walk(element: Element, parent: dict[str, Any]) -> None:
        if element.role == "text" and not element.id and not element.children:  # a text node: `text: Username`
            add("StaticText", element.text or element.name, parent)
            return
        fields: dict[str, Any] = {"properties": [_property(prop) for prop in element.props]}
        if element.id:
            fields["browsergym_id"] = element.id
            if element.id == focused_id:
                fields["properties"].append({"name": "focused", "value": {"type": "boolean", "value": True}})
        if element.text and element.role in _VALUE_ROLES:
            fields["value"] = {"type": "string", "value": element.text}
        node = add(element.role, element.name, parent, **fields)
        if element.text and element.role not in _VALUE_ROLES:
            add("StaticText", element.text, node)
        for child in element.children:
            walk(child, node)

    root = add("RootWebArea", title, None)
    for element in state.elements:
        walk(element, root)
    return {"nodes": nodes}


def _property(prop: str) -> dict[str, Any]:
    name, has_value, text = prop.partition("=")
    value: Any
    if not has_value:
        kind, value = ("tristate", "true") if name in _TRISTATE else ("boolean", True)
    elif text.isdigit():
        kind, value = "integer", int(text)
    else:
        kind, value = ("tristate" if name in _TRISTATE else "token"), text
    return {"name": name, "value": {"type": kind, "value": value}}


def _extra_properties(state: State) -> dict[str, dict[str, Any]]:
    """Per bid, what BrowserGym reads from the rendered page: the state holds what the page shows, so all is visible."""
    extra = {}
    for flat in flatten(state):
        element = flat.element
        if element.id:
            clickable = element.role in _CLICKABLE or "cursor=pointer" in element.props
            extra[element.id] = {"visibility": 1.0, "bbox": None, "clickable": clickable, "set_of_marks": True}
    return extra


def _empty_dom(url: str, title: str) -> dict[str, Any]:
    """``DOMSnapshot.captureSnapshot``'s shape with one document and no element in it."""
    nodes = {
        "parentIndex": [-1],
        "nodeType": [9],
        "nodeName": [0],
        "nodeValue": [-1],
        "backendNodeId": [1],
        "attributes": [[]],
        "contentDocumentIndex": {"index": [], "value": []},
        "isClickable": {"index": []},
    }
    layout = {"nodeIndex": [], "bounds": [], "clientRects": [], "text": [], "stackingContexts": {"index": []}}
    document = {
        "documentURL": 1,
        "title": 2,
        "nodes": nodes,
        "layout": layout,
        "textBoxes": {"layoutIndex": [], "bounds": [], "start": [], "length": []},
        "scrollOffsetX": 0,
        "scrollOffsetY": 0,
    }
    return {"documents": [document], "strings": ["#document", url, title]}


# --------------------------------------------------------------------------- the wrapper


class _AnyOf(spaces.Space[Any]):
    """Every value of some Python types: BrowserGym's ``AnyDict`` and ``Anything`` spaces, for its dicts."""

    def __init__(self, *types: type) -> None:
        super().__init__()
        self.types = types

    def contains(self, x: Any) -> bool:
        return isinstance(x, self.types)

    def __repr__(self) -> str:
        return f"AnyOf({', '.join(kind.__name__ for kind in self.types)})"


def _observation_space() -> spaces.Dict:
    text = UnicodeText(MAX_TEXT_CHARS)
    texts = spaces.Sequence(text, stack=False)
    return spaces.Dict(
        {
            "chat_messages": _AnyOf(tuple),
            "goal": text,
            "goal_object": _AnyOf(tuple),
            "open_pages_urls": texts,
            "open_pages_titles": texts,
            "active_page_index": spaces.Box(0, 255, shape=(1,), dtype=np.int64),
            "url": text,
            "screenshot": _AnyOf(type(None)),
            "dom_object": _AnyOf(dict),
            "axtree_object": _AnyOf(dict),
            "extra_element_properties": _AnyOf(dict),
            "focused_element_bid": text,
            "last_action": text,
            "last_action_error": text,
            "elapsed_time": spaces.Box(0, np.inf, shape=(1,), dtype=np.float64),
        }
    )


class BrowserGymEnv(gymnasium.Wrapper[dict[str, Any], str, dict[str, str], Any]):
    """A :class:`~dreamgym.adapters.WebEnv`, real or simulated, that BrowserGym agents drive unchanged.

    ``step`` takes BrowserGym action strings (translated by
    :func:`from_browsergym`; what dreamgym cannot do comes back as
    ``last_action_error``) and observations are BrowserGym dicts
    (:func:`browsergym_observation`). Rewards, ``terminated``, ``truncated``
    and ``info`` are the wrapped env's; ``info["action"]`` is the action as
    dreamgym carried it out (``click [e3]``, or the string when it was invalid).

    Args:
        env: A ``WebEnv``, or a wrapper of one (what ``gymnasium.make`` returns
            for the ``dreamgym/...`` ids).

    Raises:
        ConfigError: ``env`` is not a ``WebEnv`` underneath.

    Example:
        >>> env = BrowserGymEnv(gymnasium.make("dreamgym/miniwob.click-button-v0"))
        >>> observation, info = env.reset(seed=0)
        >>> text = flatten_axtree_to_str(observation["axtree_object"])
        >>> observation, reward, terminated, truncated, info = env.step("click('e3')")
    """

    def __init__(self, env: gymnasium.Env[dict[str, str], Any]) -> None:
        web_env = env.unwrapped
        if not isinstance(web_env, WebEnv):
            raise ConfigError(
                "BrowserGymEnv wraps a dreamgym WebEnv (e.g. gymnasium.make('dreamgym/miniwob.click-button-v0')), "
                f"not {type(web_env).__name__}"
            )
        super().__init__(env)
        self.observation_space = _observation_space()
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self._web_env: WebEnv = web_env
        self._last_action = ""

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode as the wrapped env does (same ``seed`` and ``options``)."""
        observation, info = self.env.reset(seed=seed, options=dict(options) if options is not None else None)
        self._last_action = ""
        return self._observation(observation), info

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Carry out one BrowserGym action string.

        Raises:
            ConfigError: ``action`` is not a string.
        """
        if not isinstance(action, str):
            raise ConfigError(f"BrowserGymEnv actions are strings such as \"click('e5')\", not {type(action).__name__}")
        # gymnasium types Wrapper.env with the wrapper's own types; the WebEnv underneath takes Action records
        inner = cast(gymnasium.Env[dict[str, str], str | Action], self.env)
        observation, reward, terminated, truncated, info = inner.step(from_browsergym(action))
        self._last_action = action
        return self._observation(observation), float(reward), terminated, truncated, info

    def _observation(self, observation: dict[str, str]) -> dict[str, Any]:
        return browsergym_observation(
            self._web_env.last_observation, goal=observation["goal"], last_action=self._last_action
        )
