"""Per-step outcomes of a teacher-forced run and the figures drawn from them.

A :class:`StepOutcome` is one real step beside one predictor's answer to it
(the model, an ablated model, or a baseline). Everything a report shows about
one-step fidelity is computed from these:

- :func:`breakdown`: :class:`~dreamgym.simulator.FidelitySummary` per site,
  task or step depth (the step's index in its episode, ``10+`` past 9);
- :class:`RewardConfusion`: real reward (1 when >= 0.5) × predicted reward
  (1 when >= 0.5), over usable predictions, with the mean absolute reward
  error — the estimate of the reward error the simulator feeds a policy;
- :class:`DecidingSummary`: on the steps that decide an outcome (the real
  episode ended, or either side paid a reward or ended it:
  :func:`dreamgym.core.outcomes.deciding`), how often the predictor got the
  outcome right, per task — the figure the trainer's trust gate compares with
  ``TrainConfig.sim_trust`` before it lets the simulator play a task;
- :class:`ActionErrorSummary`: on the steps whose real outcome was an action
  error (``last_action_error`` set), how often the predictor said the action
  failed, kept the page, and gave reward 0;
- :func:`worst_cases`: the model's worst usable predictions, and
  :func:`unusable_cases`: steps it gave no usable answer for, with the reason.

A prediction the predictor could not make counts as wrong everywhere (as in
``one_step_fidelity``), except in the confusion matrix and the reward error,
which only a reward can enter; there it is counted in ``failed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from dreamgym.core.outcomes import count_deciding
from dreamgym.core.protocols import Prediction
from dreamgym.core.state import parse_state
from dreamgym.core.types import Step
from dreamgym.render import StepView
from dreamgym.simulator import FidelitySummary, StepScore, score_step, summarise_scores

__all__ = [
    "ActionErrorSummary",
    "DecidingSummary",
    "RewardConfusion",
    "StepOutcome",
    "WorstCase",
    "action_error_summary",
    "breakdown",
    "change_key",
    "deciding_summary",
    "depth_key",
    "outcomes_of",
    "reward_confusion",
    "unusable_cases",
    "worst_cases",
]

MAX_DEPTH_KEY = 10
"""Steps at this index or later share one depth bucket (``10+``)."""
MAX_CASE_CHARS = 4000
"""States in a worst case are cut to this many characters (the report stays small)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOutcome:
    """One real step, one predictor's teacher-forced prediction of it (``None``: no usable answer), its score."""

    step: Step
    prediction: Prediction | None
    score: StepScore
    error: str = ""
    """Why there is no prediction (the model's or the backend's error)."""

    @property
    def real_success(self) -> bool:
        return self.step.reward >= 0.5

    @property
    def predicted_success(self) -> bool:
        return self.prediction is not None and self.prediction.reward >= 0.5


def outcomes_of(
    steps: Sequence[Step], predictions: Sequence[Prediction | None], errors: Sequence[str] = ()
) -> list[StepOutcome]:
    """Pair real steps with their predictions (and the reasons of missing ones) and score each."""
    reasons = list(errors) or [""] * len(steps)
    return [
        StepOutcome(step=step, prediction=prediction, score=score_step(step, prediction), error=error)
        for step, prediction, error in zip(steps, predictions, reasons, strict=True)
    ]


def depth_key(step: Step) -> str:
    """The depth bucket of a step: its index in the episode, ``10+`` from 10 on."""
    return str(step.step_index) if step.step_index < MAX_DEPTH_KEY else f"{MAX_DEPTH_KEY}+"


def change_key(step: Step) -> str:
    """Whether the real page changed: ``"page changed"`` or ``"page unchanged"``.

    The split that says what the "state unchanged" baseline hides: it is right by
    construction on every unchanged page and can never be right on a changed one.
    """
    same = parse_state(step.observation.state) == parse_state(step.next_observation.state)
    return "page unchanged" if same else "page changed"


def breakdown(name: str, outcomes: Iterable[StepOutcome], key: Callable[[Step], str]) -> dict[str, FidelitySummary]:
    """A fidelity summary per group of steps (``key`` names a step's group), groups in sorted order."""
    groups: dict[str, list[StepScore]] = {}
    for outcome in outcomes:
        groups.setdefault(key(outcome.step), []).append(outcome.score)
    order = sorted(groups, key=lambda g: (int(g.rstrip("+")), g) if g.rstrip("+").isdigit() else (-1, g))
    return {group: summarise_scores(name, groups[group]) for group in order}


@dataclass(frozen=True, slots=True, kw_only=True)
class RewardConfusion:
    """Real × predicted success (reward >= 0.5), counted over usable predictions.

    ``true_positive`` is real 1 predicted 1, ``false_negative`` real 1
    predicted 0, ``false_positive`` real 0 predicted 1, ``true_negative`` real
    0 predicted 0. ``failed`` steps had no usable prediction.
    ``mean_abs_error`` is the mean ``|predicted - real|`` reward.
    """

    true_positive: int
    false_negative: int
    false_positive: int
    true_negative: int
    failed: int
    mean_abs_error: float

    @property
    def success_precision(self) -> float:
        """Of the predicted successes, the share that were real (1.0 when none was predicted)."""
        predicted = self.true_positive + self.false_positive
        return self.true_positive / predicted if predicted else 1.0

    @property
    def success_recall(self) -> float:
        """Of the real successes, the share predicted (1.0 when there were none)."""
        real = self.true_positive + self.false_negative
        return self.true_positive / real if real else 1.0

    def as_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "success_precision": round(self.success_precision, 4),
            "success_recall": round(self.success_recall, 4),
        }


def reward_confusion(outcomes: Sequence[StepOutcome]) -> RewardConfusion:
    usable = [o for o in outcomes if o.prediction is not None]
    errors = [abs(o.prediction.reward - o.step.reward) for o in usable if o.prediction is not None]

    def count(real: bool, predicted: bool) -> int:
        return sum(1 for o in usable if o.real_success == real and o.predicted_success == predicted)

    return RewardConfusion(
        true_positive=count(True, True),
        false_negative=count(True, False),
        false_positive=count(False, True),
        true_negative=count(False, False),
        failed=len(outcomes) - len(usable),
        mean_abs_error=round(sum(errors) / len(errors), 4) if errors else 0.0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DecidingSummary:
    """A predictor's outcomes on the deciding steps: ``right`` of ``steps``, and per task (deciding steps, right).

    A step without a usable prediction counts as a prediction of reward 0 and
    no end (it decides only if the real step does) and as wrong.
    """

    steps: int
    right: int
    by_task: dict[str, tuple[int, int]]

    @property
    def accuracy(self) -> float:
        return self.right / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "right": self.right,
            "accuracy": round(self.accuracy, 4),
            "by_task": {
                task: {"steps": n, "right": right, "accuracy": round(right / n, 4) if n else 0.0}
                for task, (n, right) in self.by_task.items()
            },
        }


def deciding_summary(outcomes: Iterable[StepOutcome]) -> DecidingSummary:
    """Count the deciding steps among ``outcomes`` and those whose outcome the predictor got right, per task."""
    by_task = count_deciding(
        (o.step, (o.prediction.reward, o.prediction.terminated) if o.prediction is not None else None) for o in outcomes
    )
    return DecidingSummary(
        steps=sum(n for n, _ in by_task.values()), right=sum(r for _, r in by_task.values()), by_task=by_task
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionErrorSummary:
    """How a predictor handles actions that really failed (the real next page carries an action error).

    Shares over the ``n`` such steps; a step without a usable prediction
    counts as not handled.
    """

    n: int
    predicted_error: float
    """Predicted an action error too."""
    predicted_unchanged: float
    """Predicted the page unchanged."""
    predicted_reward_zero: float
    """Predicted reward < 0.5."""
    failures: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def action_error_summary(outcomes: Sequence[StepOutcome]) -> ActionErrorSummary:
    pairs = [
        (o.step, o.prediction)
        for o in outcomes
        if o.step.next_observation.last_action_error and o.prediction is not None
    ]
    n = sum(1 for o in outcomes if o.step.next_observation.last_action_error)

    def share(values: Iterable[bool]) -> float:
        return round(sum(values) / n, 4) if n else 0.0

    return ActionErrorSummary(
        n=n,
        predicted_error=share(bool(p.observation.last_action_error) for _, p in pairs),
        predicted_unchanged=share(p.observation.state == step.observation.state for step, p in pairs),
        predicted_reward_zero=share(p.reward < 0.5 for _, p in pairs),
        failures=n - len(pairs),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorstCase(StepView):
    """One badly predicted step as a report's step box shows it (each page cut to ``MAX_CASE_CHARS``), with its
    episode. ``predicted_state`` is empty and ``error`` says why when the model gave no usable answer (then
    ``raw`` says what it gave, if anything)."""

    episode_id: str


def worst_cases(outcomes: Sequence[StepOutcome], count: int, *, per_task: int = 2) -> list[WorstCase]:
    """The ``count`` worst usable predictions, at most ``per_task`` from one task, one per (page, action).

    Badness: the lowest sum of similarity, element F1, reward right and end
    right; perfect predictions are never chosen. Unusable answers are listed
    apart (:func:`unusable_cases`): they have no page to compare.
    """

    def goodness(outcome: StepOutcome) -> float:
        s = outcome.score
        return s.similarity + s.f1 + s.reward_correct + s.done_correct

    usable = [o for o in outcomes if o.prediction is not None and goodness(o) < 4.0]
    return _pick(sorted(usable, key=goodness), count, per_task)


def unusable_cases(outcomes: Sequence[StepOutcome], count: int, *, per_task: int = 1) -> list[WorstCase]:
    """Up to ``count`` steps without a usable prediction, at most ``per_task`` from one task, with the reason."""
    return _pick([o for o in outcomes if o.prediction is None], count, per_task)


def _pick(ranked: Sequence[StepOutcome], count: int, per_task: int) -> list[WorstCase]:
    chosen: list[WorstCase] = []
    taken: dict[str, int] = {}
    seen: set[tuple[str, str, str]] = set()  # a demonstrator and an explorer often share a first step
    for outcome in ranked:
        if len(chosen) >= count:
            break
        step = outcome.step
        key = (step.task_id, step.observation.state, str(step.action))
        if taken.get(step.task_id, 0) >= per_task or key in seen:
            continue
        taken[step.task_id] = taken.get(step.task_id, 0) + 1
        seen.add(key)
        chosen.append(_case(outcome))
    return chosen


def _case(outcome: StepOutcome) -> WorstCase:
    step, prediction = outcome.step, outcome.prediction
    return WorstCase(
        task_id=step.task_id,
        seed=step.seed,
        episode_id=step.episode_id,
        step_index=step.step_index,
        goal=step.observation.goal,
        action=str(step.action),
        state=step.observation.state[:MAX_CASE_CHARS],
        real_state=step.next_observation.state[:MAX_CASE_CHARS],
        predicted_state=prediction.observation.state[:MAX_CASE_CHARS] if prediction else "",
        real_reward=step.reward,
        predicted_reward=prediction.reward if prediction else None,
        real_done=step.terminated,
        predicted_done=prediction.terminated if prediction else None,
        real_error=step.next_observation.last_action_error,
        predicted_error=prediction.observation.last_action_error if prediction else "",
        similarity=round(outcome.score.similarity, 4),
        f1=round(outcome.score.f1, 4),
        raw=prediction.raw[:MAX_CASE_CHARS] if prediction else "",
        error=outcome.error[:MAX_CASE_CHARS],
    )
