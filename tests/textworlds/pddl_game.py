"""A small ALFWorld-style PDDL game written by hand: what an ALFWorld data folder holds per task, in miniature.

ALFWorld's games are ``game.tw-pddl`` files: JSON with a PDDL domain and problem, and a TextWorld grammar
that names each PDDL action's command and feedback. This one is a kitchen with an apple to put in a
fridge: go to the counter, take the apple, go to the fridge, open it, put the apple in.
"""

from __future__ import annotations

import json
from pathlib import Path

DOMAIN = """
(define (domain kitchen)
  (:requirements :typing)
  (:types place item)
  (:predicates (receptacle ?p - place) (atplace ?p - place) (on ?i - item ?p - place) (holding ?i - item)
               (isopen ?p - place) (inside ?i - item ?p - place))
  (:action goto
    :parameters (?from - place ?to - place)
    :precondition (atplace ?from)
    :effect (and (atplace ?to) (not (atplace ?from))))
  (:action pickup
    :parameters (?i - item ?p - place)
    :precondition (and (atplace ?p) (on ?i ?p))
    :effect (and (holding ?i) (not (on ?i ?p))))
  (:action openit
    :parameters (?p - place)
    :precondition (atplace ?p)
    :effect (isopen ?p))
  (:action putin
    :parameters (?i - item ?p - place)
    :precondition (and (atplace ?p) (holding ?i) (isopen ?p))
    :effect (and (inside ?i ?p) (not (holding ?i)))))
"""

PROBLEM = """
(define (problem apple-in-fridge)
  (:domain kitchen)
  (:objects counter fridge - place apple - item)
  (:init (receptacle counter) (receptacle fridge) (atplace counter) (on apple counter))
  (:goal (inside apple fridge)))
"""

GRAMMAR = '''
grammar :: """
    {
        "intro": [{"rhs": "-= Kitchen =-\\nYou are in a kitchen with a counter and a fridge. #task#"}],
        "task": [{"rhs": "Your task is to: put the apple in the fridge."}],
        "went": [{"rhs": "You arrive there."}],
        "took": [{"rhs": "You pick up the apple."}],
        "opened": [{"rhs": "You open it."}],
        "put": [{"rhs": "You put the apple in the fridge."}]
    }
""";

action goto {
    template :: "go to {to}";
    feedback :: "#went#";
}

action pickup {
    template :: "take {i} from {p}";
    feedback :: "#took#";
}

action openit {
    template :: "open {p}";
    feedback :: "#opened#";
}

action putin {
    template :: "put {i} in {p}";
    feedback :: "#put#";
}
'''

WALKTHROUGH = ("take apple from counter", "go to fridge", "open fridge", "put apple in fridge")


def write_pddl_game(folder: Path) -> Path:
    """Write the game as ``folder/game.tw-pddl`` (ALFWorld's layout: one folder per task); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "game.tw-pddl"
    data = {"pddl_domain": DOMAIN, "pddl_problem": PROBLEM, "grammar": GRAMMAR, "walkthrough": list(WALKTHROUGH)}
    path.write_text(json.dumps(data))
    return path
