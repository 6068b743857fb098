"""The viewer of a run in another process: served beside its trainer, found through a file.

``gsnb train --viewer`` (and ``%gs_train --nproc N --viewer``) serves the
:class:`~gsnb.viewer.Viewer` in process 0, around its trainer, and writes its
address, secret included, to ``OUT/viewer.json``, a file only its owner can read
(mode 0600); a notebook reads it there (:func:`read_viewer_file`) and shows the
viewer as :meth:`Viewer.show` does. The file goes when the viewer stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gsnb.train import Trainer

VIEWER_FILE = "viewer.json"


def write_viewer_file(out: Path, info: dict[str, Any]) -> Path:
    """Write ``info`` to ``out/viewer.json`` atomically, readable by its owner only.

    Example:
        >>> folder = Path(tempfile.mkdtemp())
        >>> path = write_viewer_file(folder, {"port": 8080})
        >>> oct(path.stat().st_mode & 0o777), read_viewer_file(folder)
        ('0o600', {'port': 8080})
    """
    path = Path(out) / VIEWER_FILE
    fd, tmp = tempfile.mkstemp(prefix=f".{VIEWER_FILE}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(info, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_viewer_file(out: Path) -> dict[str, Any] | None:
    """The viewer's ``{"url", "host", "port", "secret", "pid"}`` of the run in ``out``, or None
    while there is none (see :func:`write_viewer_file`)."""
    try:
        return json.loads((Path(out) / VIEWER_FILE).read_text())
    except (OSError, ValueError):
        return None


def serve_run(trainer: Trainer, out: Path, port: int = 0) -> Callable[[], None]:
    """Serve a viewer around ``trainer`` on ``127.0.0.1:port`` (0: a free one), write
    ``out/viewer.json`` and print its URL; returns the function that stops it.

    Example:
        >>> # close = serve_run(trainer, Path("runs/fox")); trainer.run(); close()
    """
    from gsnb.viewer.server import Viewer

    viewer = Viewer(trainer, port=port)
    info = {
        "url": viewer.url,
        "host": viewer.host,
        "port": viewer.port,
        "secret": viewer.secret,
        "pid": os.getpid(),
    }
    path = write_viewer_file(Path(out), info)
    print(f"gsnb train: viewer at {viewer.url} (also in {path})", flush=True)

    def close() -> None:
        with contextlib.suppress(OSError):
            path.unlink()
        viewer.stop()

    return close
