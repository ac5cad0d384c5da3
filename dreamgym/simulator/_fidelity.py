"""One-step (teacher-forced) fidelity of an experience model against real transitions.

For each real step, the model gets the task, the real history, the real state
and the real action, and its prediction is compared with what really
happened. Two baselines are scored on the same steps with the same
retrieval: ``copy_top_retrieved`` (the nearest real transition's next state,
reward and end, its diff replayed onto the current page when it applies) and
``unchanged`` (the page stays, reward 0, the episode goes on). A simulator
that does not beat both is not simulating. Both baselines are experience
models themselves (:class:`CopyTopRetrieved`, :class:`UnchangedPage`), so the
same code scores them teacher-forced and runs them open loop in a
``SimulatedEnv``. Every predictor, model or baseline, is held to the
simulator's rules (``_rules``: ``stop`` ends the episode, typed text stays in
its field), so a simulator is scored as it runs.

Scores per step (in ``core``'s state format):

- reward correct: ``|predicted - real| <= 0.5`` (rewards are outcome rewards in [0, 1]);
- done correct: the predicted end equals the real ``terminated``;
- element precision / recall / F1: elements matched by role, name and
  ancestry (:func:`~dreamgym.core.state.match_elements`, ids ignored) that also
  agree in text and properties, over predicted / real elements;
- hallucination: predicted elements with no real element of that role and name;
- similarity: ``difflib`` ratio between the rendered line lists.

A prediction the model could not make (malformed after retries, a backend
error) scores zero everywhere and is counted in ``failures``.

Leakage rule: retrieval for a step excludes its own episode and every pair in
``exclude_task_seeds`` (pass every held-out (task, seed)).

The parts, for callers that need per-step results (``dreamgym.validate``):
:func:`teacher_forced_queries` builds the queries (with retrieval),
:func:`predict_steps` asks a model for each, :func:`score_prediction` and
:func:`summarise_scores` score and average.
"""

from __future__ import annotations

import contextlib
import difflib
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio
import msgspec

from dreamgym.core.errors import BackendError, ModelOutputError, StateFormatError
from dreamgym.core.progress import Phase, progress
from dreamgym.core.protocols import ExperienceModel, ExperienceQuery, Neighbour, Prediction, ReplayStore
from dreamgym.core.state import State, apply_diff, flatten, lean_diff, match_elements, parse_state
from dreamgym.core.types import Observation, Step, Task
from dreamgym.replay.embedders import transition_text
from dreamgym.simulator._retrieval import embed_queries
from dreamgym.simulator._rules import apply_rules

__all__ = [
    "BASELINES",
    "CopyTopRetrieved",
    "FidelitySummary",
    "StepPredictions",
    "StepScore",
    "UnchangedPage",
    "one_step_fidelity",
    "predict_steps",
    "score_prediction",
    "score_step",
    "summarise_scores",
    "teacher_forced_queries",
    "without_salvaged",
]

BASELINES = ("copy_top_retrieved", "unchanged")
"""Names of the two baselines, as keys of every fidelity result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepScore:
    """How one predicted transition compares with the real one."""

    reward_correct: bool
    done_correct: bool
    exact: bool
    similarity: float
    precision: float
    recall: float
    f1: float
    hallucination: float
    failed: bool = False
    salvaged: bool = False
    """The model's answer was salvaged (kept in part after every attempt was malformed)."""


FAILED = StepScore(
    reward_correct=False, done_correct=False, exact=False, similarity=0.0, precision=0.0, recall=0.0, f1=0.0,
    hallucination=0.0, failed=True,
)  # fmt: skip


def score_prediction(real: Step, state: State | str, reward: float, done: bool) -> StepScore:
    """Score a predicted next state, reward and end against a real step."""
    predicted = state if isinstance(state, State) else parse_state(state)
    actual = parse_state(real.next_observation.state)
    predicted_flat, actual_flat = flatten(predicted), flatten(actual)
    matches = match_elements(predicted, actual)
    correct = sum(
        1
        for m in matches
        if predicted_flat[m.left].element.text == actual_flat[m.right].element.text
        and predicted_flat[m.left].element.props == actual_flat[m.right].element.props
    )
    precision = correct / len(predicted_flat) if predicted_flat else float(not actual_flat)
    recall = correct / len(actual_flat) if actual_flat else float(not predicted_flat)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    real_keys = {flat.key for flat in actual_flat}
    invented = sum(1 for flat in predicted_flat if flat.key not in real_keys)
    lines_a, lines_b = predicted.render().split("\n"), actual.render().split("\n")
    return StepScore(
        reward_correct=abs(reward - real.reward) <= 0.5,
        done_correct=done == real.terminated,
        exact=predicted == actual,
        similarity=difflib.SequenceMatcher(None, lines_a, lines_b, autojunk=False).ratio(),
        precision=precision,
        recall=recall,
        f1=f1,
        hallucination=invented / len(predicted_flat) if predicted_flat else 0.0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FidelitySummary:
    """Mean scores over ``n`` steps (failed predictions count as zero), with timings."""

    name: str
    n: int
    reward_accuracy: float
    done_accuracy: float
    exact_match: float
    similarity: float
    precision: float
    recall: float
    f1: float
    hallucination_rate: float
    failures: int
    seconds_per_step: float = 0.0
    salvaged: int = 0
    """Steps whose prediction was a salvaged answer (scored as it is; see ``without_salvaged``)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def summarise_scores(name: str, scores: Sequence[StepScore], seconds: float = 0.0) -> FidelitySummary:
    """Mean of each score over ``scores``; hallucination over the usable predictions only."""

    def mean(values: Sequence[float]) -> float:
        return round(statistics.fmean(values), 4) if values else 0.0

    return FidelitySummary(
        name=name,
        n=len(scores),
        reward_accuracy=mean([float(s.reward_correct) for s in scores]),
        done_accuracy=mean([float(s.done_correct) for s in scores]),
        exact_match=mean([float(s.exact) for s in scores]),
        similarity=mean([s.similarity for s in scores]),
        precision=mean([s.precision for s in scores]),
        recall=mean([s.recall for s in scores]),
        f1=mean([s.f1 for s in scores]),
        hallucination_rate=mean([s.hallucination for s in scores if not s.failed]),
        failures=sum(s.failed for s in scores),
        salvaged=sum(s.salvaged for s in scores),
        seconds_per_step=round(seconds / len(scores), 4) if scores else 0.0,
    )


async def one_step_fidelity(
    model: ExperienceModel | None,
    steps: Sequence[Step],
    *,
    store: ReplayStore | None,
    neighbours: int = 3,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    concurrency: int = 8,
) -> dict[str, FidelitySummary]:
    """Teacher-forced scores of ``model`` (if given) and the two baselines on real ``steps``.

    ``steps`` should be whole episodes (the history of a step is the steps of
    its episode before it). Returns summaries keyed ``model``,
    ``copy_top_retrieved`` and ``unchanged``, and ``model_without_salvaged``
    when some of the model's answers were salvaged.
    """
    queries = await teacher_forced_queries(
        steps, store=store, neighbours=neighbours, exclude_task_seeds=exclude_task_seeds
    )
    predictors: dict[str, ExperienceModel] = {"model": model} if model is not None else {}
    predictors.update(copy_top_retrieved=CopyTopRetrieved(), unchanged=UnchangedPage())
    results = {}
    for name, predictor in predictors.items():
        made = await predict_steps(predictor, queries, concurrency=concurrency)
        scores = [score_step(step, prediction) for (step, _), prediction in zip(queries, made.predictions, strict=True)]
        results[name] = summarise_scores(name, scores, made.seconds if name == "model" else 0.0)
        if (clean := without_salvaged(results[name], scores)) is not None:
            results[clean.name] = clean
    return results


async def teacher_forced_queries(
    steps: Sequence[Step],
    *,
    store: ReplayStore | None,
    neighbours: int = 3,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    exclude_own_seed: bool = False,
    exclude_episodes: Sequence[str] = (),
) -> list[tuple[Step, ExperienceQuery]]:
    """One query per real step: its task, its episode's real history, its state and action, and retrieval.

    Steps are grouped by episode and ordered by step index (the history of a
    step is the steps of its episode before it). Retrieval returns real
    transitions of the step's site, never its own episode nor a pair of
    ``exclude_task_seeds``; with ``exclude_own_seed``, nor a transition of the
    step's own (task, seed) (another episode from the same start page, where
    the store holds several), nor one of ``exclude_episodes``.
    """
    by_episode: dict[str, list[Step]] = {}
    for step in steps:
        by_episode.setdefault(step.episode_id, []).append(step)
    ordered: list[tuple[list[Step], Step]] = []
    for episode in by_episode.values():
        episode.sort(key=lambda s: s.step_index)
        ordered.extend((episode, step) for step in episode)
    goals = [step.observation.goal or step.task_id for _, step in ordered]
    vectors: Sequence[Any] = ()
    if store is not None and neighbours:
        texts = [
            transition_text(goal, str(step.action), step.observation.state)
            for goal, (_, step) in zip(goals, ordered, strict=True)
        ]
        vectors = await embed_queries(store, texts)
    queries: list[tuple[Step, ExperienceQuery]] = []
    for row, ((episode, step), goal) in enumerate(zip(ordered, goals, strict=True)):
        found: tuple[Neighbour, ...] = ()
        if store is not None and neighbours:
            found = tuple(
                await store.nearest(
                    vectors[row], neighbours, source="real", site=step.site or None,
                    exclude_episodes=(step.episode_id, *exclude_episodes),
                    exclude_task_seeds=(*exclude_task_seeds, (step.task_id, step.seed)) if exclude_own_seed
                    else exclude_task_seeds,
                )
            )  # fmt: skip
        task = Task(task_id=step.task_id, instruction=goal, site=step.site)
        history = tuple((s.observation, s.action) for s in episode if s.step_index < step.step_index)
        queries.append((step, ExperienceQuery(
            task=task, history=history, observation=step.observation, action=step.action, neighbours=found,
            seed=step.seed,
        )))  # fmt: skip
    return queries


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPredictions:
    """What :func:`predict_steps` returns: a prediction per query, or why there is none, and the time taken."""

    predictions: list[Prediction | None]
    """``None`` where the model gave no usable answer."""
    errors: list[str]
    """Why each missing prediction is missing (the model's or the backend's error); ``""`` elsewhere."""
    seconds: float


async def predict_steps(
    model: ExperienceModel,
    queries: Sequence[tuple[Step, ExperienceQuery]],
    *,
    concurrency: int = 8,
    what: str = "predict real steps",
) -> StepPredictions:
    """The model's prediction for each query, with up to ``concurrency`` in flight at once.

    Each prediction is held to the simulator's rules, as in :class:`~dreamgym.simulator.SimulatedEnv`.
    Reported as the progress phase ``what`` (predictions made, unusable ones).
    """
    predictions: list[Prediction | None] = [None] * len(queries)
    errors = [""] * len(queries)
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(n: int, query: ExperienceQuery, phase: Phase) -> None:
        async with limiter:
            try:
                prediction = await model.predict(query)
            except (ModelOutputError, BackendError) as exc:
                errors[n] = str(exc) or type(exc).__name__
                phase.advance(note=f"{sum(map(bool, errors))} unusable")
                return
        predictions[n], _ = apply_rules(query, prediction)
        phase.advance()

    started = time.perf_counter()
    with progress(what, total=len(queries), unit="steps") as phase:
        async with anyio.create_task_group() as group:
            for n, (_, query) in enumerate(queries):
                group.start_soon(one, n, query, phase)
    return StepPredictions(predictions=predictions, errors=errors, seconds=time.perf_counter() - started)


def score_step(real: Step, prediction: Prediction | None) -> StepScore:
    """:func:`score_prediction` of a model's prediction; no prediction scores zero everywhere (``failed``)."""
    if prediction is None:
        return FAILED
    score = score_prediction(real, prediction.observation.state, prediction.reward, prediction.terminated)
    return replace(score, salvaged=True) if prediction.salvaged else score


def without_salvaged(summary: FidelitySummary, scores: Sequence[StepScore]) -> FidelitySummary | None:
    """The same figures over the steps whose prediction was not salvaged, named ``<name>_without_salvaged``;
    ``None`` when nothing was salvaged (the figures would be the same)."""
    if not summary.salvaged:
        return None
    return summarise_scores(f"{summary.name}_without_salvaged", [s for s in scores if not s.salvaged])


class UnchangedPage:
    """The "state unchanged" baseline as an experience model: the page stays, reward 0, the episode goes on."""

    model_id = "baseline:unchanged"

    async def predict(self, query: ExperienceQuery) -> Prediction:
        return Prediction(observation=query.observation, reward=0.0, terminated=False, model_id=self.model_id)

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        raise ModelOutputError("the unchanged-page baseline cannot write a first page; start from a real one")


class CopyTopRetrieved:
    """The "copy top retrieved next state" baseline as an experience model.

    The nearest retrieved real transition's change (as the lean diff the
    model is trained to write, so that it does not hinge on context lines
    like another episode's goal) is replayed onto the current page where it
    applies, else its next page is taken as is; with its reward, end and
    action error. Without neighbours it keeps the page.
    """

    model_id = "baseline:copy_top_retrieved"

    async def predict(self, query: ExperienceQuery) -> Prediction:
        if not query.neighbours:
            return await UnchangedPage().predict(query)
        top = query.neighbours[0].step
        state = top.next_observation.state
        current = query.observation.state
        with contextlib.suppress(StateFormatError):
            state = apply_diff(current, lean_diff(top.observation.state, state), strict=False).render()
        observation = msgspec.structs.replace(
            query.observation, state=state, last_action_error=top.next_observation.last_action_error
        )
        return Prediction(observation=observation, reward=top.reward, terminated=top.terminated, model_id=self.model_id)

    async def predict_initial(self, task: Task, *, seed: int | None = None) -> Observation:
        raise ModelOutputError("the copy-top baseline cannot write a first page; start from a real one")
