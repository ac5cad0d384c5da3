"""Progress of long work, reported to whoever listens: nobody, unless asked.

Library code marks its long phases and counts their units::

    with progress("collect real episodes", total=len(groups), unit="groups") as bar:
        ...
        bar.advance()

and stays silent: the default listener does nothing. The command line listens
(:func:`listening`) and draws each phase as a bar with its count and the time
left, then a one-line summary when it ends. Anything else can listen the same
way: a notebook widget, a log line per phase.

The listener is one for the process (not per task or thread): phases run in
worker threads (training) and in nested event loops (each job phase runs its
own), and every one of them reports to the same screen. Phases may nest; a
listener shows them together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["Listener", "Phase", "listening", "progress"]


class Phase:
    """One phase in progress: what it does, how far it is, and its note (a loss, a success rate)."""

    def __init__(self, what: str, total: int | None, unit: str, listener: Listener) -> None:
        self.what = what
        self.total = total
        self.unit = unit
        self.done = 0
        self.note = ""
        self.started = time.perf_counter()
        self._listener = listener

    def advance(self, units: int = 1, *, note: str | None = None) -> None:
        """Count ``units`` more done; ``note`` replaces the short text shown beside the count."""
        self.done += units
        if note is not None:
            self.note = note
        self._listener.changed(self)

    def set_total(self, total: int | None) -> None:
        """The phase found out how much there is to do (or that it differs from the estimate)."""
        self.total = total
        self._listener.changed(self)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


class Listener(Protocol):
    """What shows progress: told when a phase starts, changes and ends (from any thread)."""

    def started(self, phase: Phase) -> None: ...

    def changed(self, phase: Phase) -> None: ...

    def ended(self, phase: Phase, *, failed: bool) -> None: ...


class _Silent:
    def started(self, phase: Phase) -> None:
        pass

    def changed(self, phase: Phase) -> None:
        pass

    def ended(self, phase: Phase, *, failed: bool) -> None:
        pass


_SILENT = _Silent()
_listener: Listener = _SILENT
_lock = threading.Lock()


@contextmanager
def progress(what: str, *, total: int | None = None, unit: str = "") -> Iterator[Phase]:
    """A phase of long work: report its start, its count as it advances, and its end (failed or not)."""
    listener = _listener
    phase = Phase(what, total, unit, listener)
    listener.started(phase)
    try:
        yield phase
    except BaseException:
        listener.ended(phase, failed=True)
        raise
    listener.ended(phase, failed=False)


@contextmanager
def listening(listener: Listener) -> Iterator[Listener]:
    """Send every phase started inside this block, in any thread, to ``listener``; then the previous one again."""
    global _listener
    with _lock:
        previous, _listener = _listener, listener
    try:
        yield listener
    finally:
        with _lock:
            _listener = previous
