"""Text backends for the experience model (and the agents): OpenAI-compatible servers and in-process transformers;
what a server honours (:func:`check_server`) and retries it answers without sampling (:class:`RetryWatch`)."""

from dreamgym.simulator.backends._check import STRUCTURED_FIELDS, ServerCheck, check_server, structured_fields
from dreamgym.simulator.backends._local import LocalBackend, weights_digest
from dreamgym.simulator.backends._openai import OpenAIBackend
from dreamgym.simulator.backends._retries import REPEATS_BEFORE_WARNING, RetryWatch, repeated_retry_advice

__all__ = [
    "REPEATS_BEFORE_WARNING",
    "STRUCTURED_FIELDS",
    "LocalBackend",
    "OpenAIBackend",
    "RetryWatch",
    "ServerCheck",
    "check_server",
    "repeated_retry_advice",
    "structured_fields",
    "weights_digest",
]
