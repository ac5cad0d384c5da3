"""The report files of a validation run: ``validation.json`` and a static ``report.html``.

The HTML page is one self-contained file: inline CSS and inline SVG charts
(``_svg``), no script, and a Content-Security-Policy that forbids loading
anything, so it opens offline and from any directory. Its sections: one-step
fidelity beside the baselines, the reward confusion matrices, failed
actions, per-site / per-task / per-depth bars and tables, the ablations, the
open-loop drift curve, the judge's rubric, and the worst cases with the real
and the predicted page side by side (lines only one of them has are marked).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from dreamgym.simulator import FidelitySummary
from dreamgym.validate._outcomes import RewardConfusion, WorstCase
from dreamgym.validate._run import ABLATIONS, ValidationReport
from dreamgym.validate._svg import bar_chart, confusion_chart, line_chart

__all__ = ["render_html", "write_report"]

JSON_FILE = "validation.json"
HTML_FILE = "report.html"

_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.na { color: #888; font-style: italic; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.case { border: 1px solid #ccc; padding: 8px; margin: 12px 0; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
pre { font-size: 12px; background: #fafafa; padding: 6px; overflow-x: auto; margin: 0; white-space: pre-wrap; }
code { white-space: pre-wrap; }
.only { background: #fde2e2; } .added { background: #e0f5e0; }
.muted { color: #666; font-size: 13px; }
"""
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
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
        *_action_errors(report),
        *_breakdowns(report),
        *_ablations(report),
        *_open_loop(report),
        *_judge(report),
        *_worst(report.worst_cases),
        *_unusable(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>dreamgym validate: {escape(report.model_id)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def _settings(settings: Mapping[str, object]) -> str:
    shown = {k: v for k, v in settings.items() if k != "exclude_task_seeds"}
    excluded = settings.get("exclude_task_seeds")
    if isinstance(excluded, list):
        shown["held-out pairs excluded from retrieval"] = len(excluded)
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    lines = ["<table><tr>" + head + "</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(_cell(v) for v in row) + "</tr>")
    lines.append("</table>")
    return "".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"<td>{value:.3f}</td>"
    if isinstance(value, _NA):
        return f'<td class="na" title="{escape(value.reason)}">n/a</td>'
    return f"<td>{escape(str(value))}</td>"


class _NA:
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _summary_rows(columns: Mapping[str, FidelitySummary | str]) -> list[list[object]]:
    def row(label: str, key: str) -> list[object]:
        return [label, *(getattr(c, key) if isinstance(c, FidelitySummary) else _NA(c) for c in columns.values())]

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
        _table(["", *report.one_step], rows),
    ]


def _reward(reward: Mapping[str, RewardConfusion]) -> list[str]:
    charts = []
    for name, c in reward.items():
        cells = [[c.true_negative, c.false_positive], [c.false_negative, c.true_positive]]
        charts.append(confusion_chart(f"reward: {name}", cells))
    rows = [[name, c.success_precision, c.success_recall, c.mean_abs_error, c.failed] for name, c in reward.items()]
    return [
        "<h2>Reward confusion (real × predicted, reward ≥ 0.5 is 1)</h2>",
        f'<div class="charts">{"".join(charts)}</div>',
        _table(["", "success precision", "success recall", "mean reward error", "unusable"], rows),
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
    return ["<h2>Failed actions (the real step ended in an action error)</h2>", _table(header, rows)]


def _breakdowns(report: ValidationReport) -> list[str]:
    out = ["<h2>By site, task, step depth and whether the page changed</h2>"]
    tables = (("site", report.by_site), ("task", report.by_task), ("step depth", report.by_depth),
              ("page change", report.by_change))  # fmt: skip
    for title, table in tables:
        if not table:
            continue
        groups = list(next(iter(table.values())))
        metrics = (("similarity", "line similarity"), ("reward_accuracy", "reward accuracy"))
        charts = [
            bar_chart(
                f"{label} by {title}", groups, {p: [getattr(r[g], key) for g in groups] for p, r in table.items()}
            )
            for key, label in metrics
        ]
        out.append(f'<div class="charts">{"".join(charts)}</div>')
        header = [title, "n", *(f"{p} {m}" for p in table for m in ("sim", "F1", "reward"))]
        rows = []
        for group in groups:
            cells: list[object] = [group, table["model"][group].n if "model" in table else 0]
            for rows_of in table.values():
                s = rows_of[group]
                cells.extend([s.similarity, s.f1, s.reward_accuracy])
            rows.append(cells)
        out.append(_table(header, rows))
    return out


def _ablations(report: ValidationReport) -> list[str]:
    if not report.ablations:
        return []
    order = ["full", *ABLATIONS]
    columns = {name: report.ablations[name] for name in order if name in report.ablations}
    columns.update({k: v for k, v in report.ablations.items() if k not in columns})
    notes = [f"<li>{escape(name)}: n/a — {escape(row)}</li>" for name, row in columns.items() if isinstance(row, str)]
    return [
        "<h2>Ablations (one step: retrieval, history, reasoning switched off)</h2>",
        _table(["", *columns], _summary_rows(columns)),
        f"<ul class='muted'>{''.join(notes)}</ul>" if notes else "",
    ]


def _open_loop(report: ValidationReport) -> list[str]:
    if not report.open_loop:
        return []
    depth = max(len(points) for points in report.open_loop.values())
    xs = list(range(1, depth + 1))
    charts = [
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
        f'<div class="charts">{"".join(charts)}</div>',
        _table(header, rows),
    ]


def _judge(report: ValidationReport) -> list[str]:
    judge = report.judge
    if judge is None:
        return []
    rows = [[name, score] for name, score in judge.scores.items()]
    return [
        f"<h2>LLM judge rubric (0–2; {escape(judge.judge_id)})</h2>",
        f'<p class="muted">{judge.n} episodes scored, {judge.unusable} unusable judgements.</p>',
        _table(["criterion", "mean score"], rows),
    ]


def _worst(cases: Sequence[WorstCase]) -> list[str]:
    if not cases:
        return []
    out = [
        "<h2>Worst cases (real next page beside the predicted one)</h2>",
        '<p class="muted">Lines only the real page has are red; lines only the prediction has are green.</p>',
    ]
    for case in cases:
        real_side, predicted_side = _side_by_side(case.real_state, case.predicted_state)
        errors = ""
        if case.real_error or case.predicted_error:
            real_error, predicted_error = escape(case.real_error or "-"), escape(case.predicted_error or "-")
            errors = f"<br>action errors: real {real_error}; predicted {predicted_error}"
        ends = "ends" if case.predicted_done else "continues"
        out.append(
            _case_head(case, f" · predicted: reward {case.predicted_reward or 0:g}, {ends}{errors}")
            + f'<div class="side"><div><b>real</b><pre>{real_side}</pre></div>'
            f"<div><b>predicted</b><pre>{predicted_side}</pre></div></div>"
            + (f"<details><summary>raw answer</summary><pre>{escape(case.raw)}</pre></details>" if case.raw else "")
            + "</div>"
        )
    return out


def _unusable(report: ValidationReport) -> list[str]:
    if not report.unusable_cases:
        return []
    failures = report.one_step["model"].failures if "model" in report.one_step else 0
    out = [
        f"<h2>Unusable answers ({failures} of {report.steps} steps; examples)</h2>",
        '<p class="muted">Steps the model gave no usable answer for after its retries; each scores 0 everywhere.</p>',
    ]
    for case in report.unusable_cases:
        out.append(
            _case_head(case, f"<br>why: <code>{escape(case.error or '(no reason given)')}</code>")
            + f"<details><summary>real next page</summary><pre>{escape(case.real_state)}</pre></details></div>"
        )
    return out


def _case_head(case: WorstCase, outcome: str) -> str:
    """The opening of a case's box: where it is, the action, the real outcome, ``outcome`` (HTML), the page before."""
    return (
        f'<div class="case"><b>{escape(case.task_id)}</b> seed {case.seed} step {case.step_index} · '
        f"similarity {case.similarity:.3f}, F1 {case.f1:.3f}<br>goal: {escape(case.goal)}<br>"
        f"action: <code>{escape(case.action)}</code><br>real: reward {case.real_reward:g}, "
        f"{'ends' if case.real_done else 'continues'}{outcome}"
        f"<details><summary>page before the action</summary><pre>{escape(case.state)}</pre></details>"
    )


def _side_by_side(real: str, predicted: str) -> tuple[str, str]:
    a, b = real.split("\n"), predicted.split("\n") if predicted else []
    left, right = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for line in a[i1:i2]:
            left.append(escape(line) if tag == "equal" else f'<span class="only">{escape(line)}</span>')
        for line in b[j1:j2]:
            right.append(escape(line) if tag == "equal" else f'<span class="added">{escape(line)}</span>')
    return "\n".join(left), "\n".join(right) or "(no page)"
