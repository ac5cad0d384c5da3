"""Which real steps decide an episode's outcome, and whether a prediction of one got the outcome right.

One definition for the trust gate (the runtime remembers a task's shadowed
deciding steps; ``TrainConfig.sim_trust`` reads them) and for the figures
that measure it (``dreamgym validate``'s deciding-step accuracy, the demo's
report): a simulator is judged where a policy trained on it would exploit it.
"""

from __future__ import annotations

from collections.abc import Iterable

from dreamgym.core.types import Step

__all__ = ["count_deciding", "deciding", "shadow_right"]


def deciding(real: Step, predicted_reward: float, predicted_end: bool) -> bool:
    """Whether a shadowed real step decides an outcome: the real episode ended there, or either side paid a
    reward, or the simulator said it ended. What a policy trained on the simulator exploits is a wrong answer
    on such a step (a reward paid for a premature Submit); every other step pays 0 on both sides."""
    return real.terminated or predicted_end or real.reward >= 0.5 or predicted_reward >= 0.5


def shadow_right(real: Step, predicted_reward: float, predicted_end: bool) -> bool:
    """The simulator got the step's outcome: its reward within 0.5 of the real one and the same end."""
    return abs(predicted_reward - real.reward) <= 0.5 and predicted_end == real.terminated


def count_deciding(answers: Iterable[tuple[Step, tuple[float, bool] | None]]) -> dict[str, tuple[int, int]]:
    """Per task (sorted), the deciding steps among real steps and their predicted (reward, end), and how many of
    those the prediction got right. ``None`` (no usable prediction) counts as reward 0, no end, and wrong."""
    counts: dict[str, tuple[int, int]] = {}
    for step, answer in answers:
        reward, end = answer if answer is not None else (0.0, False)
        if deciding(step, reward, end):
            n, right = counts.get(step.task_id, (0, 0))
            counts[step.task_id] = (n + 1, right + (answer is not None and shadow_right(step, reward, end)))
    return dict(sorted(counts.items()))
