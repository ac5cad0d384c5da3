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
from pathlib import Path
from typing import Any

from dreamgym.agents import INDEX_TOKENS, add_index_tokens, system_message, user_message
from dreamgym.core.actions import candidate_actions
from dreamgym.core.state import parse_state
from dreamgym.core.types import Observation, Task
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer

__all__ = ["TINY_POLICY", "tiny_index_policy"]


TINY_POLICY = ScratchModelConfig(
    vocab_size=2000, hidden_size=128, layers=4, heads=4, kv_heads=2, intermediate_size=384, max_positions=4096
)
"""The tiny policy's default shape: ~1.05M parameters, a 4,096-token context (an episode whose ids
outgrow it ends with a clear error)."""


def tiny_index_policy(
    pages: Sequence[tuple[Task, Observation]],
    shape: ScratchModelConfig = TINY_POLICY,
    *,
    seed: int = 0,
    out_dir: Path | None = None,
) -> tuple[Any, Any]:
    """A new tiny causal LM and its tokenizer (trained on the prompts of ``pages``), with the label tokens.

    ``pages`` are (task, observation) pairs of the site (a demonstrator's
    pages, say): the tokenizer learns the words of their user messages as an
    ``index`` policy shows them. With ``out_dir`` both are saved there, for
    :meth:`~dreamgym.agents.LocalPolicy.load`.
    """
    texts = [system_message("index", list_actions=False)]
    for task, observation in pages:
        goal = observation.goal or task.instruction
        choices = candidate_actions(parse_state(observation.state), goal)[: len(INDEX_TOKENS)]
        texts.append(user_message(goal, observation, choices=choices))
    tokenizer = train_tokenizer(texts, shape.vocab_size)
    model = scratch_model(tokenizer, shape, seed=seed)
    add_index_tokens(model, tokenizer)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return model, tokenizer
