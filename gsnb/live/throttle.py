"""Rate limits for live views: fixed rates, and a budget on the share of time an action takes.

A live view must not slow training down. :class:`RateLimit` caps how often
something runs (curves at 4 Hz); :class:`TimeBudget` also stretches the wait
after a costly action (a render that holds the trainer's lock) so that it
takes at most a given fraction of the wall time. :class:`Inbox` hands records
from the training thread to the UI thread without blocking the former.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RateLimit:
    """Allows an action at most once every ``interval`` seconds.

    Example:
        >>> limit = RateLimit(0.25)
        >>> limit.ready(now=10.0)
        True
        >>> limit.mark(now=10.0)
        >>> limit.ready(now=10.1), limit.ready(now=10.3)
        (False, True)
    """

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not interval >= 0:
            raise ValueError(f"interval must be >= 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self._clock = clock
        self._next = -float("inf")

    def ready(self, now: float | None = None) -> bool:
        """Whether the action may run now."""
        return (self._clock() if now is None else now) >= self._next

    def mark(self, now: float | None = None) -> None:
        """Record that the action ran at ``now``."""
        self._next = (self._clock() if now is None else now) + self.interval

    def seconds_left(self, now: float | None = None) -> float:
        """Seconds until the action may run again (0 when it may run now)."""
        return max(0.0, self._next - (self._clock() if now is None else now))


class TimeBudget(RateLimit):
    """A :class:`RateLimit` that also keeps an action's share of wall time at most ``fraction``.

    After an action that took ``cost`` seconds the next one waits
    ``max(interval, cost / fraction - cost)``: a 50 ms render under a 5 % budget
    runs at most once a second, a 1 ms one at the ``interval`` rate.

    Example:
        >>> budget = TimeBudget(0.5, fraction=0.05)
        >>> budget.spent(cost=0.05, now=0.0)
        >>> budget.ready(now=0.5), budget.ready(now=1.0)
        (False, True)
    """

    def __init__(
        self, interval: float, fraction: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(interval, clock)
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
        self.fraction = float(fraction)

    def spent(self, cost: float, now: float | None = None) -> None:
        """Record an action that ended at ``now`` after ``cost`` seconds."""
        end = self._clock() if now is None else now
        self._next = end + max(self.interval, cost / self.fraction - cost)


class Inbox(Generic[T]):
    """A thread-safe queue the producer never waits on; the consumer takes everything at once.

    Example:
        >>> box = Inbox()
        >>> box.put(1); box.put(2)
        >>> box.take(), box.take()
        ([1, 2], [])
    """

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self.event = threading.Event()

    def put(self, item: T) -> None:
        """Add ``item`` (called from the training thread: O(1), no lock held long)."""
        self._items.append(item)
        self.event.set()

    def take(self) -> list[T]:
        """Everything added since the last call, oldest first."""
        self.event.clear()
        out = []
        while True:
            try:
                out.append(self._items.popleft())
            except IndexError:
                return out
