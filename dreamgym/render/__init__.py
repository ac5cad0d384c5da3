"""HTML reports: one renderer for every page dreamgym writes (``validate``'s report, the demo's).

A page is one self-contained file (:func:`page`): inline CSS, inline SVG
charts drawn here (:func:`bar_chart`, :func:`line_chart`,
:func:`confusion_chart`), no script, and a Content-Security-Policy
(:data:`CSP`) that forbids loading anything. On it: tables (:func:`table`,
:class:`NA` for a cell with no figure), and real steps beside a simulator's
prediction of them (:class:`StepView`, :func:`step_box`, :func:`episode_box`,
:func:`side_by_side`, the line diff that marks what only one page has).

It imports nothing from dreamgym but ``core``: a caller turns its own
figures into these parts.

Example:
    >>> from dreamgym.render import bar_chart, page, table
    >>> html = page("fidelity", ["<h1>fidelity</h1>", table(["", "model"], [["F1", 0.8]]),
    ...                          bar_chart("F1", ["all"], {"model": [0.8]})])
"""

from dreamgym.render._page import CSP, NA, charts, page, table
from dreamgym.render._steps import MAX_PAGE_CHARS, StepView, episode_box, side_by_side, step_box
from dreamgym.render._svg import COLOURS, bar_chart, confusion_chart, line_chart
from dreamgym.render._trajectories import FACETS, EpisodeView, TrajectoryStep, trajectory_list

__all__ = [
    "COLOURS",
    "CSP",
    "FACETS",
    "MAX_PAGE_CHARS",
    "NA",
    "EpisodeView",
    "StepView",
    "TrajectoryStep",
    "bar_chart",
    "charts",
    "confusion_chart",
    "episode_box",
    "line_chart",
    "page",
    "side_by_side",
    "step_box",
    "table",
    "trajectory_list",
]
