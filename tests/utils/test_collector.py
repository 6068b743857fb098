"""gsnb.utils.collector: the heap frozen for a loop and given back after it."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from gsnb.utils.collector import frozen_heap


@pytest.fixture(autouse=True)
def _unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_made_before_the_loop_are_frozen_and_given_back():
    before = [object() for _ in range(10)]  # noqa: F841 (held alive)
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        made = []
        made.append(made)  # a cycle made during the loop is still collected
        del made
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_garbage_cycles_among_frozen_objects_are_collected_after_the_loop():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    with frozen_heap():
        del a, b
        gc.collect()
        assert ref() is not None  # frozen: not collected yet
    gc.collect()
    assert ref() is None


def test_overlapping_loops_unfreeze_when_the_last_ends():
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with frozen_heap():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with frozen_heap():
        pass
    assert gc.get_freeze_count() > 0  # the other loop still runs
    leave.set()
    thread.join()
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_the_process_stays_frozen():
    gc.freeze()
    count = gc.get_freeze_count()
    with frozen_heap():
        pass
    # still frozen (objects freed meanwhile leave the count a little lower)
    assert gc.get_freeze_count() > count // 2 > 0
