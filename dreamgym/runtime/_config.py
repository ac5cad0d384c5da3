"""Settings of the runtime."""

from __future__ import annotations

from dataclasses import dataclass

from dreamgym.core.errors import ConfigError

__all__ = ["RuntimeConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeConfig:
    """How a :class:`~dreamgym.runtime.Runtime` schedules episodes.

    Example:
        >>> RuntimeConfig(real_concurrency=2, synthetic_concurrency=64, episode_deadline_s=300)
    """

    max_steps: int = 30
    """Step limit of an episode whose task sets none (``Task.max_steps``); a branched
    episode's real prefix counts. Reaching it truncates the last step (``step_limit``)."""
    episode_deadline_s: float | None = 600.0
    """Wall-clock limit of one episode, from its start (reset included) to its last step;
    past it the episode is cut and its last finished step truncated (``deadline``).
    ``None`` sets no limit."""
    real_concurrency: int = 2
    """Real episodes in flight at once: one browser context each. Keep it at or below the
    browser pool's ``max_contexts``; set 1 for a site whose state episodes share."""
    synthetic_concurrency: int = 256
    """Synthetic episodes (and shadow predictions) in flight on the simulator at once.
    The model backend's own limit caps calls further; this caps memory and open prompts."""
    torch_slots: int = 1
    """In-process torch jobs (a local policy, ``LocalBackend``, the MiniLM embedder) that may
    run at once. Each job already uses every core through intra-op threads, so 1 suits a
    small CPU machine. ``Runtime.torch_limiter`` has this many tokens unless one is given;
    pass that limiter to ``LocalBackend(limiter=...)`` and to a local policy."""
    store_buffer: int = 256
    """Finished episodes (and shadow steps) that may wait for the one store-writer task.
    When the buffer is full, episodes wait before their next start: backpressure, not
    unbounded memory."""
    commit_batch: int = 256
    """Most waiting items the store writer gathers into one round of commits."""
    drain_timeout_s: float = 60.0
    """How long a finished episode may wait for a full store buffer, and on cancellation or
    close how long finished steps may take to reach the store. Past it the records are not
    stored, and ``run_groups`` raises :class:`~dreamgym.core.errors.StoreError` when the run
    ends: a run never reports success with records missing."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "real_concurrency", "synthetic_concurrency", "torch_slots", "store_buffer"):
            if getattr(self, name) < 1:
                raise ConfigError(f"RuntimeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.commit_batch < 1:
            raise ConfigError(f"RuntimeConfig.commit_batch must be >= 1, got {self.commit_batch}")
        if self.episode_deadline_s is not None and self.episode_deadline_s <= 0:
            raise ConfigError(
                f"RuntimeConfig.episode_deadline_s must be > 0 seconds, or None for no deadline; "
                f"got {self.episode_deadline_s}"
            )
        if self.drain_timeout_s <= 0:
            raise ConfigError(f"RuntimeConfig.drain_timeout_s must be > 0 seconds, got {self.drain_timeout_s}")
