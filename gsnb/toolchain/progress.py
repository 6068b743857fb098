"""Progress of a ninja build: step count, elapsed time and the file being compiled."""

from __future__ import annotations

import re
import sys
from typing import IO

from tqdm.auto import tqdm

_STEP = re.compile(r"^\[(\d+)/(\d+)\]\s+(.*)$")
_SOURCE = re.compile(r"\s-c\s+(\S+)")
_OUTPUT = re.compile(r"\s-o\s+(\S+)")


def step_of(line: str) -> tuple[int, int, str] | None:
    """``(step, total, what)`` for a ninja status line like ``[2/5] nvcc ... -c a.cu``.

    Example:
        >>> step_of("[2/5] /cuda/bin/nvcc -O3 -c /src/rasterize.cu -o rasterize.cuda.o")
        (2, 5, 'rasterize.cu')
        >>> step_of("warning: unused variable") is None
        True
    """
    match = _STEP.match(line)
    if match is None:
        return None
    command = match.group(3)
    source = _SOURCE.search(command)
    if source is not None:
        what = source.group(1).replace("\\", "/").rsplit("/", 1)[-1]
    else:
        output = _OUTPUT.search(command)
        what = "linking " + output.group(1).rsplit("/", 1)[-1] if output else command.split()[0]
    return int(match.group(1)), int(match.group(2)), what


class BuildProgress:
    """Shows a ninja build as it runs and keeps its whole output in ``log``.

    A tqdm bar (a widget in notebooks, a line in terminals) counts the steps and
    shows the elapsed time and the last file compiled; with ``verbose`` every
    line of compiler output is echoed too.

    Example:
        >>> import io
        >>> log = io.StringIO()
        >>> p = BuildProgress(log, show=False, verbose=False)
        >>> p.feed("[1/2] c++ -c /x/ext.cpp -o ext.o"); p.close()
        >>> p.steps, log.getvalue().strip()
        ((1, 2), '[1/2] c++ -c /x/ext.cpp -o ext.o')
    """

    def __init__(self, log: IO[str], *, show: bool, verbose: bool, jobs: int | None = None) -> None:
        self.log = log
        self.verbose = verbose
        self.steps: tuple[int, int] = (0, 0)
        desc = f"gsnb build ({jobs} jobs)" if jobs else "gsnb build"
        self._bar = tqdm(
            total=None, desc=desc, unit="step", disable=not show, leave=True, file=sys.stderr
        )

    def feed(self, line: str) -> None:
        """Take one line of build output."""
        self.log.write(line + "\n")
        self.log.flush()
        step = step_of(line)
        if step is not None:
            done, total, what = step
            self.steps = (done, total)
            if self._bar.total != total:
                self._bar.total = total
            self._bar.update(max(0, done - self._bar.n))
            self._bar.set_postfix_str(what, refresh=True)
        if self.verbose:
            tqdm.write(line, file=sys.stderr)

    def close(self, success: bool = True) -> None:
        """Finish the bar (full on success)."""
        if success and self._bar.total:
            self._bar.update(self._bar.total - self._bar.n)
        self._bar.close()
