"""The phases of a command's wall time."""

from __future__ import annotations

import time

from gsnb.train.timeline import Timeline, timeline_text


def test_phases_follow_each_other_on_one_clock() -> None:
    clock = iter([1.0, 4.0, 4.5, 9.0])
    line = Timeline(clock=lambda: next(clock))  # started at the first reading, 1.0
    assert line.mark("data") == 3.0
    assert line.mark("checks") == 0.5
    assert line.mark("training") == 4.5
    assert list(line.seconds()) == ["data", "checks", "training"]
    assert line.total() == 8.0


def test_a_clock_that_goes_back_counts_no_time() -> None:
    clock = iter([4.0, 6.0])
    line = Timeline(started=5.0, clock=lambda: next(clock))
    assert line.mark("a") == 0.0
    assert line.mark("b") == 2.0  # from the last reading, not from the start


def test_the_real_clock_sums_to_the_time_that_passed() -> None:
    began = time.perf_counter()
    line = Timeline(started=began)
    time.sleep(0.02)
    line.mark("sleep")
    line.mark("nothing")
    assert 0.02 <= line.total() <= time.perf_counter() - began
    assert line.seconds()["nothing"] < 0.01


def test_text_names_each_phase_and_the_whole() -> None:
    text = timeline_text({"imports": 1.25, "training": 10.0})
    assert text == "11.2 s in all: imports 1.2 s, training 10.0 s"
