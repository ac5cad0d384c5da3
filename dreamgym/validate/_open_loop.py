"""Open-loop fidelity: a real action sequence replayed through the simulator alone.

For each real episode, a :class:`~dreamgym.simulator.SimulatedEnv` starts at
the episode's real first page (``start_from``) and is given the real actions
one by one; the simulator's own predictions, not the real pages, are its
history and current page. The page it predicts after ``k`` actions is
compared with the real page after ``k`` actions, for ``k = 1..K``: how far
the simulation drifts from reality as it runs on its own.

Decisions:

- The simulator runs with its rules (``SimulatedEnv.predict_step``): an
  action naming an element its predicted page lacks fails by rule with the
  page unchanged, exactly as a policy inside the simulator would see it.
- A simulated episode that ends before the real one (a predicted end, or an
  unusable answer, which truncates it) stops there; each depth it does not
  reach scores zero. :class:`DriftPoint` reports both the mean over all real
  episodes that reach depth ``k`` (``similarity``, ``f1``) and over the
  simulations still running there (``*_running``), with both counts.
- Leakage rule: retrieval excludes the episode being replayed and every
  held-out (task, seed), as in the teacher-forced run.
- The baselines run the same way, as experience models
  (:class:`~dreamgym.simulator.CopyTopRetrieved`,
  :class:`~dreamgym.simulator.UnchangedPage`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import anyio

from dreamgym.core.progress import Phase, progress
from dreamgym.core.protocols import ExperienceModel, ReplayStore
from dreamgym.core.types import Action, Observation, Step, Task
from dreamgym.simulator import SimulatedEnv, SimulatorConfig, StepScore, score_prediction

__all__ = ["DriftPoint", "open_loop_drift", "replay_episode"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DriftPoint:
    """Open-loop fidelity after ``k`` simulated steps."""

    k: int
    n: int
    """Real episodes with at least ``k`` steps."""
    running: int
    """Of those, simulations still running at step ``k`` (no earlier end or unusable answer)."""
    similarity: float
    """Mean line similarity of the k-th predicted page to the real one over all ``n`` (0 where ended)."""
    f1: float
    """Mean element F1 over all ``n`` (0 where ended)."""
    reward_accuracy: float
    """Share of the ``n`` whose k-th predicted reward is right (wrong where ended)."""
    similarity_running: float
    """Mean similarity over the ``running`` simulations only."""
    f1_running: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def replay_episode(
    model: ExperienceModel,
    episode: Sequence[Step],
    *,
    horizon: int,
    store: ReplayStore | None,
    neighbours: int = 3,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
) -> list[StepScore | None]:
    """Scores of the simulated pages after 1..min(horizon, len(episode)) real actions; ``None`` past its end."""
    steps = sorted(episode, key=lambda s: s.step_index)[:horizon]
    if not steps:
        return []
    first = steps[0]
    config = SimulatorConfig(
        neighbours=neighbours,
        exclude_episodes=(first.episode_id,),
        exclude_task_seeds=tuple(exclude_task_seeds),
    )
    env = SimulatedEnv(model, store=store, config=config)
    task = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
    observation: Observation = first.observation
    history: list[tuple[Observation, Action]] = []
    scores: list[StepScore | None] = []
    for real in steps:
        result = await env.predict_step(task, history, observation, real.action, seed=real.seed)
        if result.truncated:  # an unusable answer: the simulated episode ends here, this step scores zero
            break
        scores.append(score_prediction(real, result.observation.state, result.reward, result.terminated))
        if result.terminated and not real.terminated:
            break
        history.append((observation, real.action))
        observation = result.observation
    await env.aclose()
    return [*scores, *[None] * (len(steps) - len(scores))]


async def open_loop_drift(
    predictors: Mapping[str, ExperienceModel],
    episodes: Sequence[Sequence[Step]],
    *,
    horizon: int,
    store: ReplayStore | None,
    neighbours: int = 3,
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    concurrency: int = 8,
) -> dict[str, list[DriftPoint]]:
    """Drift curves (k = 1..horizon) of each predictor over the real episodes, replayed concurrently."""
    limiter = anyio.CapacityLimiter(concurrency)
    curves: dict[str, list[DriftPoint]] = {}
    for name, model in predictors.items():
        rows: list[list[StepScore | None]] = [[] for _ in episodes]

        async def one(
            n: int, episode: Sequence[Step], model: ExperienceModel, rows: list[list[StepScore | None]], phase: Phase
        ) -> None:
            async with limiter:
                rows[n] = await replay_episode(
                    model, episode, horizon=horizon, store=store, neighbours=neighbours,
                    exclude_task_seeds=exclude_task_seeds,
                )  # fmt: skip
            phase.advance()

        with progress(f"open loop: {name}", total=len(episodes), unit="episodes") as phase:
            async with anyio.create_task_group() as group:
                for n, episode in enumerate(episodes):
                    group.start_soon(one, n, episode, model, rows, phase)
        curves[name] = drift_curve(rows, horizon)
    return curves


def drift_curve(rows: Sequence[Sequence[StepScore | None]], horizon: int) -> list[DriftPoint]:
    """Per depth, the means over the episodes that reach it (see :class:`DriftPoint`)."""

    def mean(values: Sequence[float]) -> float:
        return round(statistics.fmean(values), 4) if values else 0.0

    points = []
    for k in range(1, horizon + 1):
        reached = [row[k - 1] for row in rows if len(row) >= k]
        if not reached:
            break
        running = [s for s in reached if s is not None and not s.failed]
        points.append(
            DriftPoint(
                k=k,
                n=len(reached),
                running=len(running),
                similarity=mean([s.similarity if s else 0.0 for s in reached]),
                f1=mean([s.f1 if s else 0.0 for s in reached]),
                reward_accuracy=mean([float(s.reward_correct) if s else 0.0 for s in reached]),
                similarity_running=mean([s.similarity for s in running]),
                f1_running=mean([s.f1 for s in running]),
            )
        )
    return points
