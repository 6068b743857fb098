"""A run's ``metrics.jsonl``: one line per step, all legs of a resumed run, written atomically."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gsnb.train.metrics import StepMetrics
from gsnb.utils.atomic import atomic_write

METRICS_NAME = "metrics.jsonl"


def write_metrics(out: Path, history: Sequence[StepMetrics], leg_start: int) -> Path:
    """Write ``out/metrics.jsonl``: the lines already there up to step ``leg_start`` (the legs
    before a resume), then ``history`` (this leg's steps).

    Example:
        >>> import tempfile
        >>> from gsnb.train.metrics import StepMetrics
        >>> out = Path(tempfile.mkdtemp())
        >>> _ = write_metrics(out, [StepMetrics(step=1, loss=0.5)], 0)
        >>> _ = write_metrics(out, [StepMetrics(step=2, loss=0.4)], 1)
        >>> [json.loads(line)["step"] for line in (out / METRICS_NAME).read_text().splitlines()]
        [1, 2]
    """
    path = Path(out) / METRICS_NAME
    earlier = _lines_up_to(path, leg_start)
    with atomic_write(path, "w") as handle:
        handle.writelines(earlier)
        for metrics in history:
            handle.write(json.dumps(metrics.to_dict()) + "\n")
    return path


def _lines_up_to(path: Path, step: int) -> list[str]:
    """The lines of ``path`` whose step is at most ``step`` (none when ``step`` is 0)."""
    if step <= 0 or not path.is_file():
        return []
    kept = []
    with open(path) as handle:
        for line in handle:
            try:
                at = json.loads(line).get("step")
            except (ValueError, AttributeError):
                continue
            if isinstance(at, int) and at <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
    return kept
