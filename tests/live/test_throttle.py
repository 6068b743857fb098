"""Tests for gsnb/live/throttle.py: rate limits, the time budget and the inbox."""

from __future__ import annotations

import itertools
import threading

import pytest

from gsnb.live.throttle import Inbox, RateLimit, TimeBudget


def test_rate_limit_spacing():
    limit = RateLimit(0.25)
    runs = []
    for tick in range(101):  # 10 s of polling every 0.1 s
        now = tick * 0.1
        if limit.ready(now):
            limit.mark(now)
            runs.append(now)
    assert len(runs) == 34  # 0.0, 0.3, 0.6, ... (the next poll after each 0.25 s)
    assert min(b - a for a, b in itertools.pairwise(runs)) >= 0.25
    assert limit.seconds_left(runs[-1]) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="interval"):
        RateLimit(-1.0)


@pytest.mark.parametrize("cost", [0.001, 0.02, 0.3])
def test_time_budget_keeps_the_share_of_wall_time(cost):
    budget = TimeBudget(0.5, fraction=0.05)
    now, spent = 0.0, 0.0
    while now < 100.0:
        if budget.ready(now):
            now += cost
            spent += cost
            budget.spent(cost, now)
        now += 0.01
    # over whole periods (up to when the next action may run) the share is at most 5 %
    assert spent <= 0.05 * (now + budget.seconds_left(now)) + 1e-9
    if cost < 0.02:  # cheap actions run at the interval's rate
        assert spent / cost >= 100.0 / 0.52
    with pytest.raises(ValueError, match="fraction"):
        TimeBudget(0.5, fraction=0.0)


def test_inbox_hands_everything_over_in_order_across_threads():
    box: Inbox[int] = Inbox()
    got: list[int] = []

    def produce() -> None:
        for i in range(20_000):
            box.put(i)

    thread = threading.Thread(target=produce)
    thread.start()
    while thread.is_alive() or box.event.is_set():
        got.extend(box.take())
    got.extend(box.take())
    assert got == list(range(20_000))
    assert box.take() == [] and not box.event.is_set()
