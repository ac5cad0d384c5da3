"""The demo's figures: rollouts by side, the simulator's scores, the report and its table and files
(``report.json``, ``report.md``, and ``report.html`` drawn by ``_demo_html``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamgym.core.outcomes import count_deciding
from dreamgym.jobs._demo_figures import EpisodeExample, UpdateRewards, as_plain

if TYPE_CHECKING:
    from rich.table import Table

    from dreamgym.core.protocols import Prediction
    from dreamgym.core.types import Step
    from dreamgym.jobs._demo_figures import Shadowed
    from dreamgym.runtime import GroupResult, RuntimeSnapshot
    from dreamgym.simulator import FidelitySummary
    from dreamgym.trainer import EvalResult, PairedComparison
    from dreamgym.validate import DecidingSummary

__all__ = [
    "DemoReport",
    "RolloutFigures",
    "ShadowScore",
    "paired_summary",
    "score_predictions",
    "score_shadows",
    "score_summary",
    "summary_rows",
    "summary_table",
    "write_report",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowScore:
    """The simulator's one-step predictions of real steps, scored against what happened.

    The demo scores two sets: the held-out real steps evaluation played
    (seeds the experience model never saw, retrieval kept off every held-out
    (task, seed): its headline figure), and the shadowed real rollout steps
    (training seeds; retrieval kept off each step's own task and seed).
    """

    n: int = 0
    """Real steps scored; a step without a usable prediction counts as wrong."""
    reward_correct: int = 0
    """Predictions with ``|predicted reward - real reward| <= 0.5``."""
    done_correct: int = 0
    """Predictions whose end of episode matched the real one."""
    unusable: int = 0
    """Steps whose prediction failed or was cut (malformed after retries, a backend error)."""
    similarity: float = 0.0
    """Mean line similarity of predicted and real next pages (unusable ones count 0)."""
    zero_reward_correct: int = 0
    """What always predicting reward 0 would score on the same steps (a baseline to beat)."""
    majority_reward_correct: int = 0
    """What always predicting the steps' most common real reward would score on them: the best
    constant in hindsight (a baseline to beat)."""
    deciding_by_task: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per task, the deciding steps (:func:`dreamgym.core.outcomes.deciding`: the real episode ended, or a reward
    was paid or an end predicted) and those whose reward and end the simulator got right: what the trust gate
    reads (``sim_trust`` of a task's must be right before the simulator plays it). A step without a usable
    prediction counts as reward 0, no end, and wrong."""

    @property
    def deciding(self) -> int:
        return sum(n for n, _ in self.deciding_by_task.values())

    @property
    def deciding_correct(self) -> int:
        return sum(right for _, right in self.deciding_by_task.values())

    @property
    def reward_accuracy(self) -> float:
        return self.reward_correct / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, Any]:
        from dreamgym.trainer import wilson_interval

        low, high = wilson_interval(self.reward_correct, self.n)
        return {
            **dataclasses.asdict(self),
            "reward_accuracy": self.reward_accuracy,
            "reward_accuracy_ci95": [low, high],
            "done_accuracy": self.done_correct / self.n if self.n else 0.0,
            "zero_reward_accuracy": self.zero_reward_correct / self.n if self.n else 0.0,
            "majority_reward_accuracy": self.majority_reward_correct / self.n if self.n else 0.0,
            "deciding_by_task": {task: list(counts) for task, counts in self.deciding_by_task.items()},
            "deciding": self.deciding,
            "deciding_correct": self.deciding_correct,
            "deciding_accuracy": self.deciding_correct / self.deciding if self.deciding else 0.0,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutFigures:
    """What the mixed rollouts did, by side."""

    groups: int
    real_groups: int
    synthetic_groups: int
    real_episodes: int
    synthetic_episodes: int
    real_steps: int
    synthetic_steps: int
    """Steps of synthetic episodes (shadow predictions are counted in :class:`ShadowScore`, not here)."""
    real_successes: int
    synthetic_successes: int
    """Episodes the simulator judged successful (its say, not the site's)."""
    errors: Mapping[str, int] = field(default_factory=dict)
    sim_repeated_retries: int = 0
    """The experience model's retries that repeated the attempt before them (a server that does not sample)."""

    @classmethod
    def of(cls, results: Sequence[GroupResult], snapshot: RuntimeSnapshot) -> RolloutFigures:
        def successes(source: str) -> int:
            return sum(e.success for r in results if r.source == source for e in r.episodes)

        return cls(
            groups=len(results),
            real_groups=sum(r.source == "real" for r in results),
            synthetic_groups=sum(r.source == "synthetic" for r in results),
            real_episodes=snapshot.real_episodes,
            synthetic_episodes=snapshot.synthetic_episodes,
            real_steps=snapshot.real_steps,
            synthetic_steps=snapshot.synthetic_steps,
            real_successes=successes("real"),
            synthetic_successes=successes("synthetic"),
            errors=dict(snapshot.errors),
            sim_repeated_retries=snapshot.sim_repeated_retries,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoReport:
    """Everything the demo measured, each figure with its n."""

    settings: Mapping[str, Any]
    models: Mapping[str, str]
    """The policy's and the experience model's ids."""
    seed_set: Mapping[str, int]
    """The collected real seed set: ``steps``, ``episodes``, ``successes``, ``vectors`` (steps embedded)."""
    warm_start: Mapping[str, Any]
    """The policy's base and its behaviour cloning before RL (episodes, examples, updates, losses)."""
    before: EvalResult
    rollouts: RolloutFigures
    shadow: ShadowScore
    """The simulator on the shadowed real rollout steps (training seeds)."""
    held_out: ShadowScore
    """The simulator on the held-out real steps of the first evaluation: its headline accuracy."""
    training: Mapping[str, Any]
    """``status`` (``trained`` or ``skipped``), with the trainer's metrics or the reason."""
    after: EvalResult
    store: Mapping[str, int]
    """Steps in the demo's store at the end, by source (synthetic includes the shadow predictions)."""
    phases: Mapping[str, float]
    """Wall-clock seconds per phase."""
    held_out_fidelity: Mapping[str, Mapping[str, FidelitySummary]] = field(default_factory=dict)
    """The experience model and the two baselines (copy the top retrieved transition's change, keep the page)
    on the held-out real steps: split (all held-out steps, page changed, page unchanged) → predictor → figures."""
    curve: tuple[UpdateRewards, ...] = ()
    """Per GRPO update, the mean outcome reward of the real and the synthetic episodes played."""
    examples: tuple[EpisodeExample, ...] = ()
    """Shadowed real rollout episodes shown step by step beside the simulator's predictions."""
    experience_model_checks: tuple[Mapping[str, Any], ...] = ()
    """Phase 2's checks of its builds before use (``DemoSettings.sim_builds`` above 1;
    :func:`~dreamgym.jobs.sim_default.train_checked`): per build, its training seed, the epochs it was trained in
    all (more than the first build's where a failing build was trained further: ``sim_more_epochs``), whether it
    was kept and its clean first answers per task."""

    @property
    def real_steps(self) -> int:
        """Real steps of training data: the seed set, the real rollouts and training's real groups
        (evaluation's are not)."""
        return self.seed_set["steps"] + self.rollouts.real_steps + self.training_steps("real")

    @property
    def synthetic_steps(self) -> int:
        """Synthetic steps: the rollouts' and training's."""
        return self.rollouts.synthetic_steps + self.training_steps("synthetic")

    @property
    def verdict(self) -> str:
        """Whether the 95% interval of held-out success after training clears the one before, in words."""
        from dreamgym.trainer import wilson_interval

        before = wilson_interval(self.before.successes, self.before.episodes)
        after = wilson_interval(self.after.successes, self.after.episodes)
        if after[0] > before[1]:
            return "learnt: the 95% interval after training lies wholly above the one before"
        if after[1] < before[0]:
            return "worse: the 95% interval after training lies wholly below the one before"
        return "not shown: the 95% intervals before and after training overlap"

    @property
    def paired(self) -> PairedComparison:
        """The evaluations before and after compared seed by seed (:func:`~dreamgym.trainer.paired_comparison`):
        the same held-out (task, seed) pairs both times, so the pairing is the sharper test; the verdict above
        stays the intervals'."""
        from dreamgym.trainer import paired_comparison

        return paired_comparison(self.before, self.after)

    def training_steps(self, source: str) -> int:
        return int(self.training.get("metrics", {}).get(f"train/{source}_steps", 0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "models": dict(self.models),
            "real_steps": self.real_steps,
            "synthetic_steps": self.synthetic_steps,
            "seed_set": dict(self.seed_set),
            "warm_start": dict(self.warm_start),
            "before": self.before.as_dict(),
            "verdict": self.verdict,
            "paired": self.paired.as_dict(),
            "rollouts": dataclasses.asdict(self.rollouts),
            "shadow": self.shadow.as_dict(),
            "simulator_held_out": self.held_out.as_dict(),
            "simulator_held_out_fidelity": as_plain(self.held_out_fidelity),
            "training": dict(self.training),
            "after": self.after.as_dict(),
            "learning_curve": [row.as_dict() for row in self.curve],
            "examples": [example.as_dict() for example in self.examples],
            "experience_model_checks": [dict(check) for check in self.experience_model_checks],
            "store": dict(self.store),
            "phases_s": dict(self.phases),
            "total_s": sum(self.phases.values()),
        }


def score_shadows(shadowed: Sequence[Shadowed]) -> ShadowScore:
    """Score the shadow prediction of every step of the real rollout episodes against the real step.

    Every real group of the demo is shadowed; a step with no usable
    prediction (none stored, malformed, a backend error) counts as wrong.
    """
    return _score(
        [
            (step, (guess.next_observation.state, guess.reward, guess.terminated) if guess else None)
            for item in shadowed
            for step, guess in zip(item.steps, item.guesses, strict=True)
        ]
    )


def score_predictions(steps: Sequence[Step], predictions: Sequence[Prediction | None]) -> ShadowScore:
    """Score one-step predictions of real steps (``None``: the model gave no usable answer)."""
    return _score(
        [
            (step, (p.observation.state, p.reward, p.terminated) if p is not None else None)
            for step, p in zip(steps, predictions, strict=True)
        ]
    )


def score_summary(
    summary: FidelitySummary, steps: Sequence[Step], deciding: DecidingSummary | None = None
) -> ShadowScore:
    """A teacher-forced summary of the real ``steps`` (``dreamgym.validate``'s) as counts, with the constant
    baselines on the same steps (the summary's rates are rounded to 4 places: exact counts up to n = 5,000) and
    the deciding steps' counts per task (``deciding``, validate's)."""
    always_zero, majority = _constant_baselines(steps)
    return ShadowScore(
        n=summary.n, reward_correct=round(summary.reward_accuracy * summary.n),
        done_correct=round(summary.done_accuracy * summary.n), unusable=summary.failures,
        similarity=summary.similarity, zero_reward_correct=always_zero, majority_reward_correct=majority,
        deciding_by_task=dict(deciding.by_task) if deciding is not None else {},
    )  # fmt: skip


def _constant_baselines(steps: Sequence[Step]) -> tuple[int, int]:
    """What always predicting reward 0, and always the steps' most common real reward, get right."""
    classes = [round(step.reward) for step in steps]
    majority = max((classes.count(c) for c in set(classes)), default=0)
    return sum(abs(step.reward) <= 0.5 for step in steps), majority


def _score(pairs: Sequence[tuple[Step, tuple[str, float, bool] | None]]) -> ShadowScore:
    from dreamgym.simulator import score_prediction

    n = reward = done = unusable = 0
    similarity = 0.0
    for step, answer in pairs:
        n += 1
        if answer is None:
            unusable += 1
            continue
        score = score_prediction(step, *answer)
        reward += score.reward_correct
        done += score.done_correct
        similarity += score.similarity
    zero, majority = _constant_baselines([step for step, _ in pairs])
    return ShadowScore(
        n=n, reward_correct=reward, done_correct=done, unusable=unusable,
        similarity=similarity / n if n else 0.0, zero_reward_correct=zero, majority_reward_correct=majority,
        deciding_by_task=count_deciding((step, answer[1:] if answer is not None else None) for step, answer in pairs),
    )  # fmt: skip


# ---------------------------------------------------------------------- the report


def _rate(successes: int, n: int) -> tuple[str, str]:
    from dreamgym.trainer import wilson_interval

    low, high = wilson_interval(successes, n)
    value = f"{successes}/{n} = {successes / n:.2f}" if n else "–"
    return value, f"n = {n}, 95% CI {low:.2f}–{high:.2f}"


def paired_summary(paired: PairedComparison) -> tuple[str, str]:
    """The seed-by-seed comparison as (value, note): what the summary table and the HTML page's verdict show."""
    if not paired.pairs:
        return "–", "no (task, seed) pair was scored in both evaluations"
    return (f"+{paired.only_after} / −{paired.only_before}",
            f"of {paired.pairs} pairs: {paired.only_after} solved only after training, {paired.only_before} only "
            f"before; exact McNemar p = {paired.p_value:.2g}")  # fmt: skip


def summary_rows(report: DemoReport) -> list[tuple[str, str, str]]:
    """The summary as (figure, value, n and spread) rows: what the table and ``report.md`` show."""
    seed, roll, shadow, held = report.seed_set, report.rollouts, report.shadow, report.held_out
    rows = [
        ("real steps (training data)", str(report.real_steps),
         f"seed set {seed['steps']} ({seed['episodes']} episodes) + rollouts {roll.real_steps} "
         f"({roll.real_episodes} episodes) + training {report.training_steps('real')}"),
        ("synthetic steps", str(report.synthetic_steps),
         f"rollouts {roll.synthetic_steps} ({roll.synthetic_episodes} episodes in {roll.synthetic_groups} groups) "
         f"+ training {report.training_steps('synthetic')}"),
        ("policy warm start", _warm_value(report.warm_start), _warm_note(report.warm_start)),
        ("success before training", *_rate(report.before.successes, report.before.episodes)),
        ("success after training", *_rate(report.after.successes, report.after.episodes)),
        ("did it learn?", report.verdict.split(":")[0], report.verdict.split(": ", 1)[-1]),
        ("  the same seeds, pair by pair", *paired_summary(report.paired)),
        ("simulator reward accuracy (held-out real steps)", *_rate(held.reward_correct, held.n)),
        ("  always-0 reward on the same steps", *_rate(held.zero_reward_correct, held.n)),
        ("  majority class on the same steps", *_rate(held.majority_reward_correct, held.n)),
        ("  simulator end-of-episode accuracy", *_rate(held.done_correct, held.n)),
        ("  unusable predictions", str(held.unusable), f"of n = {held.n}"),
        ("  simulator outcome on the deciding steps (what the trust gate reads)",
         *_deciding(held, report.settings.get("sim_trust"))),
        ("simulator reward accuracy (shadowed rollouts, training seeds)", *_rate(shadow.reward_correct, shadow.n)),
        ("  always-0 / majority class on the same steps",
         f"{shadow.zero_reward_correct} / {shadow.majority_reward_correct}", f"of n = {shadow.n}"),
        ("real rollout success", *_rate(roll.real_successes, roll.real_episodes)),
        ("synthetic rollout success (simulator's say)", *_rate(roll.synthetic_successes, roll.synthetic_episodes)),
        ("  simulator retries that repeated the answer before", str(roll.sim_repeated_retries),
         "a served model whose server does not sample (docs/guides/served-models.md)"),
        ("training", report.training["status"], _training_note(report.training)),
    ]  # fmt: skip
    rows += [(f"wall-clock: {name}", f"{seconds:.1f} s", "") for name, seconds in report.phases.items()]
    rows.append(("wall-clock: total", f"{sum(report.phases.values()):.1f} s", ""))
    return rows


def _deciding(score: ShadowScore, trust: object) -> tuple[str, str]:
    """The deciding steps' right share with its interval, and per task, with the gate's threshold."""
    value, spread = _rate(score.deciding_correct, score.deciding)
    tasks = ", ".join(f"{task.split('/')[-1]} {right}/{n}" for task, (n, right) in score.deciding_by_task.items())
    gate = f"; the trust gate needs {float(trust):.2f} on a task" if isinstance(trust, float | int) and trust else ""
    return value, f"{spread}{'; ' + tasks if tasks else ''}{gate}"


def _warm_value(warm: Mapping[str, Any]) -> str:
    return f"{warm['examples']} examples" if "examples" in warm else "none"


def _warm_note(warm: Mapping[str, Any]) -> str:
    if "examples" not in warm:
        return f"{warm.get('base', '')}, no behaviour cloning"
    loss = f"loss {warm['first_loss']:.2f} → {warm['last_loss']:.2f}"
    epochs = f"{warm['epochs']:g} epoch{'' if warm['epochs'] == 1 else 's'}"
    return (f"{warm['base']}: {epochs} of behaviour cloning on {warm['episodes']} demonstrator "
            f"episodes ({warm['updates']} updates, {loss})")  # fmt: skip


def _training_note(training: Mapping[str, Any]) -> str:
    if training["status"] != "trained":
        return str(training.get("reason", ""))
    m = training["metrics"]
    note = (f"{m['train/updates']:.0f} GRPO updates, {m['train/real_groups']:.0f} real + "
            f"{m['train/synthetic_groups']:.0f} synthetic groups, {m['train/dropped_groups']:.0f} dropped")  # fmt: skip
    if "train/teaching_groups/real" in m:
        real, synthetic = m["train/teaching_groups/real"], m["train/teaching_groups/synthetic"]
        note += (f"; of the {real + synthetic:.0f} groups that carried a gradient (rewards not all equal), "
                 f"{synthetic:.0f} synthetic")  # fmt: skip
    if m.get("train/anchor_examples"):
        note += (f"; anchored to the warm start's {m['train/anchor_examples']:.0f} demonstrations (weight "
                 f"{m['train/anchor_weight']:g}, their loss {m['train/anchor_first_loss']:.2f} → "
                 f"{m['train/anchor_last_loss']:.2f})")  # fmt: skip
    if m.get("train/gated_groups"):
        note += f"; {m['train/gated_groups']:.0f} drawn synthetic played real (the simulator had not earned the task)"
    if m.get("train/sim_refits"):
        refits = m["train/sim_refits"]
        note += (f"; the experience model refit {refits:.0f} time{'' if refits == 1 else 's'} on the real steps "
                 f"played ({m['train/sim_refit_seconds']:.0f} s)")  # fmt: skip
    trust = {key.split("/")[-1]: value for key, value in m.items() if key.startswith("train/sim_trust/")}
    counts = {key.split("/")[-1]: value for key, value in m.items() if key.startswith("train/sim_trust_steps/")}
    if trust:
        note += "; its last shadowed deciding steps right: " + ", ".join(
            f"{t} {v:.2f}" + (f" of {counts[t]:.0f}" if t in counts else "") for t, v in trust.items()
        )
    return note + (f", last loss {m['train/last_loss']:.4f}" if "train/last_loss" in m else "")


def summary_table(report: DemoReport) -> Table:
    """The summary as a rich table."""
    from rich.table import Table

    table = Table(title="dreamgym demo")
    for column in ("figure", "value", "n and spread"):
        table.add_column(column)
    for row in summary_rows(report):
        table.add_row(*row)
    return table


def write_report(report: DemoReport, out: Path) -> None:
    """Write ``report.json`` (every figure), ``report.md`` (the summary and per-task success) and ``report.html``
    (one self-contained page: the verdict, the summary, the learning curve, the simulator's fidelity beside its
    baselines, example episodes) under ``out``."""
    from dreamgym.jobs._demo_html import render_demo_html

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(render_demo_html(report))
    (out / "report.json").write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    lines = ["# dreamgym demo", "", "| figure | value | n and spread |", "|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in summary_rows(report)]
    lines += ["", "## Held-out success per task", "", "| task | before | after |", "|---|---|---|"]
    after = {score.task_id: score for score in report.after.tasks}
    for score in report.before.tasks:
        later = after.get(score.task_id)
        late = f"{later.successes}/{later.episodes}" if later else "–"
        lines.append(f"| {score.task_id} | {score.successes}/{score.episodes} | {late} |")
    lines += ["", f"Models: {', '.join(f'{k} `{v}`' for k, v in report.models.items())}.", ""]
    if report.experience_model_checks:
        builds = [
            f"training seed {check['seed']}, {check.get('epochs', '?')} epochs: worst task {check['worst']:.3f} clean "
            f"({'passed' if check['passed'] else 'failed'}{', kept' if check['kept'] else ''})"
            for check in report.experience_model_checks
        ]
        bar = report.experience_model_checks[0]["min_clean"]
        lines += [f"Experience-model builds checked before use (bar {bar}): {'; '.join(builds)}.", ""]
    (out / "report.md").write_text("\n".join(lines))
