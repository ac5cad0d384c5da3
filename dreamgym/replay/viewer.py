"""``dreamgym replay view``: a store's episodes as one self-contained HTML page.

Each episode lists its steps (the page, the action, the reward); a real
step that shadow mode predicted shows the simulator's page beside the real
one as a line diff, with both rewards and ends. The page is drawn by
:mod:`dreamgym.render` (the renderer of the demo's and ``validate``'s
reports): no script, nothing fetched, filters by task, source, outcome,
policy and experience model that work by CSS alone. :class:`ViewFilter`
chooses which episodes go on the page at all, so a large store still makes
a page a browser can open.

Example:
    >>> async with LmdbReplayStore("runs/store", readonly=True) as store:
    ...     html, counts = await trajectory_page(store, ViewFilter(source="real", limit=50))
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from html import escape

import anyio

from dreamgym.core.errors import ConfigError
from dreamgym.core.types import Episode, Source, Step, decode_record, outcome_reward
from dreamgym.render import MAX_PAGE_CHARS, EpisodeView, StepView, TrajectoryStep, page, trajectory_list
from dreamgym.replay._shadow import NOT_STORED, shadow_predictions
from dreamgym.replay.store import LmdbReplayStore

__all__ = ["ViewCounts", "ViewFilter", "trajectory_page"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewFilter:
    """Which episodes go on the page: all that match every given condition, the newest ``limit`` of them."""

    tasks: tuple[str, ...] = ()
    """Task ids or shell-style patterns (``miniwob/click-*``); empty: every task."""
    source: Source | None = None
    policy: str = ""
    """A part of the policy id (``chat:``, a checkpoint's name); empty: any policy."""
    experience_model: str = ""
    """A part of the experience model id (synthetic episodes); empty: any or none."""
    min_reward: float | None = None
    """Episodes whose outcome reward is at least this (a cut episode has none and is left out)."""
    max_reward: float | None = None
    limit: int = 200
    """At most this many episodes, the newest first."""

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ConfigError(f"ViewFilter.limit must be >= 1, got {self.limit}")
        if self.source not in (None, "real", "synthetic"):
            raise ConfigError(f"ViewFilter.source must be 'real' or 'synthetic', not {self.source!r}")

    def admits(self, episode: Episode) -> bool:
        if self.tasks and not any(fnmatch.fnmatchcase(episode.task_id, pattern) for pattern in self.tasks):
            return False
        if self.source is not None and episode.source != self.source:
            return False
        if self.policy not in episode.policy_id or self.experience_model not in episode.experience_model_id:
            return False
        if self.min_reward is None and self.max_reward is None:
            return True
        reward = outcome_reward(episode)
        if reward is None:
            return False
        return (self.min_reward is None or reward >= self.min_reward) and (
            self.max_reward is None or reward <= self.max_reward
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewCounts:
    """How many episodes the store holds, how many matched the filter, how many the page shows."""

    episodes: int
    matched: int
    shown: int
    shadowed_steps: int
    """Steps shown beside a simulator's prediction."""


async def trajectory_page(
    store: LmdbReplayStore, filters: ViewFilter | None = None, *, title: str = "dreamgym trajectories"
) -> tuple[str, ViewCounts]:
    """The page (HTML) of the store's episodes that ``filters`` admits, and the counts it shows."""
    filters = filters or ViewFilter()
    everything = await anyio.to_thread.run_sync(_episodes, store)
    matched = [episode for episode in everything if filters.admits(episode)]
    matched.sort(key=lambda e: (e.started_at, e.episode_id), reverse=True)
    chosen = matched[: filters.limit]
    views = [await _view(store, episode) for episode in chosen]
    shadowed = sum(step.shadow is not None for view in views for step in view.steps)
    counts = ViewCounts(episodes=len(everything), matched=len(matched), shown=len(views), shadowed_steps=shadowed)
    summary = (
        f"{counts.shown} of the {counts.matched} matching episodes (the newest first; the store holds "
        f"{counts.episodes}); {shadowed} real steps shown beside the simulator's prediction of them (red: only the "
        "real page has the line; green: only the prediction has it). The buttons filter the list."
    )
    body = [f"<h1>{escape(title)}</h1>", f'<p class="muted">{escape(summary)}</p>', trajectory_list(views)]
    return page(title, body), counts


def _episodes(store: LmdbReplayStore) -> list[Episode]:
    return [decode_record(data, Episode) for _key, data in store.iter_records("episodes")]


async def _view(store: LmdbReplayStore, episode: Episode) -> EpisodeView:
    from dreamgym.simulator import score_prediction  # the page figures of a shadowed step

    steps = sorted(await store.episode_steps(episode.episode_id), key=lambda s: s.step_index)
    guesses, reasons = await shadow_predictions(store, steps) if episode.source == "real" else ((), ())
    shadowed = any(reason != NOT_STORED for reason in reasons)  # run in shadow mode: show every step's outcome
    shown = []
    for n, step in enumerate(steps):
        shadow = None
        if shadowed:
            guess = guesses[n]
            score = (
                score_prediction(step, guess.next_observation.state, guess.reward, guess.terminated) if guess else None
            )
            shadow = StepView.of(step, guess, similarity=score.similarity if score else 0.0,
                                 f1=score.f1 if score else 0.0, error=reasons[n])  # fmt: skip
        shown.append(_step(step, shadow))
    task = await store.get_task(episode.task_id)
    goal = (steps[0].observation.goal if steps else "") or (task.instruction if task else "")
    return EpisodeView(
        episode_id=episode.episode_id,
        task_id=episode.task_id,
        source=episode.source,
        seed=episode.seed,
        goal=goal,
        policy_id=episode.policy_id,
        experience_model_id=episode.experience_model_id,
        reward=outcome_reward(episode),
        success=episode.success,
        cut=episode.cut_reason,
        steps=tuple(shown),
    )


def _step(step: Step, shadow: StepView | None) -> TrajectoryStep:
    return TrajectoryStep(
        step_index=step.step_index,
        action=str(step.action),
        state=step.observation.state[:MAX_PAGE_CHARS],
        next_state=step.next_observation.state[:MAX_PAGE_CHARS],
        reward=step.reward,
        done=step.done,
        error=step.next_observation.last_action_error,
        shadow=shadow,
    )
