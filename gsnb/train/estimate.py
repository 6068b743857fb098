"""Before a long run: which renderer trains, and how long the run will take.

:func:`backend_text` names the renderer a trainer uses. :class:`RunTimeEstimate`
times the first steps of a run (after a short warm-up) and says once how long
the whole run will take at that pace, warning when a CPU run will take hours.
Steps get slower as densification grows the model, so the projection is a lower
bound and is said as such.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gsnb.cpu import wait_policy_note
from gsnb.train.metrics import StepMetrics

HOURS_WARNING = 1.0
"""A CPU run projected to take longer than this many hours gets a warning."""


def backend_text(device: torch.device, backend: str = "auto") -> str:
    """The renderer a trainer on ``device`` uses, in words (``config.backend`` as ``backend``).

    Example:
        >>> backend_text(torch.device("cpu")).startswith("PyTorch reference renderer on the CPU")
        True
    """
    if device.type == "cuda":
        from gsnb.raster import cuda

        name = torch.cuda.get_device_name(device)
        if backend != "reference" and cuda.is_available():
            return f"CUDA rasterizer on {name}"
        if backend == "cuda":
            return f"the CUDA rasterizer on {name}, which is not built: gsnb build"
        why = (
            "as asked" if backend == "reference" else "the CUDA rasterizer is not built: gsnb build"
        )
        return f"PyTorch reference renderer on {name} ({why})"
    note = wait_policy_note()
    return f"PyTorch reference renderer on the CPU ({torch.get_num_threads()} threads; {note})"


def duration_text(seconds: float) -> str:
    """``seconds`` as a person says it.

    Example:
        >>> duration_text(42), duration_text(754), duration_text(145_000)
        ('42 s', '13 min', '40 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


class RunTimeEstimate:
    """A step callback that says once, early in a run, how long the run will take.

    It skips ``warmup`` steps (the first steps pay for allocations and kernel
    loads), then times steps until ``window`` seconds or ``max_steps`` steps have
    passed, and calls ``say`` with one line (and a warning line for a CPU run of
    more than :data:`HOURS_WARNING` hours).

    Args:
        total: the run's last step.
        device: where it trains.
        say: where the lines go (``print``, ``tqdm.write``, ...).

    Example:
        >>> lines = []
        >>> estimate = RunTimeEstimate(30_000, torch.device("cpu"), lines.append, warmup=0,
        ...                            window=0.0, max_steps=1)
        >>> estimate.observe(1, now=0.0); estimate.observe(2, now=5.0)
        >>> print(lines[0])  # doctest: +ELLIPSIS
        about 42 h for the remaining 29998 steps at 5.00 s/step (at least: ...)
        >>> "CPU run" in lines[1]
        True
    """

    def __init__(
        self,
        total: int,
        device: torch.device,
        say: Callable[[str], object],
        *,
        warmup: int = 5,
        window: float = 3.0,
        max_steps: int = 50,
    ) -> None:
        self.total, self.device, self.say = total, device, say
        self.warmup, self.window, self.max_steps = warmup, window, max_steps
        self._first: int | None = None  # the first step seen (a resumed run starts late)
        self._start: tuple[int, float] | None = None
        self.done = False

    def __call__(self, metrics: StepMetrics) -> None:
        self.observe(metrics.step)

    def observe(self, step: int, now: float | None = None) -> None:
        """Record that ``step`` has finished at ``now`` (default: the clock)."""
        if self.done:
            return
        now = time.perf_counter() if now is None else now
        if self._first is None:
            self._first = step - 1
        if self._start is None:
            if step - self._first >= self.warmup:
                self._start = (step, now)
            return
        first, t0 = self._start
        steps, seconds = step - first, now - t0
        if steps < 1 or (seconds < self.window and steps < self.max_steps):
            return
        self.done = True
        per_step = seconds / steps
        remaining = max(self.total - step, 0)
        projected = per_step * remaining
        self.say(
            f"about {duration_text(projected)} for the remaining {remaining} steps at "
            f"{_pace(per_step)} (at least: steps slow down as the model grows)"
        )
        if self.device.type == "cpu" and projected > HOURS_WARNING * 3600:
            self.say(
                f"warning: this CPU run will take {duration_text(projected)} or more. A GPU "
                "trains the same scene in minutes (gsnb doctor says what the CUDA build needs); "
                "on the CPU, fewer steps and smaller images finish sooner: --steps 300 "
                "--downscale 16 trained the fox in 4 min on 2 cores"
            )


def _pace(per_step: float) -> str:
    return f"{per_step:.2f} s/step" if per_step >= 0.5 else f"{1 / per_step:.0f} steps/s"
