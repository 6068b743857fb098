"""Per-step times of a ninja build, read from the ``.ninja_log`` in its build folder.

Each line of the log (formats v5 to v7) is ``start_ms  end_ms  mtime  target  hash``,
tab-separated; a target built again appends a new line, so the last one counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOG_NAME = ".ninja_log"
LOG_LIMIT = 1 << 20


@dataclass(frozen=True)
class Step:
    """One ninja step: its output file and when it ran (seconds from the build's start).

    Example:
        >>> Step("rasterize.cuda.o", 0.02, 31.5).seconds
        31.48
    """

    target: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        """How long the step took."""
        return round(self.end - self.start, 3)


def read_steps(build_dir: Path) -> list[Step]:
    """The steps of the last build in ``build_dir``, in the order they started ([] without a log).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / LOG_NAME).write_text("# ninja log v5\\n0\\t1500\\t1\\ta.o\\tff\\n")
        >>> read_steps(d)
        [Step(target='a.o', start=0.0, end=1.5)]
    """
    try:
        with open(build_dir / LOG_NAME, encoding="utf-8", errors="replace") as handle:
            text = handle.read(LOG_LIMIT)
    except OSError:
        return []
    last: dict[str, Step] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if line.startswith("#") or len(parts) < 4:
            continue
        try:
            start, end = int(parts[0]) / 1000, int(parts[1]) / 1000
        except ValueError:
            continue
        last.pop(parts[3], None)
        last[parts[3]] = Step(parts[3], start, end)
    return sorted(last.values(), key=lambda s: (s.start, s.target))


def step_seconds(build_dir: Path) -> dict[str, float]:
    """``{target: seconds}`` of the last build in ``build_dir``, slowest first.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> lines = ["# ninja log v5", "0\\t900\\t1\\ta.o\\t1", "5\\t2000\\t1\\tb.o\\t2"]
        >>> _ = (d / LOG_NAME).write_text("\\n".join(lines))
        >>> step_seconds(d)
        {'b.o': 1.995, 'a.o': 0.9}
    """
    steps = sorted(read_steps(build_dir), key=lambda s: s.seconds, reverse=True)
    return {s.target: s.seconds for s in steps}
