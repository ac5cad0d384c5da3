"""The report files of a validation run: ``validation.json`` and a static ``report.html``.

The HTML page is drawn by :mod:`dreamgym.render`: one self-contained file
(inline CSS and SVG, no script, a Content-Security-Policy that forbids
loading anything), so it opens offline and from any directory. Its sections: one-step
fidelity beside the baselines, the reward confusion matrices, failed
actions, per-site / per-task / per-depth bars and tables, the ablations, the
open-loop drift curve, the judge's rubric, and the worst cases with the real
and the predicted page side by side (lines only one of them has are marked).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from dreamgym.render import NA, bar_chart, charts, confusion_chart, line_chart, page, step_box, table
from dreamgym.simulator import FidelitySummary
from dreamgym.validate._outcomes import RewardConfusion, WorstCase
from dreamgym.validate._run import ABLATIONS, ValidationReport

__all__ = ["render_html", "write_report"]

JSON_FILE = "validation.json"
HTML_FILE = "report.html"

_METRICS = (
    ("reward_accuracy", "reward accuracy"),
    ("done_accuracy", "termination accuracy"),
    ("exact_match", "exact next page"),
    ("similarity", "line similarity"),
    ("precision", "element precision"),
    ("recall", "element recall"),
    ("f1", "element F1"),
    ("hallucination_rate", "hallucinated elements (lower is better)"),
)


def write_report(report: ValidationReport, out: str | Path) -> tuple[Path, Path]:
    """Write ``validation.json`` and ``report.html`` into ``out`` (created if missing); returns both paths."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, html_path = folder / JSON_FILE, folder / HTML_FILE
    json_path.write_text(json.dumps(report.as_dict(), indent=1, ensure_ascii=False) + "\n")
    html_path.write_text(render_html(report))
    return json_path, html_path


def render_html(report: ValidationReport) -> str:
    """The report page as one HTML string."""
    body = [
        f"<h1>Simulator validation: {escape(report.model_id)}</h1>",
        f'<p class="muted">template {escape(report.template_id or "(none)")} · {report.steps} real steps of '
        f"{report.episodes} episodes on {report.tasks} tasks · {report.seconds:.0f} s · settings "
        f"{escape(_settings(report.settings))}</p>",
        *_one_step(report),
        *_reward(report.reward),
        *_deciding(report),
        *_action_errors(report),
        *_breakdowns(report),
        *_ablations(report),
        *_open_loop(report),
        *_judge(report),
        *_worst(report.worst_cases),
        *_unusable(report),
    ]
    return page(f"dreamgym validate: {report.model_id}", body)


def _settings(settings: Mapping[str, object]) -> str:
    shown = {k: v for k, v in settings.items() if k != "exclude_task_seeds"}
    excluded = settings.get("exclude_task_seeds")
    if isinstance(excluded, list):
        shown["held-out pairs excluded from retrieval"] = len(excluded)
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _summary_rows(columns: Mapping[str, FidelitySummary | str]) -> list[list[object]]:
    def row(label: str, key: str) -> list[object]:
        return [label, *(getattr(c, key) if isinstance(c, FidelitySummary) else NA(c) for c in columns.values())]

    return [
        row("n", "n"),
        *(row(label, key) for key, label in _METRICS),
        row("unusable answers", "failures"),
        row("salvaged answers", "salvaged"),
        row("seconds per step", "seconds_per_step"),
    ]


def _one_step(report: ValidationReport) -> list[str]:
    rows = _summary_rows(report.one_step)
    rows.insert(2, ["mean reward error", *(c.mean_abs_error for c in report.reward.values())])
    return [
        "<h2>One step, teacher-forced</h2>",
        '<p class="muted">Each real step predicted from the real task, history, page and action; '
        "the baselines copy the top retrieved transition's change, or keep the page.</p>",
        table(["", *report.one_step], rows),
    ]


def _reward(reward: Mapping[str, RewardConfusion]) -> list[str]:
    matrices = [
        confusion_chart(f"reward: {name}", [[c.true_negative, c.false_positive], [c.false_negative, c.true_positive]])
        for name, c in reward.items()
    ]
    rows = [[name, c.success_precision, c.success_recall, c.mean_abs_error, c.failed] for name, c in reward.items()]
    return [
        "<h2>Reward confusion (real × predicted, reward ≥ 0.5 is 1)</h2>",
        charts(matrices),
        table(["", "success precision", "success recall", "mean reward error", "unusable"], rows),
    ]


def _deciding(report: ValidationReport) -> list[str]:
    """The outcome on the steps that decide one, per predictor and task: what the trust gate reads."""
    tasks = sorted({task for d in report.deciding.values() for task in d.by_task})
    if not tasks:
        return []

    def cell(counts: tuple[int, int] | None) -> str:
        return f"{counts[1]}/{counts[0]}" if counts and counts[0] else "–"

    rows = [
        [name, cell((d.steps, d.right)), d.accuracy, *(cell(d.by_task.get(task)) for task in tasks)]
        for name, d in report.deciding.items()
    ]
    return [
        "<h2>Deciding steps (the real episode ended, or a reward was paid or an end predicted)</h2>",
        '<p class="muted">Whether the predicted reward and end were right where an outcome is decided: most steps '
        "pay 0 on both sides, so reward accuracy over all steps hides these. The trainer lets a simulator play a "
        "task only once this share of its shadow answers on the task is at least <code>sim_trust</code>.</p>",
        table(["", "right", "share", *tasks], rows),
    ]


def _action_errors(report: ValidationReport) -> list[str]:
    summaries = report.action_errors
    n = next(iter(summaries.values())).n if summaries else 0
    if not n:
        return ["<h2>Failed actions</h2>", '<p class="muted">No real step in this run ended in an action error.</p>']
    rows = [
        [name, s.n, s.predicted_error, s.predicted_unchanged, s.predicted_reward_zero, s.failures]
        for name, s in summaries.items()
    ]
    header = ["", "n", "predicted an error", "predicted no change", "predicted reward 0", "unusable"]
    return ["<h2>Failed actions (the real step ended in an action error)</h2>", table(header, rows)]


def _breakdowns(report: ValidationReport) -> list[str]:
    out = ["<h2>By site, task, step depth and whether the page changed</h2>"]
    tables = (("site", report.by_site), ("task", report.by_task), ("step depth", report.by_depth),
              ("page change", report.by_change))  # fmt: skip
    for title, by_group in tables:
        if by_group:
            out += _breakdown(title, by_group)
    return out


def _breakdown(title: str, by_group: Mapping[str, Mapping[str, FidelitySummary]]) -> list[str]:
    """Bars of line similarity and reward accuracy per group, and the table of each predictor's figures."""
    groups = list(next(iter(by_group.values())))
    metrics = (("similarity", "line similarity"), ("reward_accuracy", "reward accuracy"))
    bars = [
        bar_chart(f"{label} by {title}", groups, {p: [getattr(r[g], key) for g in groups] for p, r in by_group.items()})
        for key, label in metrics
    ]
    header = [title, "n", *(f"{p} {m}" for p in by_group for m in ("sim", "F1", "reward"))]
    rows = []
    for group in groups:
        cells: list[object] = [group, by_group["model"][group].n if "model" in by_group else 0]
        for rows_of in by_group.values():
            s = rows_of[group]
            cells.extend([s.similarity, s.f1, s.reward_accuracy])
        rows.append(cells)
    return [charts(bars), table(header, rows)]


def _ablations(report: ValidationReport) -> list[str]:
    if not report.ablations:
        return []
    order = ["full", *ABLATIONS]
    columns = {name: report.ablations[name] for name in order if name in report.ablations}
    columns.update({k: v for k, v in report.ablations.items() if k not in columns})
    notes = [f"<li>{escape(name)}: n/a — {escape(row)}</li>" for name, row in columns.items() if isinstance(row, str)]
    return [
        "<h2>Ablations (one step: retrieval, history, reasoning switched off)</h2>",
        table(["", *columns], _summary_rows(columns)),
        f"<ul class='muted'>{''.join(notes)}</ul>" if notes else "",
    ]


def _open_loop(report: ValidationReport) -> list[str]:
    if not report.open_loop:
        return []
    depth = max(len(points) for points in report.open_loop.values())
    xs = list(range(1, depth + 1))
    curves = [
        line_chart("open loop: line similarity to the real page after k steps",
                   xs, {name: [p.similarity for p in points] for name, points in report.open_loop.items()}),
        line_chart("open loop: element F1 after k steps",
                   xs, {name: [p.f1 for p in points] for name, points in report.open_loop.items()}),
        line_chart("open loop: similarity of the simulations still running",
                   xs, {name: [p.similarity_running for p in points] for name, points in report.open_loop.items()}),
    ]  # fmt: skip
    header = ["k", "n", *(f"{name} {m}" for name in report.open_loop for m in ("sim", "F1", "running"))]
    rows = []
    for k in xs:
        row: list[object] = [k, 0]
        for points in report.open_loop.values():
            p = points[k - 1] if k <= len(points) else None
            row[1] = p.n if p else row[1]
            row.extend([p.similarity, p.f1, p.running] if p else ["", "", ""])
        rows.append(row)
    return [
        "<h2>Open loop: drift over k simulated steps</h2>",
        '<p class="muted">Real actions replayed through the simulator alone, from the real first page. '
        "A simulation that ended early scores 0 at the depths it did not reach; "
        "“running” counts those still going.</p>",
        charts(curves),
        table(header, rows),
    ]


def _judge(report: ValidationReport) -> list[str]:
    judge = report.judge
    if judge is None:
        return []
    rows = [[name, score] for name, score in judge.scores.items()]
    return [
        f"<h2>LLM judge rubric (0–2; {escape(judge.judge_id)})</h2>",
        f'<p class="muted">{judge.n} episodes scored, {judge.unusable} unusable judgements.</p>',
        table(["criterion", "mean score"], rows),
    ]


def _worst(cases: Sequence[WorstCase]) -> list[str]:
    if not cases:
        return []
    return [
        "<h2>Worst cases (real next page beside the predicted one)</h2>",
        '<p class="muted">Lines only the real page has are red; lines only the prediction has are green.</p>',
        *(step_box(case) for case in cases),
    ]


def _unusable(report: ValidationReport) -> list[str]:
    if not report.unusable_cases:
        return []
    failures = report.one_step["model"].failures if "model" in report.one_step else 0
    return [
        f"<h2>Unusable answers ({failures} of {report.steps} steps; examples)</h2>",
        '<p class="muted">Steps the model gave no usable answer for after its retries; each scores 0 everywhere.</p>',
        *(step_box(case) for case in report.unusable_cases),
    ]
