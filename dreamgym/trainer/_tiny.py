"""A tiny ``index`` policy built from scratch: fast enough for hundreds of GRPO updates on 2 CPU cores.

SmolLM2-135M costs ~70 s a GRPO update here. A ~1M-parameter Llama with a
byte-level BPE tokenizer trained on the site's own pages, answering with one
label token per decision (:data:`~dreamgym.agents.INDEX_TOKENS`), costs one
forward pass of a few hundred tokens per decision: exact under stock TRL,
every answer a listed action (typed text included, from the goal's quoted
spans), and no gains spent on an output format. It starts at chance; a
behaviour-cloning warm start (:func:`~dreamgym.trainer.warm_start`) on part of
the demonstrator episodes gives RL somewhere to start from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dreamgym.agents import INDEX_TOKENS, add_index_tokens, system_message, user_message
from dreamgym.core.actions import candidate_actions
from dreamgym.core.state import parse_state
from dreamgym.core.types import Observation, Task
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer

__all__ = ["TinyPolicyConfig", "tiny_index_policy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyPolicyConfig:
    """The tiny policy's size (defaults: ~1.1M parameters, a 4,096-token context)."""

    vocab_size: int = 2000
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 4096
    """The context cap: an episode whose ids outgrow it ends with a clear error."""
    seed: int = 0


def tiny_index_policy(
    pages: Sequence[tuple[Task, Observation]], config: TinyPolicyConfig | None = None, *, out_dir: Path | None = None
) -> tuple[Any, Any]:
    """A new tiny causal LM and its tokenizer (trained on the prompts of ``pages``), with the label tokens.

    ``pages`` are (task, observation) pairs of the site (a demonstrator's
    pages, say): the tokenizer learns the words of their user messages as an
    ``index`` policy shows them. With ``out_dir`` both are saved there, for
    :meth:`~dreamgym.agents.LocalPolicy.load`.
    """
    config = config or TinyPolicyConfig()
    texts = [system_message("index", list_actions=False)]
    for task, observation in pages:
        goal = observation.goal or task.instruction
        choices = candidate_actions(parse_state(observation.state), goal)[: len(INDEX_TOKENS)]
        texts.append(user_message(goal, observation, choices=choices))
    tokenizer = train_tokenizer(texts, config.vocab_size)
    shape = ScratchModelConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        layers=config.layers,
        heads=config.heads,
        kv_heads=config.kv_heads,
        intermediate_size=config.intermediate_size,
        max_positions=config.max_positions,
    )
    model = scratch_model(tokenizer, shape, seed=config.seed)
    add_index_tokens(model, tokenizer)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return model, tokenizer
