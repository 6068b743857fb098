"""Write files atomically: a temporary file in the same folder, then ``os.replace``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one step.

    On any error the temporary file is removed and an existing ``path`` is left
    untouched, so readers never see a half-written file.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "hello.txt"
        >>> with atomic_write(target, "w") as f:
        ...     _ = f.write("hi")
        >>> target.read_text()
        'hi'
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OSError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise OSError(
            f"cannot write {target}: {err.strerror or err} (is {folder} writable?)"
        ) from err
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
