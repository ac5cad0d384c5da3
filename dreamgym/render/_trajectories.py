"""A store's episodes on one page, each step's page, action and reward, with filters that need no script.

:func:`trajectory_list` draws :class:`EpisodeView`\\ s as folded boxes. Above
them, one row of radio buttons per facet (task, source, outcome, policy,
experience model) filters the list by CSS alone (``:has()`` on the checked
button hides the episodes of other values), so the page keeps its
Content-Security-Policy: nothing runs and nothing is fetched. A step the
simulator shadowed shows its prediction beside the real page
(:func:`~dreamgym.render.step_box`); any other step shows its next page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from dreamgym.render._steps import StepView, step_box

__all__ = ["FACETS", "EpisodeView", "TrajectoryStep", "trajectory_list"]

FACETS = (
    ("task", "task"),
    ("source", "source"),
    ("outcome", "outcome"),
    ("policy", "policy"),
    ("model", "experience model"),
)
"""The filters above the list: (facet, label). An episode's value for each is :meth:`EpisodeView.facet`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrajectoryStep:
    """One stored step as the viewer shows it."""

    step_index: int
    action: str
    state: str
    """The page before the action."""
    next_state: str
    reward: float
    done: bool
    error: str = ""
    """The action's error on the page, if it failed."""
    shadow: StepView | None = None
    """The simulator's prediction of this (real) step beside what really followed, where shadow mode stored
    one; a :class:`StepView` with no usable prediction says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeView:
    """One episode as the viewer shows it: its provenance, its outcome and its steps."""

    episode_id: str
    task_id: str
    source: str
    seed: int | None
    goal: str
    policy_id: str
    experience_model_id: str
    reward: float | None
    """The outcome reward; ``None`` when the infrastructure cut the episode (``cut`` says why)."""
    success: bool
    cut: str = ""
    steps: tuple[TrajectoryStep, ...] = ()

    @property
    def outcome(self) -> str:
        """``solved``, ``failed`` or ``cut: <reason>``."""
        if self.reward is None:
            return f"cut: {self.cut or 'unknown'}"
        return "solved" if self.success else "failed"

    def facet(self, name: str) -> str:
        """This episode's value of a :data:`FACETS` filter."""
        values = {
            "task": self.task_id,
            "source": self.source,
            "outcome": self.outcome,
            "policy": self.policy_id or "(none)",
            "model": self.experience_model_id or "(real pages)",
        }
        return values[name]


def trajectory_list(episodes: Sequence[EpisodeView]) -> str:
    """The filters and the episodes (HTML): every episode folded, its heading saying what it was and how it ended."""
    counts = {name: Counter(episode.facet(name) for episode in episodes) for name, _ in FACETS}
    values = {name: sorted(counted) for name, counted in counts.items()}
    if not episodes:
        return '<p class="muted">(no episodes)</p>'
    return (
        f"<style>{_filter_css(values)}</style>"
        + _filters(values, counts)
        + "".join(_episode(episode, values) for episode in episodes)
    )


def _filters(values: dict[str, list[str]], counts: dict[str, Counter[str]]) -> str:
    rows = []
    for name, label in FACETS:
        buttons = [_radio(name, "all", "all", checked=True)]
        buttons += [_radio(name, str(n), f"{value} ({counts[name][value]})") for n, value in enumerate(values[name])]
        rows.append(f'<div class="facet"><b>{escape(label)}</b> {"".join(buttons)}</div>')
    return '<form class="filters">' + "".join(rows) + "</form>"


def _radio(facet: str, key: str, label: str, *, checked: bool = False) -> str:
    ident = f"f-{facet}-{key}"
    return (
        f'<label><input type="radio" name="{facet}" id="{ident}"{" checked" if checked else ""}> '
        f"{escape(label)}</label> "
    )


def _filter_css(values: dict[str, list[str]]) -> str:
    """One rule per facet value: while its button is checked, episodes with another value of that facet hide."""
    rules = [
        ".filters { margin: 8px 0 16px; font-size: 13px; } .facet { margin: 4px 0; }",
        ".facet label { margin-right: 10px; white-space: nowrap; }",
    ]
    for name, _ in FACETS:
        for n in range(len(values[name])):
            rules.append(f'body:has(#f-{name}-{n}:checked) .trajectory:not([data-{name}="{n}"]) {{ display: none; }}')
    return "\n".join(rules)


def _episode(episode: EpisodeView, values: dict[str, list[str]]) -> str:
    data = " ".join(f'data-{name}="{values[name].index(episode.facet(name))}"' for name, _ in FACETS)
    reward = "–" if episode.reward is None else f"{episode.reward:g}"
    heading = (
        f"<b>{escape(episode.task_id)}</b> seed {episode.seed} · {escape(episode.source)} · {escape(episode.outcome)}"
        f" · reward {reward} · {len(episode.steps)} steps"
    )
    about = (
        f"episode {escape(episode.episode_id)} · policy {escape(episode.policy_id or '(none)')}"
        + (f" · experience model {escape(episode.experience_model_id)}" if episode.experience_model_id else "")
        + f"<br>goal: {escape(episode.goal or '(not recorded)')}"
    )
    steps = "".join(_step(step) for step in episode.steps) or '<p class="muted">(no steps stored)</p>'
    return (
        f'<details class="episode trajectory" {data}><summary>{heading}</summary>'
        f'<p class="muted">{about}</p>{steps}</details>'
    )


def _step(step: TrajectoryStep) -> str:
    if step.shadow is not None:
        return step_box(step.shadow, context=False)
    error = f"<br>action error: {escape(step.error)}" if step.error else ""
    return (
        f'<div class="case"><b>step {step.step_index}</b> · '
        f"action: <code>{escape(step.action.strip() or repr(step.action))}</code> · "
        f"reward {step.reward:g}, {'ends' if step.done else 'continues'}{error}"
        f"<details><summary>page before the action</summary><pre>{escape(step.state)}</pre></details>"
        f"<pre>{escape(step.next_state)}</pre></div>"
    )
