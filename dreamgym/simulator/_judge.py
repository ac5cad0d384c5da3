"""The outcome judge: a small learned classifier that says whether an action wins, loses or leaves the episode running.

The experience model writes the next page and, after it, a reward and an end.
A model small enough to train on a CPU in a minute gets the page right far
more often than the outcome: whether a Submit pays depends on comparing the
goal's strings with the page's field values and selections, strings it has
never seen (random names, passwords). No amount of 1.5k examples teaches a
1M-parameter model trained from scratch to compare unseen strings letter by
letter. The judge does the comparing with task-agnostic features, and learns
from real transitions what the comparisons mean:

- the action (its kind, its element's role, whether the goal names the element,
  whether a checkable element is checked already);
- the page's selections: checked or selected elements the goal names, ones it
  does not name, and named ones left unchecked;
- the page's text fields: the goal's quoted strings held by a field, quoted
  strings no field holds, fields holding something else, and whether a field's
  label (its name, or the text just before it) is among the words that come
  just before the quoted string it holds in the goal (``the password "yA"``).

Nothing here names a task, a site or a goal template: the features say what a
form control shows on any page, and which of them decide what, and how, is
learnt (:func:`fit_judge`) from the store's real steps, class-balanced
(continue / end without reward / end with reward). The judge sees the page the
action was taken on (in a synthetic episode, the simulator's own page), which is
what a real form's submit reads.

A judge is saved beside its experience model (:data:`JUDGE_FILE`) and
:func:`dreamgym.simulator.load_experience_model` loads it: the model's reward
and end are then the judge's (``LLMExperienceModel.judge``), and its
``model_id`` names both.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from dreamgym.core.errors import ConfigError, StateFormatError
from dreamgym.core.protocols import ReplayStore
from dreamgym.core.state import State, flatten, parse_state
from dreamgym.core.types import Action, Step
from dreamgym.simulator._rules import TEXT_ROLES

__all__ = [
    "FEATURES",
    "JUDGE_FILE",
    "OUTCOMES",
    "OutcomeJudge",
    "fit_judge",
    "fit_store_judge",
    "outcome_features",
    "outcome_label",
]

JUDGE_FILE = "outcome_judge.json"
"""The judge's file in an experience model's directory."""

OUTCOMES = ("continue", "lose", "win")
"""The judge's classes: the episode goes on; it ends without reward; it ends with reward (>= 0.5)."""

CHECKABLE_ROLES = frozenset({"checkbox", "radio", "switch", "option", "menuitemcheckbox", "menuitemradio", "treeitem"})
"""Roles whose ``[checked]`` / ``[selected]`` prop is a selection the goal may ask for."""
_ON = ("checked", "selected", "checked=true", "pressed", "pressed=true")
_CONTEXT_WORDS = 3
"""Words of the goal just before a quoted string that may name the field it goes into."""
_WORD = re.compile(r"[a-z0-9]+")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”")

FEATURES = (
    "bias",
    "click",
    "type",
    "select",
    "stop",
    "other_action",
    "target_missing",
    "target_button",
    "target_checkable",
    "target_text",
    "target_link",
    "target_named",
    "target_checked",
    "selected_named",
    "selected_unnamed",
    "unselected_named",
    "selections_right",
    "selections_agree",
    "selections_most_agree",
    "quoted",
    "quoted_missing",
    "fields_quoted",
    "fields_other",
    "fields_empty",
    "fields_label_right",
    "fields_label_wrong",
    "fields_right",
    "stop_answer_quoted",
)
"""The features' names, in order (a saved judge records them; a judge saved with others is refused)."""


def outcome_label(step: Step) -> int:
    """A real step's class in :data:`OUTCOMES`."""
    if step.reward >= 0.5:
        return 2
    return 1 if step.terminated else 0


def _mentions(goal: str, text: str) -> bool:
    """Whether ``text`` occurs in ``goal`` as a whole phrase (case-insensitive, not inside a longer word)."""
    needle = text.strip().lower()
    if not needle:
        return False
    return re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])", goal.lower()) is not None


def _quoted(goal: str) -> list[tuple[str, set[str]]]:
    """The goal's quoted strings, each with the words just before it."""
    found = []
    for match in _QUOTED.finditer(goal):
        value = match.group(1) if match.group(1) is not None else match.group(2)
        context = _WORD.findall(goal[: match.start()].lower())[-_CONTEXT_WORDS:]
        found.append((value, set(context)))
    return found


def _is_on(props: Sequence[str]) -> bool:
    return any(prop in _ON for prop in props)


def outcome_features(goal: str, state: str | State, action: Action) -> npt.NDArray[np.float32]:
    """The judge's features of ``action`` taken on the page ``state`` under ``goal`` (see :data:`FEATURES`).

    A page that does not parse is read as an empty page.
    """
    if isinstance(state, str):
        try:
            state = parse_state(state)
        except StateFormatError:
            state = State()
    flat = flatten(state)
    labels: dict[int, str] = {}
    last_text = ""
    for item in flat:
        element = item.element
        if not element.id and element.text:
            last_text = element.text
        elif element.role in TEXT_ROLES:
            labels[item.index] = element.name or last_text
    quoted = _quoted(goal)
    values = [value for value, _ in quoted]
    selected_named = selected_unnamed = unselected_named = selectable = 0
    fields_quoted = fields_other = fields_empty = label_right = label_wrong = 0
    held: set[str] = set()
    target = None
    target_id = action.args[0] if action.name in ("click", "type", "select", "hover") and action.args else ""
    for item in flat:
        element = item.element
        if target_id and element.id == target_id:
            target = element
        if element.role in CHECKABLE_ROLES:
            named = _mentions(goal, element.name)
            on = _is_on(element.props)
            selectable += 1
            selected_named += on and named
            selected_unnamed += on and not named
            unselected_named += (not on) and named
        elif element.role in TEXT_ROLES:
            value = element.text
            if not value:
                fields_empty += 1
                continue
            matches = [context for quoted_value, context in quoted if quoted_value == value]
            if not matches:
                fields_other += 1
                continue
            fields_quoted += 1
            held.add(value)
            words = set(_WORD.findall(labels.get(item.index, "").lower()))
            if words:
                right = any(words & context for context in matches)
                label_right += right
                label_wrong += not right
    missing = sum(value not in held for value in set(values))
    # the share of the page's selectable controls that agree with the goal (on iff it names them): a grader may
    # pay a selection that is mostly right, and a linear judge needs the majority as a feature of its own
    agree = 1.0 - (selected_unnamed + unselected_named) / selectable if selectable else 1.0
    kind = action.name
    role = target.role if target is not None else ""
    answer = action.args[0] if kind == "stop" and action.args else ""
    row = {
        "bias": 1.0,
        "click": kind == "click",
        "type": kind == "type",
        "select": kind == "select",
        "stop": kind == "stop",
        "other_action": kind not in ("click", "type", "select", "stop"),
        "target_missing": bool(target_id) and target is None,
        "target_button": role in ("button", "menuitem"),
        "target_checkable": role in CHECKABLE_ROLES,
        "target_text": role in TEXT_ROLES,
        "target_link": role == "link",
        "target_named": target is not None and _mentions(goal, target.name),
        "target_checked": target is not None and _is_on(target.props),
        "selected_named": min(selected_named, 5) / 5,
        "selected_unnamed": min(selected_unnamed, 5) / 5,
        "unselected_named": min(unselected_named, 5) / 5,
        "selections_right": selected_unnamed == 0 and unselected_named == 0,
        "selections_agree": agree,
        "selections_most_agree": selectable > 0 and agree > 0.5,
        "quoted": min(len(values), 5) / 5,
        "quoted_missing": min(missing, 5) / 5,
        "fields_quoted": min(fields_quoted, 5) / 5,
        "fields_other": min(fields_other, 5) / 5,
        "fields_empty": min(fields_empty, 5) / 5,
        "fields_label_right": min(label_right, 5) / 5,
        "fields_label_wrong": min(label_wrong, 5) / 5,
        "fields_right": missing == 0 and fields_other == 0 and label_wrong == 0,
        "stop_answer_quoted": bool(answer) and any(answer.strip() == value for value in values),
    }
    return np.array([float(row[name]) for name in FEATURES], dtype=np.float32)


@dataclass(frozen=True, slots=True)
class OutcomeJudge:
    """A multinomial logistic regression over :data:`FEATURES` into :data:`OUTCOMES`.

    Example:
        >>> judge = fit_judge(real_steps)
        >>> reward, end = judge.outcome(goal, page, action)
    """

    weights: npt.NDArray[np.float32]
    """``(len(FEATURES), len(OUTCOMES))``."""
    trained_on: int = 0
    """Real steps it was fit on."""
    win_threshold: float = 0.5
    """P(win) from which the judge pays the step."""

    @property
    def judge_id(self) -> str:
        """A short hash of the weights and the threshold: names the judge in the model's id."""
        digest = hashlib.sha256(np.ascontiguousarray(self.weights, dtype=np.float32).tobytes())
        digest.update(repr(self.win_threshold).encode())
        return digest.hexdigest()[:12]

    def probabilities(self, goal: str, state: str | State, action: Action) -> npt.NDArray[np.float64]:
        """P(continue), P(lose), P(win) for ``action`` on ``state`` under ``goal``."""
        logits = outcome_features(goal, state, action)[None, :] @ self.weights
        return np.asarray(_softmax(logits)[0], dtype=np.float64)

    def outcome(self, goal: str, state: str | State, action: Action) -> tuple[float, bool]:
        """(reward, end): reward 1 and an end where P(win) reaches ``win_threshold``, else reward 0 and an end
        where P(lose) is above P(continue)."""
        p = self.probabilities(goal, state, action)
        if p[2] >= self.win_threshold:
            return 1.0, True
        return 0.0, bool(p[1] > p[0])

    def save(self, directory: Path) -> Path:
        """Write the judge into ``directory`` (:data:`JUDGE_FILE`); returns the file."""
        path = Path(directory) / JUDGE_FILE
        payload = {
            "version": 1,
            "features": list(FEATURES),
            "outcomes": list(OUTCOMES),
            "weights": self.weights.round(6).tolist(),
            "trained_on": self.trained_on,
            "win_threshold": self.win_threshold,
        }
        path.write_text(json.dumps(payload, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: Path) -> OutcomeJudge | None:
        """The judge saved in ``directory``, or ``None`` where there is none.

        Raises:
            ConfigError: The file is not a judge this version reads (other features, a broken file).
        """
        path = Path(directory) / JUDGE_FILE
        if not path.is_file():
            return None
        try:
            payload = json.loads(path.read_text())
            weights = np.array(payload["weights"], dtype=np.float32)
            features, outcomes = tuple(payload["features"]), tuple(payload["outcomes"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path} is not a readable outcome judge ({exc}); delete it or fit it again") from exc
        if features != FEATURES or outcomes != OUTCOMES or weights.shape != (len(FEATURES), len(OUTCOMES)):
            raise ConfigError(
                f"{path} was fit on other features than this dreamgym computes; fit it again "
                "(dreamgym sim judge --store STORE --model DIR)"
            )
        return cls(weights, int(payload.get("trained_on", 0)), float(payload.get("win_threshold", 0.5)))


def _softmax(logits: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
    shifted = np.asarray(logits, dtype=np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return np.asarray(exp / exp.sum(axis=1, keepdims=True), dtype=np.float64)


def fit_judge(
    steps: Sequence[Step], *, l2: float = 1e-3, iterations: int = 3000, learning_rate: float = 0.1
) -> OutcomeJudge:
    """Fit a judge on real ``steps`` (their goal, page, action and outcome), each class weighed alike.

    Full-batch gradient descent with Adam on the class-balanced cross-entropy plus an L2 penalty: deterministic,
    a second on a CPU for thousands of steps.

    Raises:
        ConfigError: ``steps`` hold no real step, or no step that ends an episode.
    """
    real = [step for step in steps if step.source == "real"]
    if not real:
        raise ConfigError("the outcome judge needs real steps to learn from; collect some first")
    labels = np.array([outcome_label(step) for step in real])
    if not (labels > 0).any():
        raise ConfigError("the outcome judge needs real steps that end an episode; none of these does")
    x = np.stack([outcome_features(s.observation.goal or s.task_id, s.observation.state, s.action) for s in real])
    counts = np.bincount(labels, minlength=len(OUTCOMES)).astype(np.float64)
    present = counts > 0
    weight_of = np.where(present, len(real) / (present.sum() * np.maximum(counts, 1)), 0.0)
    sample_weights = weight_of[labels] / len(real)
    target = np.eye(len(OUTCOMES))[labels]
    w = np.zeros((x.shape[1], len(OUTCOMES)))
    m, v = np.zeros_like(w), np.zeros_like(w)
    x64 = x.astype(np.float64)
    for t in range(1, iterations + 1):
        p = _softmax(x64 @ w)
        grad = x64.T @ ((p - target) * sample_weights[:, None]) + l2 * w
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        w -= learning_rate * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return OutcomeJudge(w.astype(np.float32), trained_on=len(real))


async def fit_store_judge(
    store: ReplayStore,
    *,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    exclude_episodes: Sequence[str] = (),
) -> OutcomeJudge:
    """:func:`fit_judge` on every real step of ``store`` outside the held-out (task, seed) pairs (``None`` seed:
    every seed of the task) and the ``exclude_episodes``, in a worker thread.

    Raises:
        ConfigError: The store holds no real step to learn from, or cannot list its steps.
    """
    from dreamgym.simulator._sft import real_episodes

    held, left_out = set(exclude_task_seeds), set(exclude_episodes)
    steps = [
        step
        for episode in await real_episodes(store)
        for step in episode
        if (step.task_id, step.seed) not in held
        and (step.task_id, None) not in held
        and step.episode_id not in left_out
    ]
    return await anyio.to_thread.run_sync(fit_judge, steps)
