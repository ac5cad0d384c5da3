"""One trainer, three modes (synthetic, mixed, sim2real): multi-turn GRPO with LoRA through TRL.

Filled in by its own issue; it builds on ``dreamgym.core`` and talks to its siblings only through
the protocols there.
"""

__all__: list[str] = []
