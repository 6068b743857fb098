"""gsnb.train.bins: the room each view's next render gets for its intersections."""

from __future__ import annotations

import doctest

from gsnb.train import bins
from gsnb.train.bins import LIMIT, IntersectionBudget


def test_docstrings() -> None:
    assert doctest.testmod(bins).failed == 0


def test_an_unseen_view_waits_for_its_count() -> None:
    budget = IntersectionBudget()
    budget.observe(view=1, count=10, gaussians=5)
    assert budget.capacity(0, 5) == 0
    assert budget.capacity(1, 5) > 10


def test_room_covers_the_count_with_margin_and_slack() -> None:
    budget = IntersectionBudget(margin=1.5, slack=7)
    budget.observe(view=2, count=1000, gaussians=100)
    assert budget.capacity(2, 100) == 1507
    assert budget.capacity(2, 50) == 1507  # fewer Gaussians: never less room
    assert budget.capacity(2, 300) == 4507  # three times the Gaussians


def test_the_newest_count_counts_and_a_dip_keeps_a_share_of_the_last() -> None:
    budget = IntersectionBudget(margin=1.0, slack=0)
    budget.observe(view=0, count=1000, gaussians=10)
    budget.observe(view=0, count=1200, gaussians=10)
    assert budget.capacity(0, 10) == 1200
    budget.observe(view=0, count=400, gaussians=10)  # after an opacity reset
    assert budget.capacity(0, 10) == 1020  # 0.85 of the last count
    budget.observe(view=0, count=400, gaussians=20)  # the last count grown with the Gaussians
    assert budget.capacity(0, 20) == 1734
    for _ in range(20):  # a lasting fall: the room follows it down
        budget.observe(view=0, count=400, gaussians=20)
    assert budget.capacity(0, 20) == 400
    plain = IntersectionBudget(margin=1.0, slack=0, keep=0.0)
    plain.observe(view=0, count=1000, gaussians=10)
    plain.observe(view=0, count=400, gaussians=10)
    assert plain.capacity(0, 10) == 400


def test_forget_one_view_or_all() -> None:
    budget = IntersectionBudget()
    for view in range(3):
        budget.observe(view, 100, 10)
    budget.forget(1)
    assert [budget.capacity(v, 10) > 0 for v in range(3)] == [True, False, True]
    budget.forget()
    assert all(budget.capacity(v, 10) == 0 for v in range(3))


def test_room_stops_at_what_the_kernels_index() -> None:
    budget = IntersectionBudget()
    budget.observe(view=0, count=2**30, gaussians=1)
    assert budget.capacity(0, 1000) == LIMIT
