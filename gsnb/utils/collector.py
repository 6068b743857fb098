"""Python's garbage collector kept off the objects that existed before a long loop.

A full collection walks every object the process tracks: with torch imported and a dataset
loaded, a few hundred thousand of them and 60-110 ms each time, in which the GPU runs dry.
A training loop makes new objects at a steady pace (a step's metrics, its small dicts), so
full collections come back every few thousand steps. :func:`frozen_heap` moves the objects
that exist when a loop starts into the collector's permanent generation
(:func:`gc.freeze`) and gives them back when the last such loop ends (:func:`gc.unfreeze`),
so that collections during the loop walk only what the loop made. Cyclic garbage among the
frozen objects waits until then; nothing is collected that would not have been. A process
that froze its heap itself keeps it as it was: then this does nothing.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["frozen_heap"]

_lock = threading.Lock()
_holders = 0
_froze = False  # whether the first holder froze the heap (it was not frozen already)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the collector's view of the existing objects for the ``with`` block.

    Loops in several threads may overlap: the heap is frozen when the first enters and given
    back when the last leaves.

    Example:
        >>> import gc
        >>> before = gc.get_freeze_count()
        >>> with frozen_heap():
        ...     gc.get_freeze_count() > 0
        True
        >>> gc.get_freeze_count() == before
        True
    """
    global _holders, _froze
    with _lock:
        _holders += 1
        if _holders == 1:
            _froze = gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _froze:
                gc.unfreeze()
                _froze = False
