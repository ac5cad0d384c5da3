"""The command line's progress: each phase a rich bar (what, count, time left), then one summary line."""

from __future__ import annotations

import threading
from typing import Any

from dreamgym.core.progress import Phase

__all__ = ["BarListener"]


class BarListener:
    """Draws the phases :func:`dreamgym.core.progress.progress` reports on ``console`` (stderr: stdout keeps the
    command's result), below the log lines, and replaces each by one line when it ends."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._console = console
        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._ids: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> BarListener:
        self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bars.stop()

    def started(self, phase: Phase) -> None:
        with self._lock:
            self._ids[id(phase)] = self._bars.add_task(phase.what, total=phase.total, unit=phase.unit, note=phase.note)

    def changed(self, phase: Phase) -> None:
        with self._lock:
            task = self._ids.get(id(phase))
        if task is not None:
            self._bars.update(task, completed=phase.done, total=phase.total, note=phase.note)

    def ended(self, phase: Phase, *, failed: bool) -> None:
        with self._lock:
            task = self._ids.pop(id(phase), None)
        if task is not None:
            self._bars.remove_task(task)
        count = f"{phase.done}" + (f"/{phase.total}" if phase.total is not None and phase.total != phase.done else "")
        unit = f" {phase.unit}" if phase.unit else ""
        note = f" ({phase.note})" if phase.note else ""
        mark, how = ("[red]✗[/red]", "stopped after") if failed else ("[green]✓[/green]", "in")
        self._console.print(f"{mark} {phase.what}: {count}{unit}{note} {how} {_duration(phase.seconds)}")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
