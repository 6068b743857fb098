"""COLMAP's own log (glog, written straight to file descriptor 2) into a file, not the terminal.

pycolmap resets its logging flags inside some calls (bundle adjustment turns
INFO lines back on), so they cannot be silenced from Python; the file keeps
them for when a run needs explaining, and the terminal shows gsnb's progress
and summary only.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to(path: Path) -> Iterator[None]:
    """Send what is written to file descriptor 2 (stderr) to ``path`` (appended) while inside.

    Example:
        >>> import tempfile
        >>> log = Path(tempfile.mkdtemp()) / "colmap.log"
        >>> with log_to(log):
        ...     _ = os.write(2, b"I1130 a line of COLMAP's\\n")
        >>> log.read_text()
        "I1130 a line of COLMAP's\\n"
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as handle:
            os.dup2(handle.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def terminal_stream():
    """A text stream on the terminal's stderr that ``log_to`` does not redirect (for tqdm).

    Example:
        >>> stream = terminal_stream()
        >>> stream.writable()
        True
    """
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (OSError, ValueError, AttributeError):  # no real stderr (some notebook kernels)
        return sys.stderr
