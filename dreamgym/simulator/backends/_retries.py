"""Retries that do not sample: a served model that answers a sampled retry with the text it gave before.

The experience model retries a malformed answer at a temperature above 0
with a new seed, so that the retry can differ. Some servers do not sample
when asked: ``transformers serve`` samples only when the served model's
``generation_config.json`` says ``"do_sample": true``, whatever the request's
temperature, so every retry repeats the first, greedy answer and the run
goes on with salvaged pages. :class:`RetryWatch` counts such repeats and,
once they are the rule rather than chance, logs one warning that names the
server and what to change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["REPEATS_BEFORE_WARNING", "RetryWatch", "repeated_retry_advice"]

log = logging.getLogger(__name__)

REPEATS_BEFORE_WARNING = 3
"""Sampled retries that must repeat the attempt before them before :class:`RetryWatch` warns."""

GUIDE = "docs/guides/served-models.md"


def repeated_retry_advice(backend_id: str, base_url: str | None) -> str:
    """What to change when the server at ``base_url`` does not sample: one line."""
    where = f"the server at {base_url}" if base_url else backend_id
    return (
        f"{where} does not sample: retries asked at a temperature above 0 came back with the text of the attempt "
        "before them, so retries cannot fix a malformed answer. `transformers serve` samples only when the served "
        'model\'s generation_config.json sets "do_sample": true (add it, with "top_k": 0 to sample as in process); '
        f"other servers: see {GUIDE}. Or turn retries off (--sim-attempts 1)"
    )


@dataclass(slots=True)
class RetryWatch:
    """Counts a backend's sampled retries that repeated the attempt before them; warns once when most do.

    A confident model may repeat itself at a temperature above 0 now and
    then; a server that does not sample repeats itself every time. So the
    warning waits for :data:`REPEATS_BEFORE_WARNING` repeats that outnumber
    the retries that differed.

    Example:
        >>> watch = RetryWatch(backend_id="openai:sim@127.0.0.1:8000", base_url="http://127.0.0.1:8000/v1")
        >>> watch.answered(previous="<state>", text="<state>", temperature=0.7)
        True
    """

    backend_id: str
    base_url: str | None = None
    """The server's URL; ``None`` for an in-process backend, which is counted but never warned about."""
    repeated: int = 0
    """Sampled retries whose text was the attempt before's."""
    differed: int = 0
    """Sampled retries whose text differed from the attempt before's."""
    warned: bool = False

    def answered(self, *, previous: str, text: str, temperature: float) -> bool:
        """Note a retry's answer; returns whether it repeated ``previous`` (only sampled retries count)."""
        if temperature <= 0:
            return False
        if text != previous:
            self.differed += 1
            return False
        self.repeated += 1
        if self._should_warn():
            self.warned = True
            log.warning(
                "%s: %d of %d retries repeated the attempt before them. %s",
                self.backend_id,
                self.repeated,
                self.repeated + self.differed,
                repeated_retry_advice(self.backend_id, self.base_url),
            )
        return True

    def _should_warn(self) -> bool:
        served = self.base_url is not None
        return served and not self.warned and self.repeated >= REPEATS_BEFORE_WARNING and self.repeated > self.differed
