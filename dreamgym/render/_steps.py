"""Real steps beside a simulator's prediction of them: the line diff, one step's box, an episode's.

The pages are ``core``'s abstract state text. :func:`side_by_side` marks the
lines only the real page has (red, ``class="only"``) and the lines only the
prediction has (green, ``class="added"``); :func:`step_box` shows one step
with both outcomes and both next pages; :func:`episode_box` an episode's
steps under one heading.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from html import escape
from typing import Self

from dreamgym.core.types import Step

__all__ = ["MAX_PAGE_CHARS", "StepView", "episode_box", "side_by_side", "step_box"]

MAX_PAGE_CHARS = 4000
"""Characters of a page a box shows (a longer page is cut there): reports stay readable and small."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    """What a step's box shows: a real step, what really followed, and what the simulator predicted.

    ``predicted_reward`` is ``None`` when there is no usable prediction; then
    ``error`` says why, and ``raw`` may hold what the model answered.
    """

    task_id: str
    seed: int | None
    step_index: int
    goal: str
    action: str
    state: str
    """The page before the action."""
    real_state: str
    predicted_state: str
    real_reward: float
    predicted_reward: float | None
    real_done: bool
    predicted_done: bool | None
    real_error: str = ""
    """The real action error, if the action failed."""
    predicted_error: str = ""
    similarity: float = 0.0
    """Line similarity of the predicted and the real next page."""
    f1: float = 0.0
    """Element F1 of the predicted next page against the real one."""
    raw: str = ""
    error: str = ""

    @property
    def usable(self) -> bool:
        return self.predicted_reward is not None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def of(
        cls, real: Step, predicted: Step | None, *, similarity: float = 0.0, f1: float = 0.0, error: str = ""
    ) -> Self:
        """The view of a stored real step and the stored prediction of it (``None``: none usable, ``error`` says
        why); pages cut at :data:`MAX_PAGE_CHARS`."""
        return cls(
            task_id=real.task_id,
            seed=real.seed,
            step_index=real.step_index,
            goal=real.observation.goal,
            action=str(real.action),
            state=real.observation.state[:MAX_PAGE_CHARS],
            real_state=real.next_observation.state[:MAX_PAGE_CHARS],
            predicted_state=predicted.next_observation.state[:MAX_PAGE_CHARS] if predicted else "",
            real_reward=real.reward,
            predicted_reward=predicted.reward if predicted else None,
            real_done=real.terminated,
            predicted_done=predicted.terminated if predicted else None,
            real_error=real.next_observation.last_action_error,
            predicted_error=predicted.next_observation.last_action_error if predicted else "",
            similarity=round(similarity, 4),
            f1=round(f1, 4),
            error=error,
        )


def side_by_side(real: str, predicted: str) -> tuple[str, str]:
    """The real and the predicted page as HTML lines, each line only one of them has marked.

    Returns the real side (lines missing from the prediction in
    ``<span class="only">``) and the predicted side (lines not in the real
    page in ``<span class="added">``); an empty prediction is ``(no page)``.

    Example:
        >>> side_by_side("a\\nb", "a\\nc")
        ('a\\n<span class="only">b</span>', 'a\\n<span class="added">c</span>')
    """
    a, b = real.split("\n"), predicted.split("\n") if predicted else []
    left, right = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for line in a[i1:i2]:
            left.append(escape(line) if tag == "equal" else f'<span class="only">{escape(line)}</span>')
        for line in b[j1:j2]:
            right.append(escape(line) if tag == "equal" else f'<span class="added">{escape(line)}</span>')
    return "\n".join(left), "\n".join(right) or "(no page)"


def step_box(view: StepView, *, context: bool = True) -> str:
    """One step's box: where it is, the action, the real and predicted outcomes, the pages.

    ``context`` heads it with the task, seed and goal (an :func:`episode_box`
    shows those once, above its steps). A blank action (a policy's answer
    that was only whitespace) is shown quoted. The page before the action is folded
    away; the real next page stands beside the predicted one, or, without a
    usable prediction, the reason is shown and the real next page folded.
    """
    where = f"<b>{escape(view.task_id)}</b> seed {view.seed} step" if context else "<b>step"
    head = (
        f'<div class="case">{where} {view.step_index}{"" if context else "</b>"} · '
        f"similarity {view.similarity:.3f}, F1 {view.f1:.3f}<br>"
        + (f"goal: {escape(view.goal)}<br>" if context else "")
        + f"action: <code>{escape(view.action.strip() or repr(view.action))}</code><br>"
        f"real: reward {view.real_reward:g}, {_ends(view.real_done)}{_outcome(view)}"
        f"<details><summary>page before the action</summary><pre>{escape(view.state)}</pre></details>"
    )
    if not view.usable:
        return head + _folded("real next page", view.real_state) + "</div>"
    real_side, predicted_side = side_by_side(view.real_state, view.predicted_state)
    return (
        head + f'<div class="side"><div><b>real</b><pre>{real_side}</pre></div>'
        f"<div><b>predicted</b><pre>{predicted_side}</pre></div></div>"
        + (_folded("raw answer", view.raw) if view.raw else "")
        + "</div>"
    )


def episode_box(heading: str, summary: str, steps: Sequence[StepView]) -> str:
    """An episode: ``heading`` and ``summary`` (text), its goal, then each step's box."""
    goal = f"goal: {escape(steps[0].goal)}" if steps else "(no steps)"
    return (
        f'<div class="episode"><h3>{escape(heading)}</h3><p class="muted">{escape(summary)}<br>{goal}</p>'
        + "".join(step_box(view, context=False) for view in steps)
        + "</div>"
    )


def _ends(done: bool | None) -> str:
    return "ends" if done else "continues"


def _outcome(view: StepView) -> str:
    """What the prediction said (HTML), or why there is none."""
    if not view.usable:
        return f"<br>why: <code>{escape(view.error or '(no reason given)')}</code>"
    errors = ""
    if view.real_error or view.predicted_error:
        real_error, predicted_error = escape(view.real_error or "-"), escape(view.predicted_error or "-")
        errors = f"<br>action errors: real {real_error}; predicted {predicted_error}"
    return f" · predicted: reward {view.predicted_reward or 0:g}, {_ends(view.predicted_done)}{errors}"


def _folded(summary: str, text: str) -> str:
    return f"<details><summary>{escape(summary)}</summary><pre>{escape(text)}</pre></details>"
