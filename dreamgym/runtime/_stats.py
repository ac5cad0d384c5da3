"""What the runtime has done: counters, rates, and the ``rollout/...`` metrics."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dreamgym.core.outcomes import deciding, shadow_right
from dreamgym.core.types import Episode, Step

__all__ = ["SHADOW_MEMORY", "RuntimeSnapshot", "RuntimeStats"]

SHADOW_MEMORY = 256
"""Shadowed deciding steps remembered per task (the most recent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSnapshot:
    """The runtime's counters at one moment (what the CLI draws)."""

    real_steps: int = 0
    synthetic_steps: int = 0
    shadow_steps: int = 0
    """Synthetic predictions stored beside real steps (not counted in ``synthetic_steps``)."""
    real_episodes: int = 0
    synthetic_episodes: int = 0
    successes: int = 0
    groups: int = 0
    inconsistent_groups: int = 0
    in_flight: int = 0
    """Episodes started and not yet finished."""
    active_s: float = 0.0
    """Seconds during which at least one ``run_groups`` call was running."""
    shadow_decisions: Mapping[str, tuple[bool, ...]] = field(default_factory=dict)
    """Per task, whether the simulator's shadow prediction of each deciding real step (:func:`deciding`) was
    right (:func:`shadow_right`), oldest first, the last :data:`SHADOW_MEMORY`."""
    shadow_models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per task, the experience model that made each of ``shadow_decisions`` (its ``model_id``), in step: after a
    refit, :meth:`decisions_of` keeps the new model's own."""
    errors: Mapping[str, int] = field(default_factory=dict)
    """Episodes ended by an exception (by its class name) or cut from outside (by the truncation
    reason: ``deadline``, ``model_output``, ``page_crashed``, ``cancelled``...; ``step_limit`` is
    not an error). Failed shadow predictions count as ``shadow:<class name>``."""
    sim_repeated_retries: int = 0
    """Retries of the experience model at a temperature above 0 that came back with the text of the attempt
    before them (``sim/repeated_retries`` of the model in use): a served model whose server does not sample."""

    @property
    def episodes(self) -> int:
        return self.real_episodes + self.synthetic_episodes

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def real_steps_per_s(self) -> float:
        return self.real_steps / self.active_s if self.active_s else 0.0

    @property
    def synthetic_steps_per_s(self) -> float:
        return self.synthetic_steps / self.active_s if self.active_s else 0.0

    def decisions_of(self, model_id: str) -> dict[str, tuple[bool, ...]]:
        """``shadow_decisions`` made by the experience model ``model_id`` alone, per task (tasks it has not
        decided on are left out): what a gate must read after the model in use changed."""
        mine = {
            task: tuple(right for right, model in zip(rights, self.shadow_models.get(task, ()), strict=True)
                        if model == model_id)
            for task, rights in self.shadow_decisions.items()
        }  # fmt: skip
        return {task: rights for task, rights in mine.items() if rights}

    def as_metrics(self) -> dict[str, float]:
        """Flat ``rollout/...`` metrics for a logger."""
        metrics: dict[str, float] = {
            "rollout/real_steps": self.real_steps,
            "rollout/synthetic_steps": self.synthetic_steps,
            "rollout/shadow_steps": self.shadow_steps,
            "rollout/real_steps_per_s": self.real_steps_per_s,
            "rollout/synthetic_steps_per_s": self.synthetic_steps_per_s,
            "rollout/real_episodes": self.real_episodes,
            "rollout/synthetic_episodes": self.synthetic_episodes,
            "rollout/success_rate": self.success_rate,
            "rollout/groups": self.groups,
            "rollout/inconsistent_groups": self.inconsistent_groups,
            "rollout/in_flight": self.in_flight,
            "rollout/sim_repeated_retries": self.sim_repeated_retries,
        }
        decisions = [right for per_task in self.shadow_decisions.values() for right in per_task]
        if decisions:
            metrics["rollout/shadow_deciding_steps"] = len(decisions)
            metrics["rollout/shadow_deciding_accuracy"] = sum(decisions) / len(decisions)
        metrics.update({f"rollout/errors/{kind}": count for kind, count in sorted(self.errors.items())})
        return metrics


class RuntimeStats:
    """Live counters of a runtime; read them through :meth:`snapshot`."""

    def __init__(self) -> None:
        self._steps: Counter[str] = Counter()
        self._episodes: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self.shadow_steps = 0
        self._decisions: dict[str, deque[tuple[bool, str]]] = {}
        self.successes = 0
        self.groups = 0
        self.inconsistent_groups = 0
        self.in_flight = 0
        self._active_s = 0.0
        self._runs = 0
        self._since = 0.0
        self.repeated_retries: Callable[[], int] = lambda: 0
        """Reads the experience model's ``repeated_retries`` (set by whoever opens the model with the runtime)."""

    def run_started(self) -> None:
        if self._runs == 0:
            self._since = time.perf_counter()
        self._runs += 1

    def run_ended(self) -> None:
        self._runs -= 1
        if self._runs == 0:
            self._active_s += time.perf_counter() - self._since

    def record_episode(self, episode: Episode, error_kind: str = "") -> None:
        """Count a finished episode; ``error_kind`` names the exception that ended it, if one did."""
        self._steps[episode.source] += episode.num_steps
        self._episodes[episode.source] += 1
        self.successes += episode.success
        kind = error_kind or (episode.truncation_reason if episode.truncation_reason != "step_limit" else "")
        if kind:
            self._errors[kind] += 1

    def record_shadow(self, real: Step, predicted_reward: float, predicted_end: bool, model_id: str = "") -> None:
        """Count one stored shadow prediction of ``real`` by the experience model ``model_id``; remember whether it
        was right, and whose it was, if the step decides."""
        self.shadow_steps += 1
        if deciding(real, predicted_reward, predicted_end):
            memory = self._decisions.setdefault(real.task_id, deque(maxlen=SHADOW_MEMORY))
            memory.append((shadow_right(real, predicted_reward, predicted_end), model_id))

    def record_error(self, kind: str) -> None:
        self._errors[kind] += 1

    def record_group(self, consistent: bool) -> None:
        self.groups += 1
        self.inconsistent_groups += not consistent

    def snapshot(self) -> RuntimeSnapshot:
        active = self._active_s + (time.perf_counter() - self._since if self._runs else 0.0)
        return RuntimeSnapshot(
            real_steps=self._steps["real"],
            synthetic_steps=self._steps["synthetic"],
            shadow_steps=self.shadow_steps,
            real_episodes=self._episodes["real"],
            synthetic_episodes=self._episodes["synthetic"],
            successes=self.successes,
            groups=self.groups,
            inconsistent_groups=self.inconsistent_groups,
            in_flight=self.in_flight,
            active_s=active,
            shadow_decisions={task: tuple(right for right, _ in memory) for task, memory in self._decisions.items()},
            shadow_models={task: tuple(model for _, model in memory) for task, memory in self._decisions.items()},
            errors=dict(self._errors),
            sim_repeated_retries=self.repeated_retries(),
        )

    def as_metrics(self) -> dict[str, float]:
        """:meth:`RuntimeSnapshot.as_metrics` of a snapshot taken now."""
        return self.snapshot().as_metrics()
