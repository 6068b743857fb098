"""Ctrl-C that never leaves a half-applied training step.

A step has a compute phase (render, loss, backward), which an interrupt may
abandon because it changes no parameter, and a short commit phase (optimizer
step, densification), which must finish once begun. :class:`InterruptGuard`
catches SIGINT in the main thread: during a commit it only records the
request; in graceful mode the first Ctrl-C asks the training loop to stop at
the next step boundary and a second one raises at once (outside a commit).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class InterruptGuard:
    """Install with ``with guard.installed():``; wrap commits in ``with guard.commit():``.

    Args:
        graceful: ``True`` for a loop that checks :attr:`requested` between steps;
            ``False`` for a single step (the interrupt is raised after the commit).

    Example:
        >>> guard = InterruptGuard(graceful=True)
        >>> with guard.installed():
        ...     with guard.commit():
        ...         pass
        >>> guard.requested
        False
    """

    def __init__(self, graceful: bool) -> None:
        self.graceful = graceful
        self.requested = False
        self._critical = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._critical or (self.graceful and not self.requested):
            self.requested = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[InterruptGuard]:
        """Catch SIGINT while the block runs (only in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """A block that an interrupt must not cut short (blocks may nest: the outermost
        one decides)."""
        outermost = not self._critical
        self._critical = True
        try:
            yield
        finally:
            if outermost:
                self._critical = False
        if outermost and self.requested and not self.graceful:
            raise KeyboardInterrupt
