"""Which URLs an episode may reach: the task's origins, nothing else."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Allowlist", "origin_of"]

_ALWAYS = ("about:", "data:", "blob:")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL (``file://`` for local files)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return "file://"
    return f"{parts.scheme}://{parts.netloc}".lower()


@dataclass(frozen=True, slots=True)
class Allowlist:
    """Origins (``http://127.0.0.1:8000``) an episode may load; ``file://`` only when listed.

    ``about:``, ``data:`` and ``blob:`` URLs are always allowed: they reach no site.
    """

    origins: frozenset[str]

    @classmethod
    def of(cls, urls: Iterable[str]) -> Allowlist:
        return cls(frozenset(origin_of(url) for url in urls if url))

    def allows(self, url: str) -> bool:
        return url.startswith(_ALWAYS) or origin_of(url) in self.origins
