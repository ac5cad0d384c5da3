"""The action's element shown under one fixed id, so that a small model need not copy an id to name it.

A page's element ids are labels, and the element an action works on is the
one a step's diff almost always writes first. To write its line the model
must copy the id from the action (``click [e5]`` → ``- [e5] ...``); a model
trained from scratch on a few hundred steps does not learn that copy. On
the demo's checkbox task, teacher-forced on 150 validation steps
(``benchmarks/probes/acted_element.py``), two builds of the demo-size model
(two layers) wrote the clicked box in 26 of the 110 and 26 of the 111 first
answers that wrote a line, another box in the rest: no better than a guess
among the page's boxes. Builds with more epochs, a third layer, a wider
model, word-sized tokens or permuted ids did no better. Trained and asked
with the clicked element shown as ``[e0]``, two builds of the same model
wrote it in 94 of 94 and 122 of 122: what was a copy became a constant.

:class:`Alias` swaps two ids everywhere an id is written (``[id]`` tokens in
the page, the diffs, the action's element, the focus, an action error): the
action's element and :data:`TARGET_ALIAS`. A swap is its own inverse and a
permutation of the page's ids, so an answer written against the shown page
reads back, swapped again, as an answer against the page itself, and no id
is lost or doubled (a page that has an ``e0`` of its own shows it under the
target's id). The history shows the same pages, so it takes the same swap; a
retrieved transition is another page, so it takes its own (its action's
element as ``[e0]``): every transition the prompt shows writes the element
acted on the same way. An action that names no element of the page (a
scroll, an id the page lacks) swaps nothing.

The switch is :attr:`~dreamgym.simulator.TemplateConfig.target_alias`; the
template renders the swapped query, the experience model keeps its decoding
to the shown page's lines and reads its answer back through the swap, and
SFT examples write their answers against the shown page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

import msgspec

from dreamgym.core.actions import ELEMENT_ACTIONS
from dreamgym.core.protocols import ExperienceQuery, Neighbour
from dreamgym.core.types import Action, Observation, Step

__all__ = ["TARGET_ALIAS", "Alias", "alias_for", "aliased_query", "element_line"]

TARGET_ALIAS = "e0"
"""The id the action's element is shown under (the bridge numbers elements from ``e1``)."""


@dataclass(frozen=True, slots=True)
class Alias:
    """A swap of ``target`` and :data:`TARGET_ALIAS` wherever an element id is written; ``target=""``: none."""

    target: str = ""

    def id(self, element_id: str) -> str:
        """The id ``element_id`` is shown under."""
        if not self.target:
            return element_id
        return {self.target: TARGET_ALIAS, TARGET_ALIAS: self.target}.get(element_id, element_id)

    def text(self, text: str) -> str:
        """``text`` with every ``[id]`` token of the two ids swapped (a page, a diff, an answer)."""
        if not self.target or self.target == TARGET_ALIAS or "[" not in text:
            return text
        return _tokens(self.target).sub(lambda match: f"[{self.id(match.group(1))}]", text)

    def observation(self, observation: Observation) -> Observation:
        if not self.target:
            return observation
        return msgspec.structs.replace(
            observation,
            state=self.text(observation.state),
            focused_id=self.id(observation.focused_id),
            last_action_error=self.text(observation.last_action_error),
        )

    def action(self, action: Action) -> Action:
        if not self.target:
            return action
        if action.is_invalid:
            return msgspec.structs.replace(action, raw=self.text(action.raw))
        if action.name in ELEMENT_ACTIONS and action.args:
            return msgspec.structs.replace(action, args=(self.id(action.args[0]), *action.args[1:]))
        return action

    def step(self, step: Step) -> Step:
        return msgspec.structs.replace(
            step,
            observation=self.observation(step.observation),
            action=self.action(step.action),
            next_observation=self.observation(step.next_observation),
        )


def alias_for(observation: Observation, action: Action) -> Alias:
    """The swap that shows ``action``'s element as :data:`TARGET_ALIAS`: none where the action names no element
    of the page."""
    if action.name not in ELEMENT_ACTIONS or not action.args or element_line(observation.state, action.args[0]) is None:
        return Alias()
    return Alias(action.args[0])


def element_line(state: str, element_id: str) -> str | None:
    """The line of ``state`` that writes the element ``element_id``, as the page writes it (indent and all), or
    ``None`` where the page has no such element."""
    opening = f"[{element_id}]"
    return next((line for line in state.split("\n") if line.lstrip(" ").startswith(opening)), None)


def aliased_query(query: ExperienceQuery) -> tuple[ExperienceQuery, Alias]:
    """``query`` as the model is shown it, and the swap that reads its answer back (the same swap)."""
    alias = alias_for(query.observation, query.action)
    shown = replace(
        query,
        observation=alias.observation(query.observation),
        action=alias.action(query.action),
        history=tuple((alias.observation(before), alias.action(action)) for before, action in query.history),
        neighbours=tuple(map(_neighbour, query.neighbours)),
    )
    return shown, alias


@lru_cache(maxsize=256)
def _tokens(target: str) -> re.Pattern[str]:
    """The ``[id]`` tokens of ``target`` and :data:`TARGET_ALIAS` (a longer id is never read as a shorter one)."""
    return re.compile(r"\[(" + "|".join(re.escape(i) for i in (target, TARGET_ALIAS)) + r")\]")


def _neighbour(neighbour: Neighbour) -> Neighbour:
    """A retrieved transition with its own action's element as :data:`TARGET_ALIAS`."""
    return replace(neighbour, step=alias_for(neighbour.step.observation, neighbour.step.action).step(neighbour.step))
