"""Write files atomically: a temporary file in the same folder, then ``os.replace``."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_umask_lock = threading.Lock()


def plain_file_mode() -> int:
    """The permission bits ``open(path, "w")`` gives a new file: ``0o666`` less the umask.

    ``tempfile.mkstemp`` creates its file ``0o600`` whatever the umask; a file renamed
    into place from it gets this mode instead, as if it had been written directly.

    Example:
        >>> plain_file_mode() & 0o600
        384
    """
    umask = None
    with contextlib.suppress(OSError, ValueError):
        # Linux reports the umask without changing it (no race with other threads).
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
    if umask is None:
        with _umask_lock:
            umask = os.umask(0o022)
            os.umask(umask)
    return 0o666 & ~umask


def make_temporary(target: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """A new temporary file beside ``target`` with a plain file's permissions: ``(fd, path)``.

    Example:
        >>> import tempfile, pathlib, os
        >>> fd, name = make_temporary(pathlib.Path(tempfile.mkdtemp()) / "a.bin")
        >>> os.close(fd); os.stat(name).st_mode & 0o777 == plain_file_mode()
        True
    """
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OSError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
    except OSError as err:
        raise OSError(
            f"cannot write {target}: {err.strerror or err} (is {folder} writable?)"
        ) from err
    # Windows has no fchmod: mkstemp's mode stays there.
    with contextlib.suppress(OSError, AttributeError):
        os.fchmod(fd, plain_file_mode())
    return fd, tmp


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one step.

    On any error the temporary file is removed and an existing ``path`` is left
    untouched, so readers never see a half-written file. The file gets the
    permissions a plain ``open()`` would give it (the umask applies).

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "hello.txt"
        >>> with atomic_write(target, "w") as f:
        ...     _ = f.write("hi")
        >>> target.read_text()
        'hi'
    """
    target = Path(path)
    fd, tmp = make_temporary(target)
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


def writable_problem(folder: Path) -> str | None:
    """None when ``folder`` can be made and a file written in it, else what went wrong.

    Example:
        >>> import tempfile, pathlib
        >>> writable_problem(pathlib.Path(tempfile.mkdtemp())) is None
        True
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror or err}"
    return None
