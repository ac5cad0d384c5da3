"""Which real steps decide an episode's outcome, and whether a prediction of one got the outcome right.

One definition for the trust gate (the runtime remembers a task's shadowed
deciding steps; ``TrainConfig.sim_trust`` reads them) and for the figures
that measure it (``dreamgym validate``'s deciding-step accuracy, the demo's
report): a simulator is judged where a policy trained on it would exploit it.
"""

from __future__ import annotations

from dreamgym.core.types import Step

__all__ = ["deciding", "shadow_right"]


def deciding(real: Step, predicted_reward: float, predicted_end: bool) -> bool:
    """Whether a shadowed real step decides an outcome: the real episode ended there, or either side paid a
    reward, or the simulator said it ended. What a policy trained on the simulator exploits is a wrong answer
    on such a step (a reward paid for a premature Submit); every other step pays 0 on both sides."""
    return real.terminated or predicted_end or real.reward >= 0.5 or predicted_reward >= 0.5


def shadow_right(real: Step, predicted_reward: float, predicted_end: bool) -> bool:
    """The simulator got the step's outcome: its reward within 0.5 of the real one and the same end."""
    return abs(predicted_reward - real.reward) <= 0.5 and predicted_end == real.terminated
