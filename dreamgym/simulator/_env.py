"""``SimulatedEnv``: the experience model behind the Environment protocol.

What is decided by rule, without the model (as the real side decides it):
an unparseable action or an id the page does not have comes back with
``last_action_error``, reward 0 and the page unchanged; a step after the end
says the episode is over. Everything else is the model's prediction, held to
the simulator's rules (``_rules``): ``stop`` always ends the episode (the model
predicts its reward), and typed text stays in the field it was typed into. A prediction that
stays malformed after the model's retries ends the episode as truncated with
reason ``model_output``; a failing backend as truncated with ``backend``. Both
are counted in :attr:`SimulatedEnv.stats`, never raised.

Leakage rule: ``exclude_episodes`` and ``exclude_task_seeds`` are removed from
retrieval and from the real first pages episodes start on. Whoever evaluates
the simulator on held-out data passes the episode under evaluation and every
held-out (task, seed) here; they are the same lists SFT data building takes.
A shadow prediction of a real step (:meth:`SimulatedEnv.predict_step` with
``exclude_task_seeds``) also leaves out the step's own (task, seed): its own
episode, already committed, and its siblings from the same start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from dreamgym.core.actions import action_error
from dreamgym.core.errors import BackendError, ConfigError, ModelOutputError
from dreamgym.core.protocols import ExperienceModel, ExperienceQuery, Neighbour, ReplayStore, StepResult
from dreamgym.core.state import parse_state
from dreamgym.core.types import Action, Observation, Source, Task
from dreamgym.replay.embedders import transition_text
from dreamgym.simulator._rules import apply_rules

__all__ = ["SimulatedEnv", "SimulatorConfig", "SimulatorStats", "real_start", "real_start_pages"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatorConfig:
    """How a :class:`SimulatedEnv` runs episodes."""

    max_steps: int = 30
    """Step limit when the task sets none; the last step is then truncated (``step_limit``)."""
    neighbours: int = 3
    """Real transitions retrieved per step for the prompt (the template shows at most its own k)."""
    same_site: bool = True
    """Retrieve only from the task's site when it has one."""
    exclude_episodes: tuple[str, ...] = ()
    """Episodes retrieval must never return (the leakage rule)."""
    exclude_task_seeds: tuple[tuple[str, int | None], ...] = ()
    """(task id, seed) pairs retrieval must never return; ``None`` as seed excludes every seed."""
    real_starts: bool = True
    """Start from a real first page of the task when the store has one; else the model writes it."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigError("SimulatorConfig.max_steps must be >= 1")
        if self.neighbours < 0:
            raise ConfigError("SimulatorConfig.neighbours must be >= 0")


@dataclass(slots=True)
class SimulatorStats:
    """Counters of one simulated environment (``sim/...`` metrics)."""

    episodes: int = 0
    steps: int = 0
    rule_steps: int = 0
    """Steps answered by rule (invalid action, missing element) without the model."""
    typed_text_rule: int = 0
    """Predictions whose typed field the typed-text rule corrected (``_rules``)."""
    selected_option_rule: int = 0
    """Predictions whose chosen option the selected-option rule corrected (``_rules``)."""
    checked_rule: int = 0
    """Predictions whose check controls the check rule corrected (``_rules``): the clicked one flipped, the others
    as they were. A small model's answer that applies may still mark another box than the clicked one."""
    truncated_model_output: int = 0
    truncated_backend: int = 0
    real_starts: int = 0
    predicted_starts: int = 0

    def as_metrics(self) -> dict[str, int]:
        return {f"sim/env_{key}": value for key, value in asdict(self).items()}


@dataclass(slots=True)
class _Episode:
    task: Task
    seed: int | None
    observation: Observation
    history: list[tuple[Observation, Action]] = field(default_factory=list)
    over: bool = False

    @property
    def max_steps(self) -> int:
        return self.task.max_steps


class SimulatedEnv:
    """An :class:`~dreamgym.core.protocols.Environment` whose steps an experience model predicts.

    Args:
        model: The experience model.
        store: Where retrieval and real first pages come from; ``None`` runs
            without either (the model then writes every first page).
        config: Step limit, retrieval and the leakage rule's exclusions.

    Example:
        >>> env = SimulatedEnv(model, store=store)
        >>> obs = await env.reset(task, seed=3)
        >>> result = await env.step(parse_action('click [e3] "Submit"'))
    """

    source: Source = "synthetic"

    def __init__(
        self, model: ExperienceModel, *, store: ReplayStore | None = None, config: SimulatorConfig | None = None
    ) -> None:
        self.model = model
        self.store = store
        self.config = config or SimulatorConfig()
        self.stats = SimulatorStats()
        self._episode: _Episode | None = None
        self._starts: dict[str, list[tuple[int | None, Observation]]] = {}

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Start an episode from the task's real first page, or one the model writes."""
        observation = await self._first_page(task, seed)
        return self.start_from(task, observation, seed=seed)

    def start_from(
        self,
        task: Task,
        observation: Observation,
        *,
        seed: int | None = None,
        history: Sequence[tuple[Observation, Action]] = (),
    ) -> Observation:
        """Start an episode at a given observation: a group's shared start, or a real state to branch from.

        ``history`` is what led there (a real prefix when branching); the
        prompt shows its last steps and the step limit counts them.
        """
        parse_state(observation.state)  # refuse a start the model could never continue
        self.stats.episodes += 1
        self._episode = _Episode(task=task, seed=seed, observation=observation, history=list(history))
        return observation

    async def step(self, action: Action) -> StepResult:
        episode = self._episode
        if episode is None or episode.over:
            current = episode.observation if episode else Observation(state="")
            error = "the episode is over; call reset() to start another"
            return StepResult(
                observation=msgspec.structs.replace(current, last_action_error=error),
                reward=0.0,
                terminated=False,
                truncated=False,
            )
        result = await self.predict_step(episode.task, episode.history, episode.observation, action, seed=episode.seed)
        if result.truncated:
            episode.over = True
            return result
        return self._advance(episode, action, result.observation, result.reward, result.terminated, dict(result.info))

    async def predict_step(
        self,
        task: Task,
        history: Sequence[tuple[Observation, Action]],
        observation: Observation,
        action: Action,
        *,
        seed: int | None = None,
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> StepResult:
        """What the simulator says ``action`` does from ``observation``, leaving the episode alone.

        ``step`` is this plus the episode's bookkeeping; shadow mode calls it
        beside each real step, with that step's (task, seed) in
        ``exclude_task_seeds`` (retrieval then skips them, on top of the
        config's exclusions). A prediction that fails comes back truncated
        (``model_output`` or ``backend``) with the page unchanged.
        """
        self.stats.steps += 1
        error = action_error(action, parse_state(observation.state))
        if error:
            self.stats.rule_steps += 1
            failed = msgspec.structs.replace(observation, last_action_error=error)
            by_rule = {"rule": True, "experience_model_id": self.model.model_id}
            return StepResult(observation=failed, reward=0.0, terminated=False, truncated=False, info=by_rule)
        query = ExperienceQuery(
            task=task,
            history=tuple(history),
            observation=observation,
            action=action,
            neighbours=await self._neighbours(task, observation, action, exclude_task_seeds),
            seed=seed,
        )
        info: dict[str, Any] = {"experience_model_id": self.model.model_id}
        try:
            prediction = await self.model.predict(query)
        except ModelOutputError as exc:
            self.stats.truncated_model_output += 1
            return self._cut(task, observation, "model_output", str(exc), info)
        except BackendError as exc:
            self.stats.truncated_backend += 1
            return self._cut(task, observation, "backend", str(exc), info)
        prediction, rules = apply_rules(query, prediction)
        self.stats.typed_text_rule += "typed_text" in rules
        self.stats.selected_option_rule += "selected_option" in rules
        self.stats.checked_rule += "checked" in rules
        info.update(
            experience_model_id=prediction.model_id or self.model.model_id,
            prompt_template_id=prediction.template_id,
            reasoning=prediction.reasoning,
            neighbours=[n.seq for n in query.neighbours],
            **({"rules": list(rules)} if rules else {}),
        )
        return StepResult(
            observation=prediction.observation,
            reward=prediction.reward,
            terminated=prediction.terminated,
            truncated=False,
            info=info,
        )

    def _advance(
        self,
        episode: _Episode,
        action: Action,
        observation: Observation,
        reward: float,
        terminated: bool,
        info: dict[str, Any],
    ) -> StepResult:
        episode.history.append((episode.observation, action))
        episode.observation = observation
        limit = episode.max_steps or self.config.max_steps
        truncated = not terminated and len(episode.history) >= limit
        episode.over = terminated or truncated
        return StepResult(
            observation=observation,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            truncation_reason="step_limit" if truncated else "",
            info=info,
        )

    def _cut(self, task: Task, observation: Observation, reason: str, error: str, info: dict[str, Any]) -> StepResult:
        log.info("simulated step of %s truncated (%s): %s", task.task_id, reason, error)
        return StepResult(
            observation=observation,
            reward=0.0,
            terminated=False,
            truncated=True,
            truncation_reason=reason,
            info={**info, "error": error},
        )

    async def _neighbours(
        self,
        task: Task,
        observation: Observation,
        action: Action,
        exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    ) -> tuple[Neighbour, ...]:
        if self.store is None or self.config.neighbours == 0:
            return ()
        text = transition_text(observation.goal or task.instruction, str(action), observation.state)
        found = await self.store.nearest(
            text,
            self.config.neighbours,
            source="real",
            site=task.site or None if self.config.same_site else None,
            exclude_episodes=self.config.exclude_episodes,
            exclude_task_seeds=(*self.config.exclude_task_seeds, *exclude_task_seeds),
        )
        return tuple(found)

    async def _first_page(self, task: Task, seed: int | None) -> Observation:
        if self.config.real_starts and self.store is not None:
            if task.task_id not in self._starts:
                self._starts[task.task_id] = await real_start_pages(
                    self.store,
                    task.task_id,
                    exclude_episodes=self.config.exclude_episodes,
                    exclude_task_seeds=self.config.exclude_task_seeds,
                )
            pages = self._starts[task.task_id]
            if pages:
                self.stats.real_starts += 1
                return real_start(pages, seed)
        self.stats.predicted_starts += 1
        return await self.model.predict_initial(task, seed=seed)

    async def aclose(self) -> None:
        self._episode = None


async def real_start_pages(
    store: ReplayStore,
    task_id: str,
    *,
    exclude_episodes: Sequence[str] = (),
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
) -> list[tuple[int | None, Observation]]:
    """The first observations of a task's real episodes, one per seed, by seed.

    Held-out episodes and (task, seed) pairs (``None`` as seed: every seed of
    the task) are left out, as retrieval leaves them out.
    """
    held_out = set(exclude_task_seeds)
    if (task_id, None) in held_out:
        return []
    skipped = set(exclude_episodes)
    starts: dict[int | None, Observation] = {}
    for step in await store.get_steps(await store.task_seqs(task_id, source="real")):
        if (task_id, step.seed) in held_out or step.episode_id in skipped:
            continue
        if step.step_index == 0 and step.seed not in starts:
            starts[step.seed] = step.observation
    return sorted(starts.items(), key=lambda item: (item[0] is None, item[0] or 0))


def real_start(pages: Sequence[tuple[int | None, Observation]], seed: int | None) -> Observation:
    """The real first page for ``seed``: the one recorded with that seed, else one the seed picks."""
    for page_seed, page in pages:
        if page_seed == seed:
            return page
    return pages[(seed or 0) % len(pages)][1]
