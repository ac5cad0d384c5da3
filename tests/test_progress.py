"""Progress phases: silent unless listened to; reported from any thread; a failed phase says so."""

from __future__ import annotations

import threading

import pytest
from helpers import Recorder

from dreamgym.core.progress import listening, progress


def test_phases_reach_the_listener_from_worker_threads_and_failures_are_marked() -> None:
    recorder = Recorder()
    with listening(recorder), progress("outer", total=2, unit="phases") as outer:

        def work() -> None:
            with progress("inner", total=3) as inner:
                for _ in range(3):
                    inner.advance()

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        outer.advance()
        with pytest.raises(RuntimeError), progress("broken"):
            raise RuntimeError("no")
    assert recorder.events == [
        ("started", "outer", 0),
        ("started", "inner", 0),
        ("changed", "inner", 1),
        ("changed", "inner", 2),
        ("changed", "inner", 3),
        ("ended", "inner", 3),
        ("changed", "outer", 1),
        ("started", "broken", 0),
        ("failed", "broken", 0),
        ("ended", "outer", 1),
    ]
    with progress("after") as phase:  # the listener is gone: nothing is reported, and counting still works
        phase.advance(2)
    assert phase.done == 2 and len(recorder.events) == 10
