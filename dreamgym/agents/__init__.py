"""Policies: an OpenAI-compatible chat agent, a local transformers policy with token records, scripted explorers.

- :class:`ChatAgent`: any text backend (an OpenAI-compatible server, a local
  model) asked for ``<think>…</think><action>…</action>``, parsed strictly.
- :class:`LocalPolicy`: an in-process causal LM that chooses among the
  state's candidate actions (:class:`CandidateScore`), draws the label token
  of a listed one (:data:`INDEX_TOKENS`, :func:`add_index_tokens`) or
  generates, and returns each turn's token ids and log-probabilities for the trainer;
  :func:`sequence_ids`, :func:`link_turns` and :func:`episode_sequence` turn
  an episode's records into the trainer's input.
- :class:`RandomExplorer`: a uniform choice among the candidate actions
  (the scripted MiniWoB demonstrators live with the bridge).
- The prompt as pure functions: :func:`render_observation`,
  :func:`user_message`, :func:`system_message`, :func:`agent_messages`, and
  the answer parser :func:`parse_agent_answer`.
"""

from dreamgym.agents._chat import ChatAgent, ChatAgentConfig
from dreamgym.agents._local import CandidateScore, LocalPolicy, LocalPolicyConfig
from dreamgym.agents._model import WeightsVersion, add_index_tokens, choice_logprobs
from dreamgym.agents._prompt import (
    IN_GOAL,
    INDEX_TOKENS,
    AnswerFormat,
    agent_messages,
    goal_first,
    parse_agent_answer,
    render_observation,
    system_message,
    user_message,
)
from dreamgym.agents._tokens import EpisodeSequence, episode_sequence, link_turns, sequence_ids
from dreamgym.agents.explorer import RandomExplorer

__all__ = [
    "INDEX_TOKENS",
    "IN_GOAL",
    "AnswerFormat",
    "CandidateScore",
    "ChatAgent",
    "ChatAgentConfig",
    "EpisodeSequence",
    "LocalPolicy",
    "LocalPolicyConfig",
    "RandomExplorer",
    "WeightsVersion",
    "add_index_tokens",
    "agent_messages",
    "choice_logprobs",
    "episode_sequence",
    "goal_first",
    "link_turns",
    "parse_agent_answer",
    "render_observation",
    "sequence_ids",
    "system_message",
    "user_message",
]
