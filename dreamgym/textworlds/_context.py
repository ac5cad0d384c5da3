"""How long a text-world episode is to a local policy: the context its model needs.

A :class:`~dreamgym.agents.LocalPolicy` feeds its model the whole episode as one sequence (each turn's user
message appended after the last reply, so GRPO differentiates exactly what was drawn). A text world's turn is
long: the room's description, the game's answer, the inventory, every admissible command as a button and again
as a labelled choice, and the objective. On ``COOKING_FAMILY`` a turn is 935 tokens of the tiny index
policy's tokenizer on average and 1,437 at most (``benchmarks/probes/textworld_lines.py``, 255 steps of 20
games), so its default 4,096 positions hold three or four turns and a five-command walkthrough does not fit.
Give the policy :func:`policy_context` positions for the step limit it plays under::

    shape = dataclasses.replace(TINY_POLICY, max_positions=policy_context(max_steps=8))
    model, tokenizer = tiny_index_policy(pages, shape)

The tiny policy's Llama has rotary positions, so a longer context adds no weights; it costs attention time
(quadratic in the episode's length), which is why the step limit, not a fixed large number, sets it.
"""

from __future__ import annotations

from dreamgym.core.errors import ConfigError

__all__ = ["TURN_TOKENS", "policy_context"]

TURN_TOKENS = 1536
"""An upper bound on one turn of a text-world episode (user message and reply) in a tokenizer trained on the
family's pages: the longest of ``COOKING_FAMILY``'s seen was 1,437 tokens (rooms a line per sentence; 1,383
with a line per paragraph), the mean 935."""


def policy_context(max_steps: int, *, turn_tokens: int = TURN_TOKENS) -> int:
    """The positions a local policy needs for a text-world episode of up to ``max_steps`` steps.

    The system turn and each step's turn at most ``turn_tokens`` each, rounded up to a multiple of 1,024.

    Raises:
        ConfigError: ``max_steps`` or ``turn_tokens`` is below 1.

    Example:
        >>> policy_context(8)
        14336
    """
    if max_steps < 1 or turn_tokens < 1:
        raise ConfigError(f"policy_context needs max_steps >= 1 and turn_tokens >= 1, got {max_steps}, {turn_tokens}")
    needed = (max_steps + 1) * turn_tokens
    return -(-needed // 1024) * 1024
