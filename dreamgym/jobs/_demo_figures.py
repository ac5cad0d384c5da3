"""The demo's figures beyond the summary: the learning curve, the held-out fidelity by page change, example episodes.

All three are plain data in the :class:`~dreamgym.jobs.demo.DemoReport`, so
``report.json`` carries what ``report.html`` draws:

- :func:`training_curve`: per GRPO update, the mean outcome reward of the
  real and of the synthetic episodes it played (from the demo's store, where
  the trainer names its groups ``train/u<update>/...``) and of the groups TRL
  trained on (``train/reward`` in the trainer's ``metrics.jsonl``, which has
  no split by side);
- :func:`fidelity_by_change`: the experience model and the two baselines on
  the held-out real steps, on all of them and on those whose page changed or
  did not (``dreamgym.validate``'s figures);
- :func:`shadowed_episodes` and :func:`pick_examples`: the real rollout
  episodes with the simulator's shadow prediction of each step, and three of
  them to show step by step (one solved, one failed, the one the prediction
  differed most on).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from dreamgym.core.types import Episode, Step, decode_record, outcome_reward
from dreamgym.render import StepView
from dreamgym.replay._shadow import shadow_predictions

if TYPE_CHECKING:
    from dreamgym.core.protocols import ReplayStore
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.runtime import GroupResult
    from dreamgym.simulator import FidelitySummary, StepScore
    from dreamgym.validate import ValidationReport

__all__ = [
    "ALL_STEPS",
    "EpisodeExample",
    "Shadowed",
    "UpdateRewards",
    "as_plain",
    "fidelity_by_change",
    "pick_examples",
    "shadowed_episodes",
    "training_curve",
]

ALL_STEPS = "all held-out steps"
"""The first split of :func:`fidelity_by_change`; the others are ``page changed`` and ``page unchanged``."""
PREDICTORS = ("model", "copy_top_retrieved", "unchanged")
"""The experience model and the two baselines, in report order."""
_TRAIN_GROUP = re.compile(r"^train/u(\d+)/")


# ---------------------------------------------------------------------- the learning curve


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateRewards:
    """One GRPO update's episodes: the mean outcome reward of each side's (``None``: the side played none)."""

    update: int
    """1 for the first update."""
    real_reward: float | None
    real_episodes: int
    synthetic_reward: float | None
    """The simulator's say, not the site's."""
    synthetic_episodes: int
    trained_reward: float | None = None
    """TRL's mean reward over the groups it trained on in this update (both sides; ``metrics.jsonl``)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def training_curve(store: LmdbReplayStore, metrics: Path) -> tuple[UpdateRewards, ...]:
    """Per update, the played episodes' mean outcome reward by side, and TRL's ``train/reward``.

    Episodes the infrastructure ended (no outcome) are left out; groups played
    again in place of a flat one count in their update.
    """

    def read() -> list[Episode]:
        return [decode_record(value, Episode) for _, value in store.iter_records("episodes")]

    played: dict[int, dict[str, list[float]]] = {}
    for episode in await anyio.to_thread.run_sync(read):
        found = _TRAIN_GROUP.match(episode.group_id)
        reward = outcome_reward(episode)
        if found and reward is not None:
            sides = played.setdefault(int(found.group(1)) + 1, {"real": [], "synthetic": []})
            sides[episode.source].append(reward)
    trained = _trained_rewards(metrics)
    return tuple(
        UpdateRewards(
            update=update,
            real_reward=_mean(played.get(update, {}).get("real", [])),
            real_episodes=len(played.get(update, {}).get("real", [])),
            synthetic_reward=_mean(played.get(update, {}).get("synthetic", [])),
            synthetic_episodes=len(played.get(update, {}).get("synthetic", [])),
            trained_reward=trained[update - 1] if update <= len(trained) else None,
        )
        for update in range(1, max([*played, len(trained)], default=0) + 1)
    )


def _trained_rewards(metrics: Path) -> list[float]:
    """``train/reward`` of each update, in order: the trainer logs one ``train`` row with a loss per update."""
    if not metrics.exists():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [float(r["train/reward"]) for r in rows if r.get("kind") == "train" and "train/loss" in r]


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


# ---------------------------------------------------------------------- held-out fidelity


def fidelity_by_change(report: ValidationReport) -> dict[str, dict[str, FidelitySummary]]:
    """Split → predictor → summary: all held-out steps, then those whose real page changed, then the rest."""
    splits = {ALL_STEPS: {name: report.one_step[name] for name in PREDICTORS if name in report.one_step}}
    for split in ("page changed", "page unchanged"):
        rows = {name: groups[split] for name, groups in report.by_change.items() if split in groups}
        if rows:
            splits[split] = {name: rows[name] for name in PREDICTORS if name in rows}
    return splits


# ---------------------------------------------------------------------- example episodes


@dataclass(frozen=True, slots=True, kw_only=True)
class Shadowed:
    """A real rollout episode and the simulator's shadow prediction of each of its steps."""

    episode: Episode
    steps: tuple[Step, ...]
    guesses: tuple[Step | None, ...]
    """The stored shadow step of each real step; ``None`` where it is missing or unusable."""
    reasons: tuple[str, ...]
    """Why a guess is ``None``; ``""`` elsewhere."""


async def shadowed_episodes(store: ReplayStore, results: Sequence[GroupResult]) -> list[Shadowed]:
    """Every real episode of ``results`` beside its shadow predictions (episode ``<episode id>/shadow``).

    A step with no stored prediction (it raised) or a cut one (malformed after
    retries, a backend error) has no guess.
    """
    out = []
    for result in results:
        if result.source != "real":
            continue
        for rollout in result.rollouts:
            guesses, reasons = await shadow_predictions(store, rollout.steps)
            out.append(Shadowed(episode=rollout.episode, steps=rollout.steps, guesses=guesses, reasons=reasons))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeExample:
    """A real episode shown step by step beside the simulator's predictions."""

    why: str
    """Why it was chosen: ``solved``, ``failed``, ``prediction differed most`` (or, where there is no solved or no
    failed episode, ``next most different``)."""
    task_id: str
    seed: int | None
    episode_id: str
    success: bool
    reward: float
    """The real outcome reward."""
    similarity: float
    """Mean line similarity of the predicted and the real next pages (an unusable prediction counts 0)."""
    reward_correct: int
    """Steps whose predicted reward was within 0.5 of the real one."""
    steps: tuple[StepView, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "steps"}, "steps": [s.as_dict() for s in self.steps]}


def pick_examples(shadowed: Sequence[Shadowed], count: int = 3) -> tuple[EpisodeExample, ...]:
    """One solved episode, one failed and the one the prediction differed most on (others where one is missing).

    Solved and failed: the longest of their kind (more steps to see); differed
    most: the lowest mean of line similarity, element F1 and right reward and
    end over its steps. Episodes the infrastructure cut are never chosen, nor
    one that played as a chosen one did (a group's episodes start from one
    page, and a policy that has learnt the task often takes the same actions in
    several): fewer examples rather than one shown twice.
    """
    scored = [(item, _scores(item)) for item in shadowed if not item.episode.cut_reason and item.steps]
    scored.sort(key=lambda pair: (pair[0].episode.task_id, pair[0].episode.seed or 0, pair[0].episode.episode_id))
    longest = sorted(scored, key=lambda pair: -len(pair[0].steps))
    worst = sorted(scored, key=lambda pair: _goodness(pair[1]))
    wanted = (
        ("solved", [p for p in longest if p[0].episode.success]),
        ("failed", [p for p in longest if not p[0].episode.success]),
        ("prediction differed most", worst),
    )
    chosen: list[EpisodeExample] = []
    taken: set[tuple[object, ...]] = set()
    for why, ranked in (*wanted, ("next most different", worst)):
        pick = next((p for p in ranked if _played(p[0]) not in taken), None)
        if pick is not None and len(chosen) < count:
            taken.add(_played(pick[0]))
            chosen.append(_example(why, *pick))
    return tuple(chosen)


def _played(item: Shadowed) -> tuple[object, ...]:
    """What an episode shows: its task, seed, actions and their pages, rewards and ends, and the predictions."""
    steps = tuple((str(s.action), s.next_observation.state, s.reward, s.terminated) for s in item.steps)
    guesses = tuple(None if g is None else (g.next_observation.state, g.reward, g.terminated) for g in item.guesses)
    return (item.episode.task_id, item.episode.seed, steps, guesses)


def _scores(item: Shadowed) -> list[StepScore | None]:
    from dreamgym.simulator import score_prediction

    return [
        None if guess is None else score_prediction(step, guess.next_observation.state, guess.reward, guess.terminated)
        for step, guess in zip(item.steps, item.guesses, strict=True)
    ]


def _goodness(scores: Sequence[StepScore | None]) -> float:
    """Mean of similarity + F1 + reward right + end right over the steps (0 to 4; an unusable step is 0)."""
    total = sum(s.similarity + s.f1 + s.reward_correct + s.done_correct for s in scores if s is not None)
    return total / len(scores) if scores else 4.0


def _example(why: str, item: Shadowed, scores: Sequence[StepScore | None]) -> EpisodeExample:
    episode = item.episode
    views = tuple(
        _view(step, guess, score, reason)
        for step, guess, score, reason in zip(item.steps, item.guesses, scores, item.reasons, strict=True)
    )
    return EpisodeExample(
        why=why, task_id=episode.task_id, seed=episode.seed, episode_id=episode.episode_id, success=episode.success,
        reward=outcome_reward(episode) or 0.0,
        similarity=round(sum(s.similarity for s in scores if s is not None) / len(scores), 4),
        reward_correct=sum(1 for s in scores if s is not None and s.reward_correct), steps=views,
    )  # fmt: skip


def _view(step: Step, guess: Step | None, score: StepScore | None, reason: str) -> StepView:
    return StepView.of(step, guess, similarity=score.similarity if score else 0.0, f1=score.f1 if score else 0.0,
                       error=reason)  # fmt: skip


def as_plain(splits: Mapping[str, Mapping[str, FidelitySummary]]) -> dict[str, dict[str, object]]:
    """:func:`fidelity_by_change`'s table as JSON-ready data."""
    return {split: {name: summary.as_dict() for name, summary in rows.items()} for split, rows in splits.items()}
