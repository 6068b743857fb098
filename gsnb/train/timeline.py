"""Where a command's wall time goes: named phases, one after the other (``summary.json``).

``gsnb train`` spends more than its training time: importing torch, reading and
undistorting the photos, the checks before the first step, then the test views'
evaluation and the files. :class:`Timeline` times each phase on one clock, so that
the summary says what the whole command took and which part of it was training.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Timeline:
    """Consecutive phases of one command, timed on ``time.perf_counter``.

    Each :meth:`mark` ends the phase it names: the time since the previous mark (or
    since ``started``) is added to that name, so a phase marked twice sums.

    Args:
        started: ``time.perf_counter()`` when the command began (default: now).
        clock: the clock, seconds as a float.

    Example:
        >>> clock = iter([10.0, 12.5, 13.0])
        >>> line = Timeline(started=9.0, clock=lambda: next(clock))
        >>> line.mark("imports"), line.mark("data"), line.mark("imports")
        (1.0, 2.5, 0.5)
        >>> line.seconds()
        {'imports': 1.5, 'data': 2.5}
        >>> round(line.total(), 3)
        4.0
    """

    def __init__(
        self, started: float | None = None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._last = clock() if started is None else float(started)
        self._phases: dict[str, float] = {}

    def mark(self, name: str) -> float:
        """End the phase ``name`` now; returns its seconds since the previous mark."""
        now = self._clock()
        spent = max(0.0, now - self._last)
        self._last = now
        self._phases[name] = self._phases.get(name, 0.0) + spent
        return spent

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds (rounded to milliseconds), in the order first marked."""
        return {name: round(spent, 3) for name, spent in self._phases.items()}

    def total(self) -> float:
        """Seconds of all phases together."""
        return sum(self._phases.values())


def timeline_text(phases: dict[str, float]) -> str:
    """One line of a summary: the whole, then each phase.

    Example:
        >>> timeline_text({"imports": 2.9, "data": 3.1, "training": 18.0, "evaluation": 0.4})
        '24.4 s in all: imports 2.9 s, data 3.1 s, training 18.0 s, evaluation 0.4 s'
    """
    parts = ", ".join(f"{name} {spent:.1f} s" for name, spent in phases.items())
    return f"{sum(phases.values()):.1f} s in all: {parts}"
