"""A build's check before use: how often its greedy first answer applies as written, task by task.

Builds of one recipe that differ only in their training seed differ in how
often their greedy first answer applies with nothing overruled, as much as any
recipe change measured (``benchmarks/results/demo_sim_builds_alias_layers*.json``:
one four-layer build of four fell to 0.71 on two tasks while the others held
0.95-1.00). A job that trains an experience model can ask it, before it runs a
synthetic rollout, real steps whose outcome it knows: :func:`check_build`
replays every ``every``-th real episode of each task, teacher-forced (the real
page and history), at most ``steps_per_task`` steps per task, and counts the
first answers that applied as written
(``ExperienceModelStats.clean_first_answers``: no retry, no line dropped,
nothing steered). Retrieval never returns a transition of the step's own (task,
seed) nor of ``exclude_task_seeds``, so no answer is shown its own transition.

Which episodes matters. Asked the seed set it trained on, the builds answer
almost every step clean (the demo's first four four-layer builds: 153, 160,
141 and 160 of 160 click steps, ``benchmarks/probes/seed_set_check.py``), so
the check has little room to rank them; pass ``episodes`` on pages the model
never trained on where a job has them (the demo: its demonstrations of
``demonstration_seeds``). There, of twelve builds
(``benchmarks/results/demo_sim_check.json``), the check passed six, five of
them over the bar, and failed six, three of them over it: it tells a build
that fell far (0.71) from good ones, not one within 0.03 of the bar. Keeping
the first of at most two builds that passes kept a build over the bar in six
runs of six, against four of six unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import ReplayStore
from dreamgym.core.types import Step
from dreamgym.simulator._fidelity import predict_steps, teacher_forced_queries
from dreamgym.simulator._model import LLMExperienceModel
from dreamgym.simulator._sft import real_episodes

__all__ = ["BuildCheck", "CheckConfig", "check_build"]


@dataclass(frozen=True)
class CheckConfig:
    """Which real steps :func:`check_build` asks and what a build must answer clean to pass."""

    steps_per_task: int = 120
    """Most steps asked per task (the demo's four tasks: under a minute on 2 cores for the demo-size model)."""
    every: int = 1
    """Every ``every``-th real episode of a task is asked, in commit order, the first one always."""
    min_clean: float = 0.975
    """The share of first answers applied as written that every task must reach (117 of 120)."""

    def __post_init__(self) -> None:
        if self.steps_per_task < 1 or self.every < 1:
            raise ConfigError(f"CheckConfig: steps_per_task and every must be >= 1, got {self.steps_per_task}, "
                              f"{self.every}")  # fmt: skip
        if not 0.0 <= self.min_clean <= 1.0:
            raise ConfigError(f"CheckConfig.min_clean must be within [0, 1], got {self.min_clean}")


@dataclass(frozen=True)
class BuildCheck:
    """One build's answers to the steps asked: per task, steps asked and first answers applied as written."""

    asked: Mapping[str, int]
    clean: Mapping[str, int]
    min_clean: float
    unusable: Mapping[str, int] = field(default_factory=dict)
    """Per task, the predictions no attempt could make (every answer malformed, or the backend failed)."""

    def share(self, task_id: str) -> float:
        return self.clean[task_id] / self.asked[task_id]

    @property
    def worst(self) -> float:
        """The lowest task's share of clean first answers: what passing is judged by."""
        return min(self.share(task_id) for task_id in self.asked)

    @property
    def passed(self) -> bool:
        return self.worst >= self.min_clean

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "worst": round(self.worst, 4),
            "min_clean": self.min_clean,
            "tasks": {
                task_id: {"asked": asked, "clean": self.clean[task_id], "unusable": self.unusable.get(task_id, 0)}
                for task_id, asked in self.asked.items()
            },
        }


def check_steps(
    episodes: Sequence[Sequence[Step]],
    config: CheckConfig,
    *,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    exclude_episodes: Sequence[str] = (),
) -> dict[str, list[Step]]:
    """The steps :func:`check_build` asks, by task: every ``config.every``-th episode's, up to
    ``config.steps_per_task``, episodes of an excluded (task, seed) (a ``None`` seed: every seed) and excluded
    episodes left out."""
    excluded = set(exclude_task_seeds)
    left_out = set(exclude_episodes)
    by_task: dict[str, list[Sequence[Step]]] = {}
    for episode in episodes:
        if not episode or episode[0].episode_id in left_out:
            continue
        task_id, seed = episode[0].task_id, episode[0].seed
        if (task_id, seed) not in excluded and (task_id, None) not in excluded:
            by_task.setdefault(episode[0].task_id, []).append(episode)
    chosen: dict[str, list[Step]] = {}
    for task_id, task_episodes in by_task.items():
        steps: list[Step] = []
        for episode in task_episodes[:: config.every]:
            steps.extend(episode[: config.steps_per_task - len(steps)])
        chosen[task_id] = steps
    return chosen


async def check_build(
    model: LLMExperienceModel,
    store: ReplayStore,
    config: CheckConfig | None = None,
    *,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    exclude_episodes: Sequence[str] = (),
    episodes: Sequence[Sequence[Step]] | None = None,
) -> BuildCheck:
    """Ask ``model`` real steps teacher-forced, task by task, and count its clean first answers.

    ``episodes`` give the steps (:func:`check_steps`): best, real episodes
    on pages the model never trained on (the demo's demonstrations on their
    own seeds); by default, the store's real episodes (the seed set it
    trained on). The store is what it retrieves from, with the model's own
    retrieval settings. ``exclude_task_seeds`` (a job's held-out pairs) and
    ``exclude_episodes`` (episodes the build did not train on, as
    :func:`~dreamgym.jobs.sim_default.train_on_store` takes them) are neither
    asked nor retrieved.

    Raises:
        ConfigError: No episode to ask outside ``exclude_task_seeds`` and ``exclude_episodes``.
    """
    config = config or CheckConfig()
    asked_episodes = await real_episodes(store) if episodes is None else episodes
    chosen = check_steps(asked_episodes, config, exclude_task_seeds=exclude_task_seeds,
                         exclude_episodes=exclude_episodes)  # fmt: skip
    if not chosen:
        raise ConfigError("no real episode to check the experience model on, outside the pairs and episodes left out")
    asked: dict[str, int] = {}
    clean: dict[str, int] = {}
    unusable: dict[str, int] = {}
    for task_id, steps in sorted(chosen.items()):
        queries = await teacher_forced_queries(
            steps, store=store, neighbours=model.config.template.neighbours,
            exclude_task_seeds=exclude_task_seeds, exclude_own_seed=True, exclude_episodes=exclude_episodes,
        )  # fmt: skip
        before = model.stats.clean_first_answers
        predictions = await predict_steps(model, queries, what=f"check the experience model on {task_id}")
        asked[task_id] = len(queries)
        clean[task_id] = model.stats.clean_first_answers - before
        unusable[task_id] = sum(1 for error in predictions.errors if error)
    return BuildCheck(asked=asked, clean=clean, min_clean=config.min_clean, unusable=unusable)
