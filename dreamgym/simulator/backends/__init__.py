"""Text backends for the experience model (and the agents): OpenAI-compatible servers and in-process transformers."""

from dreamgym.simulator.backends._local import LocalBackend, weights_digest
from dreamgym.simulator.backends._openai import OpenAIBackend

__all__ = ["LocalBackend", "OpenAIBackend", "weights_digest"]
