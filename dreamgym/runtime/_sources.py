"""Which side runs a group, real pages or the experience model: the source choosers.

A group's G episodes always share one source (a group compares its episodes'
rewards, which only means something on one side). The runtime asks a
:class:`SourceChooser` for every group whose :class:`~dreamgym.runtime.GroupSpec`
names no source, except groups of generated tasks (``Task.generated``), which
always run synthetic and are never shown to the chooser.

Ratios are kept by spreading real groups evenly (Bresenham's rule): with a
share ``s`` and phase ``p``, group ``i`` is real when ``floor((i+1)s + p)``
exceeds ``floor(i s + p)``, so after any ``n`` groups ``floor(n s + p)`` were
real. ``p = 1/2`` gives exactly ``round(n s)`` (halves rounded up).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from fractions import Fraction
from typing import Protocol, runtime_checkable

from dreamgym.core.errors import ConfigError
from dreamgym.core.types import SOURCES, Source, Task

__all__ = ["RatioSource", "RuleSource", "ScheduledSource", "SourceChooser"]

_HALF = Fraction(1, 2)


@runtime_checkable
class SourceChooser(Protocol):
    """Picks ``real`` or ``synthetic`` for one group.

    ``group_index`` counts the groups this runtime has asked about, from 0.
    """

    def choose(self, task: Task, group_index: int) -> Source: ...


def _share(value: float, what: str) -> Fraction:
    if not 0 <= value <= 1:
        raise ConfigError(f"{what} must be a share of groups between 0 and 1, got {value}")
    return Fraction(value).limit_denominator(1_000_000)


def _phase(seed: int | None) -> Fraction:
    if seed is None:
        return _HALF
    return Fraction(random.Random(seed).randrange(1_000_000), 1_000_000)


class RatioSource:
    """A fixed share of real groups, spread evenly, the same for the same seed.

    Without a seed, exactly ``round(real_share * n)`` of the first ``n`` groups
    are real, for every ``n``; a seed shifts where the real groups fall (for
    runs that should not all sample the same positions), and every ``n`` then
    holds ``floor`` or ``ceil`` of ``real_share * n``.

    Args:
        real_share: The share of real groups, 0 to 1.
        seed: Shifts the pattern; ``None`` keeps the exact rounding.

    Example:
        >>> chooser = RatioSource(0.25)
        >>> [chooser.choose(task, i) for i in range(4)]
        ['synthetic', 'real', 'synthetic', 'synthetic']
    """

    def __init__(self, real_share: float, *, seed: int | None = None) -> None:
        self.real_share = real_share
        self._share = _share(real_share, "RatioSource.real_share")
        self._phase = _phase(seed)

    def choose(self, task: Task, group_index: int) -> Source:
        if group_index < 0:
            raise ConfigError(f"group_index must be >= 0, got {group_index}")
        before = math.floor(group_index * self._share + self._phase)
        after = math.floor((group_index + 1) * self._share + self._phase)
        return "real" if after > before else "synthetic"


class RuleSource:
    """A source per task or site, then a default.

    A rule's key is matched against, in order: the task id, the task's site,
    and then as a shell pattern (``miniwob/click-*``) against the task id, in
    the mapping's order.

    Args:
        rules: Key to source.
        default: The source of tasks no rule matches, or a chooser to ask.

    Example:
        >>> chooser = RuleSource({"shopping": "real", "miniwob/click-*": "synthetic"}, default=RatioSource(0.1))
    """

    def __init__(self, rules: Mapping[str, Source], default: Source | SourceChooser = "synthetic") -> None:
        for key, source in rules.items():
            if source not in SOURCES:
                raise ConfigError(f"RuleSource rule {key!r} names source {source!r}; use 'real' or 'synthetic'")
        if isinstance(default, str) and default not in SOURCES:
            raise ConfigError(f"RuleSource default must be 'real', 'synthetic' or a chooser, got {default!r}")
        self.rules = dict(rules)
        self.default = default

    def choose(self, task: Task, group_index: int) -> Source:
        for key in (task.task_id, task.site):
            if key and key in self.rules:
                return self.rules[key]
        for pattern, source in self.rules.items():
            if fnmatchcase(task.task_id, pattern):
                return source
        if isinstance(self.default, str):
            return self.default
        return self.default.choose(task, group_index)


class ScheduledSource:
    """A share of real groups that the trainer changes over time (e.g. a sim-to-real warm start).

    ``schedule(update_index)`` gives the real share; the trainer calls
    :meth:`advance` after each update. Real groups are spread evenly as in
    :class:`RatioSource`, carried across changes of the share, so the choices
    depend only on the sequence of calls.

    Args:
        schedule: Update index to the share of real groups, 0 to 1.
        seed: Shifts the pattern, as in :class:`RatioSource`.

    Example:
        >>> chooser = ScheduledSource(lambda update: min(0.5, update / 100))
        >>> chooser.advance(10)  # 10% real from now on
    """

    def __init__(self, schedule: Callable[[int], float], *, seed: int | None = None) -> None:
        self.schedule = schedule
        self.update_index = 0
        self._share = self._scheduled(0)
        self._credit = _phase(seed)

    @property
    def real_share(self) -> float:
        """The share of real groups now."""
        return float(self._share)

    def advance(self, update_index: int) -> None:
        """Move to ``update_index``: later groups use ``schedule(update_index)``.

        Raises:
            ConfigError: The schedule gives a share outside 0..1.
        """
        self._share = self._scheduled(update_index)
        self.update_index = update_index

    def choose(self, task: Task, group_index: int) -> Source:
        self._credit += self._share
        if self._credit >= 1:
            self._credit -= 1
            return "real"
        return "synthetic"

    def _scheduled(self, update_index: int) -> Fraction:
        return _share(self.schedule(update_index), f"ScheduledSource schedule({update_index})")
