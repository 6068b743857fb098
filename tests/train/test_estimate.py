"""The run-time estimate said early in a run, and the renderer named before it starts."""

from __future__ import annotations

import torch

from gsnb.train.estimate import RunTimeEstimate, backend_text, duration_text


def _feed(estimate: RunTimeEstimate, seconds_per_step: float, steps: int) -> None:
    for step in range(1, steps + 1):
        estimate.observe(step, now=step * seconds_per_step)


def test_a_long_cpu_run_is_projected_and_warned_about_once() -> None:
    lines: list[str] = []
    estimate = RunTimeEstimate(30_000, torch.device("cpu"), lines.append, warmup=5, window=3.0)
    _feed(estimate, 4.8, 40)
    assert len(lines) == 2
    assert lines[0].startswith("about 40 h for the remaining 29994 steps at 4.80 s/step")
    assert "warning: this CPU run will take 40 h or more" in lines[1] and "--downscale" in lines[1]


def test_a_short_run_gets_the_estimate_without_a_warning() -> None:
    lines: list[str] = []
    estimate = RunTimeEstimate(700, torch.device("cpu"), lines.append, warmup=5, window=3.0)
    _feed(estimate, 0.05, 200)  # timed from step 5 for 50 steps (max_steps), 2.5 s
    assert len(lines) == 1 and lines[0].startswith("about 32 s for the remaining 645 steps")
    assert "20 steps/s" in lines[0]


def test_a_gpu_run_of_hours_is_not_a_cpu_warning() -> None:
    lines: list[str] = []
    estimate = RunTimeEstimate(10**7, torch.device("cuda"), lines.append, warmup=0, window=0.0)
    _feed(estimate, 0.01, 3)
    assert len(lines) == 1


def test_nothing_is_said_before_the_warm_up_and_window_pass() -> None:
    lines: list[str] = []
    estimate = RunTimeEstimate(1000, torch.device("cpu"), lines.append, warmup=5, window=3.0)
    _feed(estimate, 0.1, 20)  # 15 timed steps, 1.5 s: not enough yet
    assert lines == []


def test_duration_and_backend_in_words() -> None:
    assert [duration_text(s) for s in (5, 600, 36_000)] == ["5 s", "10 min", "10 h"]
    text = backend_text(torch.device("cpu"))
    assert text.startswith("PyTorch reference renderer on the CPU") and "OMP_WAIT_POLICY" in text


def test_a_resumed_run_warms_up_from_its_own_first_step() -> None:
    lines: list[str] = []
    estimate = RunTimeEstimate(10_000, torch.device("cpu"), lines.append, warmup=5, window=1.0)
    estimate.observe(5001, now=0.0)  # the first step after a resume: slow, not timed
    estimate.observe(5002, now=30.0)
    for step in range(5003, 5030):
        estimate.observe(step, now=30.0 + (step - 5002) * 0.1)
    assert lines and "0.10 s/step" not in lines[0] and "10 steps/s" in lines[0]
