"""Validating the simulator against real sites: ``dreamgym validate`` and its library call.

On real steps (collected, or recorded in shadow mode) and beside two
baselines from the same run ("copy top retrieved next state" and "state
unchanged"), :func:`validate` measures:

- teacher-forced one-step fidelity: reward accuracy and the reward confusion
  matrix, termination accuracy, next-page consistency in ``core``'s state
  format (element precision / recall / F1, line similarity), hallucinated
  elements, and how actions that really failed are handled — overall and by
  site, task and step depth;
- the outcome on deciding steps (an episode ended, a reward was paid), per
  task: what the trainer's trust gate compares with ``sim_trust``;
- the fidelity ablation: without retrieval, history, reasoning;
- open-loop drift: a real action sequence replayed through the simulator
  alone, fidelity per depth k;
- optionally, the paper's rubric scored by an LLM judge.

:func:`write_report` writes ``validation.json`` (``ValidationReport.as_dict``)
and a static, self-contained ``report.html`` with the plots and the worst
cases side by side. ``ValidationReport.as_metrics`` gives the flat
``validate/...`` figures a trainer logs.

Leakage rule: retrieval never returns the evaluated episode nor any held-out
(task, seed).
"""

from dreamgym.validate._judge import RUBRIC, JudgeSummary, judge_episodes, parse_rubric, rubric_messages
from dreamgym.validate._open_loop import DriftPoint, open_loop_drift, replay_episode
from dreamgym.validate._outcomes import ActionErrorSummary, DecidingSummary, RewardConfusion, StepOutcome, WorstCase
from dreamgym.validate._report import render_html, write_report
from dreamgym.validate._run import (
    ABLATIONS,
    ValidationConfig,
    ValidationReport,
    ablation_variants,
    select_episodes,
    validate,
)

__all__ = [
    "ABLATIONS",
    "RUBRIC",
    "ActionErrorSummary",
    "DecidingSummary",
    "DriftPoint",
    "JudgeSummary",
    "RewardConfusion",
    "StepOutcome",
    "ValidationConfig",
    "ValidationReport",
    "WorstCase",
    "ablation_variants",
    "judge_episodes",
    "open_loop_drift",
    "parse_rubric",
    "render_html",
    "replay_episode",
    "rubric_messages",
    "select_episodes",
    "validate",
    "write_report",
]
