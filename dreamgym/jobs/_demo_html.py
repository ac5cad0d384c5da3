"""The demo's ``report.html``: the report a person looks at, drawn by :mod:`dreamgym.render`.

Top to bottom: the verdict (did the policy learn, with before and after and
their 95% intervals), the summary table, the learning curve, the simulator's
one-step fidelity on held-out real steps beside the two baselines (all steps,
and steps where the page changed), its reward accuracy beside the constant
baselines, and three shadowed real rollout episodes with the real and the
predicted next page side by side at each step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING

from dreamgym.jobs._demo_figures import ALL_STEPS, EpisodeExample
from dreamgym.render import NA, bar_chart, charts, episode_box, line_chart, page, table

if TYPE_CHECKING:
    from dreamgym.jobs._demo_report import DemoReport, ShadowScore
    from dreamgym.simulator import FidelitySummary

__all__ = ["render_demo_html"]

PREDICTOR_NAMES = {
    "model": "experience model",
    "copy_top_retrieved": "copy top retrieved",
    "unchanged": "unchanged page",
}
_METRICS = (
    ("reward_accuracy", "reward accuracy"),
    ("done_accuracy", "termination accuracy"),
    ("similarity", "line similarity"),
    ("f1", "element F1"),
)
_BANNER = {"learnt": "good", "worse": "bad"}
_MISSING_SPLIT = {
    "page changed": "No held-out step changed the page: there is no row of changed pages.",
    "page unchanged": "Every held-out step changed the page: there is no row of unchanged pages.",
}


def render_demo_html(report: DemoReport) -> str:
    """The demo's report page as one HTML string."""
    from dreamgym.jobs._demo_report import summary_rows

    models = ", ".join(f"{k} {v}" for k, v in report.models.items())
    tasks = ", ".join(map(str, report.settings.get("tasks", ())))
    body = [
        "<h1>dreamgym demo</h1>",
        f'<p class="muted">tasks {escape(tasks)} · {escape(models)}</p>',
        _verdict(report),
        "<h2>Summary</h2>",
        table(["figure", "value", "n and spread"], summary_rows(report)),
        *_learning_curve(report),
        *_fidelity(report.held_out_fidelity),
        *_reward_baselines(report.held_out, report.shadow),
        *_examples(report.examples),
    ]
    return page("dreamgym demo report", body)


def _rate(successes: int, n: int) -> str:
    from dreamgym.trainer import wilson_interval

    low, high = wilson_interval(successes, n)
    share = f" = {successes / n:.2f}" if n else ""
    return f"{successes}/{n}{share} (95% CI {low:.2f}–{high:.2f})"


def _verdict(report: DemoReport) -> str:
    from dreamgym.jobs._demo_report import paired_summary

    word, _, why = report.verdict.partition(": ")
    before, after = report.before, report.after
    pairs = f"; seed by seed, {paired_summary(report.paired)[1]}" if report.paired.pairs else ""
    return (
        f'<div class="banner {_BANNER.get(word, "neutral")}"><b>Did the policy learn? {escape(word)}</b> — '
        f"held-out success {_rate(before.successes, before.episodes)} before training, "
        f"{_rate(after.successes, after.episodes)} after<br>"
        f'<span class="muted">{escape(why + pairs)}</span></div>'
    )


def _learning_curve(report: DemoReport) -> list[str]:
    """Per-update rewards by side between the held-out success before and after, and per-task success."""
    updates = [row.update for row in report.curve]
    xs: list[int | str] = ["before", *updates, "after"]
    gaps: list[float | None] = [None] * len(updates)
    before, after = report.before.success_rate, report.after.success_rate
    curve = line_chart(
        "learning curve: mean episode reward per update, held-out success before and after",
        xs,
        {
            "held-out success": [before, *gaps, after],
            "real groups": [None, *(row.real_reward for row in report.curve), None],
            "synthetic groups (simulator's say)": [None, *(row.synthetic_reward for row in report.curve), None],
            "trained groups (TRL)": [None, *(row.trained_reward for row in report.curve), None],
        },
        x_label="GRPO update",
    )
    after_tasks = {score.task_id: score for score in report.after.tasks}
    tasks = [score.task_id for score in report.before.tasks]
    per_task = bar_chart(
        "held-out success per task",
        tasks,
        {
            "before": [s.successes / s.episodes if s.episodes else 0.0 for s in report.before.tasks],
            "after": [_share(after_tasks[t].successes, after_tasks[t].episodes) if t in after_tasks else 0.0
                      for t in tasks],
        },
    )  # fmt: skip
    rows = [
        [row.update, _cell(row.real_reward), row.real_episodes, _cell(row.synthetic_reward), row.synthetic_episodes,
         _cell(row.trained_reward)]
        for row in report.curve
    ]  # fmt: skip
    header = ["update", "real mean reward", "real episodes", "synthetic mean reward", "synthetic episodes",
              "TRL's mean reward"]  # fmt: skip
    note = "" if report.curve else f'<p class="muted">No GRPO update ran ({escape(_reason(report))}).</p>'
    return [
        "<h2>Learning curve</h2>",
        "<p class=\"muted\">Each update's played episodes by side (the mean outcome reward; the synthetic side's "
        "rewards are the simulator's say), TRL's mean over the groups it trained on, and the held-out success "
        "before and after training as the two ends.</p>",
        note,
        charts([curve, per_task]),
        table(header, rows) if rows else "",
    ]


def _fidelity(splits: Mapping[str, Mapping[str, FidelitySummary]]) -> list[str]:
    if not splits:
        return []
    rows = [
        [split, PREDICTOR_NAMES.get(name, name), summary.n, *_figures(summary), summary.failures]
        for split, by_predictor in splits.items()
        for name, summary in by_predictor.items()
    ]
    bars = [
        bar_chart(
            f"one step: {split}",
            [label for _, label in _METRICS],
            {PREDICTOR_NAMES.get(name, name): _figures(summary) for name, summary in splits[split].items()},
        )
        for split in (ALL_STEPS, "page changed")
        if split in splits
    ]
    missing = [note for split, note in _MISSING_SPLIT.items() if split not in splits]
    return [
        "<h2>Simulator on held-out real steps, one step at a time</h2>",
        '<p class="muted">Each held-out real step predicted from its real task, history, page and action (seeds '
        "the model never saw; retrieval never returns a held-out task and seed), beside copying the top retrieved "
        "transition's change and keeping the page. Keeping the page is right by construction wherever the page "
        "did not change, so the steps where it changed are shown apart. Every predictor is held to the "
        "simulator's rules (typed text stays in its field, a selected option is its list's only selected one, stop "
        "ends the episode), so a page that only typing or selecting changed is right for all three. An unusable "
        "answer scores 0.</p>",
        table(["steps", "predictor", "n", *(label for _, label in _METRICS), "unusable answers"], rows),
        *(f'<p class="muted">{escape(note)}</p>' for note in missing),
        charts(bars),
    ]


def _figures(summary: FidelitySummary) -> list[float]:
    return [float(getattr(summary, key)) for key, _ in _METRICS]


def _reward_baselines(held: ShadowScore, shadow: ShadowScore) -> list[str]:
    scores = {"held-out steps": held, "shadowed rollout steps": shadow}
    series = {
        "simulator": [_share(s.reward_correct, s.n) for s in scores.values()],
        "always 0": [_share(s.zero_reward_correct, s.n) for s in scores.values()],
        "majority class": [_share(s.majority_reward_correct, s.n) for s in scores.values()],
    }
    rows = [
        [name, s.n, _rate(s.reward_correct, s.n), _rate(s.zero_reward_correct, s.n),
         _rate(s.majority_reward_correct, s.n), s.unusable]
        for name, s in scores.items()
    ]  # fmt: skip
    return [
        "<h2>Simulator reward accuracy beside constant guesses</h2>",
        '<p class="muted">A predicted reward within 0.5 of the real one is right; an unusable prediction is wrong. '
        "The shadowed steps are the real rollout steps (training seeds), each predicted as it was played.</p>",
        table(["steps", "n", "simulator", "always 0", "majority class", "unusable"], rows),
        charts([bar_chart("reward accuracy", list(scores), series)]),
        *_deciding(scores),
    ]


def _deciding(scores: Mapping[str, ShadowScore]) -> list[str]:
    """The deciding steps per task: what the trust gate reads before the simulator may play a task."""
    tasks = sorted({task for s in scores.values() for task in s.deciding_by_task})
    if not tasks:
        return []

    def cell(counts: tuple[int, int] | None) -> str:
        return _rate(counts[1], counts[0]) if counts and counts[0] else "–"

    rows = [
        [name, cell((s.deciding, s.deciding_correct)), *(cell(s.deciding_by_task.get(task)) for task in tasks)]
        for name, s in scores.items()
    ]
    return [
        "<h3>Where an outcome is decided</h3>",
        '<p class="muted">Steps where the real episode ended, or a reward was paid or an end predicted: most steps '
        "pay 0 on both sides, so the accuracy over all steps hides these. The simulator plays a task's training "
        "groups only once this share of its shadow answers on the task's real steps is at least the trust gate's "
        "(<code>--sim-trust</code>).</p>",
        table(["steps", "all tasks", *(task.split("/")[-1] for task in tasks)], rows),
    ]


def _examples(examples: Sequence[EpisodeExample]) -> list[str]:
    if not examples:
        return ["<h2>Example episodes</h2>", '<p class="muted">No shadowed real rollout episode to show.</p>']
    boxes = [
        episode_box(
            f"{example.why}: {example.task_id} seed {example.seed}",
            f"real: {'solved' if example.success else 'failed'}, reward {example.reward:g} in {len(example.steps)} "
            f"steps · simulator: mean line similarity {example.similarity:.3f}, reward right on "
            f"{example.reward_correct} of {len(example.steps)} steps",
            example.steps,
        )
        for example in examples
    ]
    return [
        "<h2>Example episodes: the real page beside the simulator's prediction</h2>",
        '<p class="muted">Shadowed real rollout episodes: at each step the simulator predicted the next page from '
        "the real history. Lines only the real page has are red; lines only the prediction has are green.</p>",
        *boxes,
    ]


def _share(k: int, n: int) -> float:
    return k / n if n else 0.0


def _cell(value: float | None) -> float | NA:
    return NA("no episode of this side in this update") if value is None else value


def _reason(report: DemoReport) -> str:
    return str(report.training.get("reason", report.training.get("status", "")))
