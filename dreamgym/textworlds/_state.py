"""A text world's moment in ``core``'s abstract state format: the decision, and the pure functions that make it.

Decision: a text observation *is* a state of :mod:`dreamgym.core.state`, one element per line, so the
experience model, the policies, retrieval, the fidelity metrics and the viewer read it without knowing the
side. The game's text becomes static elements; its admissible commands become buttons; a text box takes a
typed command::

    heading "Kitchen"
    paragraph: You see a fridge.
    paragraph: The fridge contains a block of cheese.
    region "feedback": You take the block of cheese from the fridge.
    region "inventory": You are carrying: a block of cheese.
    region "score": 1 of 3
    [cmd] textbox "command"
    list "commands"
      [c1] button "close fridge"
      [c2] button "eat block of cheese"

- The room's name (TextWorld's ``-= Kitchen =-``) is the heading; each **sentence** of the room's
  description is a ``paragraph`` line (``lines="paragraph"``: each paragraph whole); the game's answer to the
  last command, the inventory and the score are regions (each joined into one line, whitespace collapsed).
  Sentence lines because a step changes one sentence of a room (taking the cheese rewrites "The fridge
  contains ..."), and the experience model writes a step as a diff of lines: with a paragraph per line it
  must copy the whole description twice (removed, then added with the one change) for one changed
  sentence. On 255 steps of 20 ``COOKING_FAMILY`` games (walkthrough and random;
  ``benchmarks/probes/textworld_lines.py``) its answers took 0.62 times the tokens (median 107 against
  168, longest 343 against 567; 4 were past its 512-token answer budget, none now), the pages 1.1 times.
- Every admissible command is a ``button`` named by its text. Ids are episode-local and given in order of
  first appearance (``c1``, ``c2``, ...), as the bridge numbers a page's elements: a command keeps its id
  for the whole episode, the same game and commands give the same observation, and a model that meets a
  new command writes the next free id (fidelity matches elements by role and name, never by id).
- Actions stay ``core``'s: ``click [c2]`` sends the command the button names (choosers see it as
  ``click [c2] "eat block of cheese"``, :func:`~dreamgym.core.actions.candidate_actions`), and
  ``type [cmd] [open the fridge]`` sends any text, which is how a chat policy types a command. Every
  other web action comes back as ``last_action_error``.
- The candidate actions of the next state are part of the state the experience model predicts (the
  ``list "commands"``), not derived by a rule; :func:`command_f1` scores a prediction's commands against
  the game's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from dreamgym.core.state import Element, State, flatten, parse_state, render_state

__all__ = [
    "COMMAND_BOX",
    "DESCRIPTION_LINES",
    "CommandIds",
    "DescriptionLines",
    "TextFrame",
    "clean_game_text",
    "command_f1",
    "render_text_state",
    "state_commands",
]

COMMAND_BOX = "cmd"
"""The id of the text box a typed command goes into (``type [cmd] [open fridge]``)."""

DescriptionLines = Literal["sentence", "paragraph"]
"""How a room's description is cut into ``paragraph`` lines: a line per sentence (the default) or per
paragraph."""
DESCRIPTION_LINES: tuple[DescriptionLines, ...] = ("sentence", "paragraph")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
"""Where one sentence ends and the next begins: after ``.``, ``!`` or ``?``, before a capital or a quote."""
_ROOM = re.compile(r"^-=\s*(?P<room>.+?)\s*=-$")
_PROMPT = re.compile(r"^>", re.MULTILINE)
_GAME_OVER = re.compile(r"\bWould you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command\?.*", re.S)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextFrame:
    """What a text world shows at one moment, as the game gives it (cleaned by :func:`clean_game_text`)."""

    description: str = ""
    """The room: TextWorld's ``look`` text (``-= Room =-`` then paragraphs)."""
    feedback: str = ""
    """The game's answer to the last command; empty at an episode's start."""
    inventory: str = ""
    score: int | None = None
    max_score: int | None = None
    commands: tuple[str, ...] = ()
    """The admissible commands, in the game's order."""


@dataclass(slots=True)
class CommandIds:
    """Episode-local ids of commands, in order of first appearance (``c1``, ``c2``, ...)."""

    ids: dict[str, str] = field(default_factory=dict)

    def id_of(self, command: str) -> str:
        known = self.ids.get(command)
        if known is None:
            known = self.ids[command] = f"c{len(self.ids) + 1}"
        return known

    def command_of(self, element_id: str) -> str | None:
        """The command an id was given to, or ``None``."""
        return next((command for command, known in self.ids.items() if known == element_id), None)


def clean_game_text(text: str | None) -> str:
    """A game's raw output without its prompt, status line and end-of-game menu; lines kept, spaces collapsed.

    Example:
        >>> clean_game_text("\\nYou take the apple.\\n\\n>  -= Kitchen =-0/2")
        'You take the apple.'
    """
    if not text:
        return ""
    prompt = _PROMPT.search(text)
    if prompt is not None:
        text = text[: prompt.start()]
    text = _GAME_OVER.sub("", text)
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _paragraphs(text: str) -> list[str]:
    return [" ".join(part.split()) for part in re.split(r"\n\s*\n|\n", text) if part.strip()]


def sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences, in order (a sentence ends at ``.``, ``!`` or ``?`` before a capital or a quote).

    Example:
        >>> sentences("You see a fridge. Empty! What's that? A stove (3rd Ed.) and more.")
        ['You see a fridge.', 'Empty!', "What's that?", 'A stove (3rd Ed.) and more.']
    """
    return [part for part in _SENTENCE_END.split(paragraph) if part]


def _room_elements(description: str, lines: DescriptionLines) -> Iterable[Element]:
    for paragraph in _paragraphs(description):
        room = _ROOM.match(paragraph)
        if room is not None:
            yield Element(role="heading", name=room["room"])
            continue
        for line in sentences(paragraph) if lines == "sentence" else [paragraph]:
            yield Element(role="paragraph", text=line)


def _region(name: str, text: str) -> Sequence[Element]:
    joined = " ".join(_paragraphs(text))
    return [Element(role="region", name=name, text=joined)] if joined else []


def render_text_state(frame: TextFrame, ids: CommandIds, *, lines: DescriptionLines = "sentence") -> str:
    """The abstract state of ``frame`` (see the module docstring); gives new commands their ids in ``ids``.
    ``lines``: the room's description a line per sentence or per paragraph.

    Example:
        >>> print(render_text_state(TextFrame(description="-= Attic =-", commands=("look",)), CommandIds()))
        heading "Attic"
        [cmd] textbox "command"
        list "commands"
          [c1] button "look"
    """
    elements: list[Element] = [*_room_elements(frame.description, lines)]
    elements += _region("feedback", frame.feedback)
    elements += _region("inventory", frame.inventory)
    if frame.score is not None and frame.max_score:
        elements.append(Element(role="region", name="score", text=f"{frame.score} of {frame.max_score}"))
    elements.append(Element(role="textbox", name="command", id=COMMAND_BOX))
    buttons = tuple(Element(role="button", name=command, id=ids.id_of(command)) for command in frame.commands)
    elements.append(Element(role="list", name="commands", children=buttons))
    return render_state(State(tuple(elements)))


def state_commands(state: str | State) -> frozenset[str]:
    """The commands a text-world state lists (its buttons' names), real or predicted.

    Raises:
        StateFormatError: ``state`` is text outside the state grammar.
    """
    parsed = parse_state(state) if isinstance(state, str) else state
    return frozenset(f.element.name for f in flatten(parsed) if f.element.role == "button" and f.element.name)


def command_f1(predicted: str | State, real: str | State) -> float:
    """F1 of the commands a predicted state lists against those the game admits in the real one.

    The experience model writes the next state's commands itself (they are part of the state it
    predicts); this is how close it comes. Two states with no commands agree fully (1.0).

    Example:
        >>> command_f1('list "commands"\\n  [c1] button "look"', 'list "commands"\\n  [c1] button "look"')
        1.0
    """
    guessed, admitted = state_commands(predicted), state_commands(real)
    if not guessed and not admitted:
        return 1.0
    hits = len(guessed & admitted)
    return 2 * hits / (len(guessed) + len(admitted))
