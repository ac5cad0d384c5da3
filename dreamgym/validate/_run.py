"""``validate``: every fidelity figure of an experience model against real steps, in one run.

What one run measures, on the same real steps and the same retrieval:

1. teacher-forced, one step (``dreamgym.simulator.one_step_fidelity``'s
   parts): the model and the two baselines, overall and per site, task and
   step depth, with the reward confusion matrix and the handling of actions
   that really failed;
2. the ablations (optional): the model with retrieval off, history off and
   reasoning off — the template's ``neighbours=0``, ``history=0`` and
   ``reasoning=False``; a switch that is already off in the trained template
   has no row to compare and is reported as n/a with the reason;
3. open loop (optional): drift over ``k = 1..K`` simulated steps;
4. the rubric of an LLM judge (optional).

Leakage rule: retrieval never returns the step's own episode nor any pair of
``exclude_task_seeds`` (pass every held-out (task, seed), e.g. the model's
metadata's ``held_out``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import ExperienceModel, ReplayStore, Sampling, TextBackend
from dreamgym.core.types import Step
from dreamgym.simulator import (
    BASELINES,
    CopyTopRetrieved,
    FidelitySummary,
    LLMExperienceModel,
    UnchangedPage,
    predict_steps,
    summarise_scores,
    teacher_forced_queries,
    without_salvaged,
)
from dreamgym.validate._judge import JudgeSummary, judge_episodes
from dreamgym.validate._open_loop import DriftPoint, open_loop_drift
from dreamgym.validate._outcomes import (
    ActionErrorSummary,
    DecidingSummary,
    RewardConfusion,
    StepOutcome,
    WorstCase,
    action_error_summary,
    breakdown,
    change_key,
    deciding_summary,
    depth_key,
    outcomes_of,
    reward_confusion,
    unusable_cases,
    worst_cases,
)

__all__ = ["ABLATIONS", "ValidationConfig", "ValidationReport", "ablation_variants", "select_episodes", "validate"]

log = logging.getLogger(__name__)

ABLATIONS = ("no_retrieval", "no_history", "no_reasoning")
"""The ablation rows, in report order (after ``full``, the model as trained)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationConfig:
    """What :func:`validate` measures and on how many steps."""

    neighbours: int = 3
    """Real transitions retrieved per step (the model's template shows at most its own k)."""
    exclude_task_seeds: tuple[tuple[str, int | None], ...] = ()
    """(task, seed) pairs retrieval never returns (the held-out pairs; ``None`` seed: every seed)."""
    limit: int = 0
    """Evaluate at most this many steps, as whole episodes spread over the tasks (0: all)."""
    open_loop: int = 0
    """Depth K of the open-loop drift curve (0: no open-loop run)."""
    concurrency: int = 8
    """Predictions in flight at once."""
    worst_cases: int = 12
    """Worst model predictions kept for the report."""
    judge_episodes: int = 8
    """Episodes the LLM judge scores, when a judge is given."""
    judge_sampling: Sampling | None = None
    """How the judge answers (``None``: greedy, 200 tokens)."""

    def __post_init__(self) -> None:
        for name in ("neighbours", "limit", "open_loop", "worst_cases", "judge_episodes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"ValidationConfig.{name} must be >= 0")
        if self.concurrency < 1:
            raise ConfigError("ValidationConfig.concurrency must be >= 1")


AblationRow = FidelitySummary | str
"""An ablation's summary, or why the row does not apply (reported as n/a)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    """Every figure of one validation run; ``as_dict()`` is ``validation.json``.

    Predictor keys are ``model``, ``copy_top_retrieved`` and ``unchanged``
    throughout; ``by_site``/``by_task``/``by_depth`` map predictor → group →
    summary; ``ablations`` maps ``full`` and each of :data:`ABLATIONS` to a
    summary or the reason it is n/a.
    """

    model_id: str
    template_id: str
    steps: int
    episodes: int
    tasks: int
    one_step: dict[str, FidelitySummary]
    reward: dict[str, RewardConfusion]
    deciding: dict[str, DecidingSummary]
    """Per predictor, its outcomes on the steps that decide one (what the trust gate reads), per task."""
    action_errors: dict[str, ActionErrorSummary]
    by_site: dict[str, dict[str, FidelitySummary]]
    by_task: dict[str, dict[str, FidelitySummary]]
    by_depth: dict[str, dict[str, FidelitySummary]]
    by_change: dict[str, dict[str, FidelitySummary]]
    """Steps whose real page changed vs did not (what the unchanged baseline cannot predict)."""
    ablations: dict[str, AblationRow] = field(default_factory=dict)
    open_loop: dict[str, list[DriftPoint]] = field(default_factory=dict)
    judge: JudgeSummary | None = None
    worst_cases: list[WorstCase] = field(default_factory=list)
    """The model's worst usable predictions."""
    unusable_cases: list[WorstCase] = field(default_factory=list)
    """Examples of steps the model gave no usable answer for, with the reason."""
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        def groups(table: dict[str, dict[str, FidelitySummary]]) -> dict[str, Any]:
            return {p: {g: s.as_dict() for g, s in rows.items()} for p, rows in table.items()}

        return {
            "model_id": self.model_id,
            "template_id": self.template_id,
            "steps": self.steps,
            "episodes": self.episodes,
            "tasks": self.tasks,
            "seconds": round(self.seconds, 1),
            "settings": self.settings,
            "one_step": {name: s.as_dict() for name, s in self.one_step.items()},
            "reward": {name: c.as_dict() for name, c in self.reward.items()},
            "deciding": {name: d.as_dict() for name, d in self.deciding.items()},
            "action_errors": {name: a.as_dict() for name, a in self.action_errors.items()},
            "by_site": groups(self.by_site),
            "by_task": groups(self.by_task),
            "by_depth": groups(self.by_depth),
            "by_change": groups(self.by_change),
            "ablations": {
                name: row.as_dict() if isinstance(row, FidelitySummary) else {"n/a": row}
                for name, row in self.ablations.items()
            },
            "open_loop": {name: [p.as_dict() for p in points] for name, points in self.open_loop.items()},
            "judge": self.judge.as_dict() if self.judge else None,
            "worst_cases": [case.as_dict() for case in self.worst_cases],
            "unusable_cases": [case.as_dict() for case in self.unusable_cases],
        }

    def as_metrics(self) -> dict[str, float]:
        """Flat ``validate/...`` figures for a training log (one-step, deciding steps, ablations, drift, judge)."""
        keys = ("reward_accuracy", "done_accuracy", "similarity", "f1", "hallucination_rate")
        out: dict[str, float] = {}
        for name, summary in self.one_step.items():
            out.update({f"validate/{name}/{key}": float(getattr(summary, key)) for key in keys})
        for name, decided in self.deciding.items():
            if decided.steps:
                out[f"validate/{name}/deciding_accuracy"] = decided.accuracy
        for name, row in self.ablations.items():
            if isinstance(row, FidelitySummary) and name != "full":
                out.update({f"validate/ablation/{name}/{key}": float(getattr(row, key)) for key in keys})
        for name, points in self.open_loop.items():
            out.update({f"validate/open_loop/{name}/similarity@{p.k}": p.similarity for p in points})
        if self.judge:
            out.update({f"validate/judge/{key}": value for key, value in self.judge.scores.items()})
        return out


def ablation_variants(model: LLMExperienceModel, *, trained_with_reasoning: bool) -> dict[str, ExperienceModel | str]:
    """The model with each prompt switch turned off, sharing its backend; a reason instead where it does not apply.

    ``trained_with_reasoning`` comes from the model's metadata
    (``read_metadata(dir)["trained_with_reasoning"]``): a model trained
    without reasoning has no reasoning to take away.
    """
    template = model.config.template

    def variant(**changes: Any) -> LLMExperienceModel:
        config = replace(model.config, template=replace(template, **changes))
        return LLMExperienceModel(model.backend, config=config, store=model.store)

    return {
        "no_retrieval": variant(neighbours=0) if template.neighbours else "the model was trained without retrieval",
        "no_history": variant(history=0) if template.history else "the model was trained without history",
        "no_reasoning": variant(reasoning=False)
        if trained_with_reasoning and template.reasoning
        else "the model was trained without reasoning",
    }


def select_episodes(steps: Sequence[Step], limit: int = 0) -> list[list[Step]]:
    """Real steps as whole episodes (in step order), at most ``limit`` steps in all (0: every step).

    Episodes are taken round-robin over the tasks (tasks by name, a task's
    episodes by seed and id), so a limited run still covers every task; the
    first episode is always taken.
    """
    by_episode: dict[str, list[Step]] = {}
    for step in steps:
        if step.source == "real":
            by_episode.setdefault(step.episode_id, []).append(step)
    by_task: dict[str, list[list[Step]]] = {}
    for episode in sorted(by_episode.values(), key=lambda e: (e[0].seed is None, e[0].seed or 0, e[0].episode_id)):
        episode.sort(key=lambda s: s.step_index)
        by_task.setdefault(episode[0].task_id, []).append(episode)
    queues = [by_task[task] for task in sorted(by_task)]
    chosen: list[list[Step]] = []
    total = 0
    for round_ in range(max((len(q) for q in queues), default=0)):
        for queue in queues:
            if round_ >= len(queue):
                continue
            episode = queue[round_]
            if limit and chosen and total + len(episode) > limit:
                continue
            chosen.append(episode)
            total += len(episode)
    return chosen


async def validate(
    model: ExperienceModel,
    steps: Sequence[Step],
    *,
    store: ReplayStore | None,
    config: ValidationConfig | None = None,
    ablations: Mapping[str, ExperienceModel | str] | None = None,
    judge: TextBackend | None = None,
) -> ValidationReport:
    """Validate ``model`` on the real ``steps`` beside the two baselines (see the module docstring).

    Args:
        model: The experience model under test.
        steps: Real steps (whole episodes; other sources are ignored).
        store: Where retrieval reads real transitions; ``None`` runs without retrieval.
        config: Retrieval, exclusions, limit, open-loop depth, concurrency.
        ablations: Name → ablated model, or the reason the row is n/a
            (:func:`ablation_variants` builds them for an ``LLMExperienceModel``).
        judge: A chat backend that scores the rubric; ``None`` skips it.

    Raises:
        ConfigError: No real steps to validate on.

    Example:
        >>> report = await validate(model, steps, store=store, config=ValidationConfig(open_loop=5))
        >>> report.one_step["model"].f1, report.one_step["unchanged"].f1
    """
    config = config or ValidationConfig()
    started = time.perf_counter()
    episodes = select_episodes(steps, config.limit)
    if not episodes:
        raise ConfigError("no real steps to validate on: give a store with real episodes (collected or shadowed)")
    chosen = [step for episode in episodes for step in episode]
    log.info("validating %s on %d real steps of %d episodes", model.model_id, len(chosen), len(episodes))
    queries = await teacher_forced_queries(
        chosen, store=store, neighbours=config.neighbours, exclude_task_seeds=config.exclude_task_seeds
    )
    ordered = [step for step, _ in queries]
    predictors: dict[str, ExperienceModel] = {
        "model": model,
        BASELINES[0]: CopyTopRetrieved(),
        BASELINES[1]: UnchangedPage(),
    }
    outcomes: dict[str, list[StepOutcome]] = {}
    one_step: dict[str, FidelitySummary] = {}
    for name, predictor in predictors.items():
        made = await predict_steps(predictor, queries, concurrency=config.concurrency, what=f"one step: {name}")
        outcomes[name] = outcomes_of(ordered, made.predictions, made.errors)
        one_step[name] = summarise_scores(name, [o.score for o in outcomes[name]], made.seconds)
        if (clean := without_salvaged(one_step[name], [o.score for o in outcomes[name]])) is not None:
            one_step[clean.name] = clean  # the figures without the salvaged answers, beside them
        log.info("one step, %s: %d steps in %.1f s", name, len(ordered), made.seconds)
    ablation_rows: dict[str, AblationRow] = {}
    if ablations:
        ablation_rows["full"] = one_step["model"]
        for name, variant in ablations.items():
            if isinstance(variant, str):
                ablation_rows[name] = variant
                continue
            made = await predict_steps(variant, queries, concurrency=config.concurrency, what=f"ablation: {name}")
            scores = [o.score for o in outcomes_of(ordered, made.predictions)]
            ablation_rows[name] = summarise_scores(name, scores, made.seconds)
            log.info("ablation %s: %.1f s", name, made.seconds)
    drift: dict[str, list[DriftPoint]] = {}
    if config.open_loop:
        drift = await open_loop_drift(
            predictors, episodes, horizon=config.open_loop, store=store, neighbours=config.neighbours,
            exclude_task_seeds=config.exclude_task_seeds, concurrency=config.concurrency,
        )  # fmt: skip
        log.info("open loop to depth %d done", config.open_loop)
    judged = None
    if judge is not None and config.judge_episodes:
        by_episode: dict[str, list[StepOutcome]] = {}
        for outcome in outcomes["model"]:
            by_episode.setdefault(outcome.step.episode_id, []).append(outcome)
        sample = [by_episode[e[0].episode_id] for e in episodes[: config.judge_episodes]]
        judged = await judge_episodes(judge, sample, sampling=config.judge_sampling, concurrency=config.concurrency)
    return ValidationReport(
        model_id=model.model_id,
        template_id=str(getattr(model, "template_id", "")),
        steps=len(chosen),
        episodes=len(episodes),
        tasks=len({step.task_id for step in chosen}),
        one_step=one_step,
        reward={name: reward_confusion(rows) for name, rows in outcomes.items()},
        deciding={name: deciding_summary(rows) for name, rows in outcomes.items()},
        action_errors={name: action_error_summary(rows) for name, rows in outcomes.items()},
        by_site={name: breakdown(name, rows, lambda s: s.site or "(none)") for name, rows in outcomes.items()},
        by_task={name: breakdown(name, rows, lambda s: s.task_id) for name, rows in outcomes.items()},
        by_depth={name: breakdown(name, rows, depth_key) for name, rows in outcomes.items()},
        by_change={name: breakdown(name, rows, change_key) for name, rows in outcomes.items()},
        ablations=ablation_rows,
        open_loop=drift,
        judge=judged,
        worst_cases=worst_cases(outcomes["model"], config.worst_cases),
        unusable_cases=unusable_cases(outcomes["model"], config.worst_cases // 2),
        settings={**asdict(config), "exclude_task_seeds": [list(p) for p in config.exclude_task_seeds]},
        seconds=time.perf_counter() - started,
    )
