"""A real episode beside its shadow: the simulator's stored prediction of each of its steps.

In shadow mode the runtime stores, for each real step, what the simulator
predicted for it, as a synthetic step of episode
``<real episode id>/shadow`` (:func:`~dreamgym.core.types.shadow_episode_id`)
with the same step index. A step the simulator could not answer has a cut
prediction (its answer was malformed after the retries, or its backend
failed) or none at all (the prediction raised).
"""

from __future__ import annotations

from collections.abc import Sequence

from dreamgym.core.protocols import ReplayStore
from dreamgym.core.types import Step, shadow_episode_id

__all__ = ["NOT_STORED", "UNUSABLE_PREDICTIONS", "shadow_predictions"]

NOT_STORED = "no prediction stored (it raised)"
"""Why a real step has no shadow prediction when none was stored for it."""

UNUSABLE_PREDICTIONS = {
    "model_output": "the model's answer was malformed after its retries",
    "backend": "the backend failed",
}
"""Why a stored shadow step holds no prediction, by its truncation reason."""


async def shadow_predictions(
    store: ReplayStore, steps: Sequence[Step]
) -> tuple[tuple[Step | None, ...], tuple[str, ...]]:
    """The stored shadow prediction of each of one real episode's ``steps``, and why a missing one is missing.

    A prediction is ``None`` where none was stored (:data:`NOT_STORED`) or where the stored
    one is unusable (:data:`UNUSABLE_PREDICTIONS`); the reason is ``""`` elsewhere. A real episode run without
    shadow mode has no prediction for any step.
    """
    if not steps:
        return (), ()
    stored = {s.step_index: s for s in await store.episode_steps(shadow_episode_id(steps[0].episode_id))}
    guesses: list[Step | None] = []
    reasons: list[str] = []
    for step in steps:
        guess = stored.get(step.step_index)
        why = (
            "no prediction stored (it raised)"
            if guess is None
            else UNUSABLE_PREDICTIONS.get(guess.truncation_reason, "")
        )
        guesses.append(None if why else guess)
        reasons.append(why)
    return tuple(guesses), tuple(reasons)
