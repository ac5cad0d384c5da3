"""The chat agent: any :class:`~dreamgym.core.protocols.TextBackend` as a policy."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dreamgym.agents._prompt import agent_messages, parse_agent_answer
from dreamgym.core.errors import ConfigError
from dreamgym.core.protocols import PolicyDecision, Sampling, TextBackend
from dreamgym.core.types import Observation, Step, Task

__all__ = ["ChatAgent", "ChatAgentConfig"]

_CLOSE = "</action>"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatAgentConfig:
    """How :class:`ChatAgent` asks its model."""

    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=1.0, max_new_tokens=512))
    """How answers are sampled. A ``seed`` here seeds the agent's own random
    generator, which draws a fresh seed for every request: a group of episodes
    then differs, and a rerun of the same calls repeats them. A ``"</action>"``
    stop string is allowed: the closing tag the server cuts off is put back."""
    history_actions: int = 5
    """How many of the last actions the prompt shows (0: none)."""
    actions: tuple[str, ...] | None = None
    """Names of the actions the prompt lists; ``None`` lists them all."""

    def __post_init__(self) -> None:
        if self.history_actions < 0:
            raise ConfigError(f"ChatAgentConfig.history_actions must be >= 0, got {self.history_actions}")


class ChatAgent:
    """A policy that asks a chat model for ``<think>…</think><action>…</action>``.

    The prompt (see :func:`~dreamgym.agents.agent_messages`) shows the goal,
    the last actions, the observation and the action list. An answer that
    does not hold exactly one valid action becomes an invalid action, which
    the environment answers with ``last_action_error``; the model's reasoning
    is kept in ``PolicyDecision.reasoning``. No token record: the model's
    tokens stay on its server.

    Args:
        backend: The chat model, e.g. :class:`dreamgym.simulator.OpenAIBackend`.
        config: Sampling and prompt settings.

    Example:
        >>> agent = ChatAgent(OpenAIBackend(model="Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1"))
        >>> decision = await agent.act(task, [], observation)
    """

    def __init__(self, backend: TextBackend, config: ChatAgentConfig | None = None) -> None:
        self.backend = backend
        self.config = config or ChatAgentConfig()
        self.policy_id = f"chat:{backend.backend_id}"
        seed = self.config.sampling.seed
        self._seeds = random.Random(seed) if seed is not None else None

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        """Ask the model for the next action.

        Raises:
            BackendError: The backend failed after its own retries.
        """
        config = self.config
        messages = agent_messages(
            task, history, observation, history_actions=config.history_actions, actions=config.actions
        )
        sampling = config.sampling
        if self._seeds is not None:
            sampling = replace(sampling, seed=self._seeds.randrange(2**31))
        completion = await self.backend.complete(messages, sampling)
        text = completion.text
        if _CLOSE in sampling.stop and completion.finish_reason == "stop" and _CLOSE not in text and "<action>" in text:
            text += _CLOSE  # the server cut the stop string off
        action, reasoning = parse_agent_answer(text)
        return PolicyDecision(action=action, reasoning=reasoning)
