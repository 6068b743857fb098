"""The output folder of a training run: one run at a time, checked before the first step.

:class:`RunFolder` takes an exclusive lock on the folder (a second run refuses and names
the first's pid; the lock of a killed run is recovered), removes temporary files that
killed runs left behind, refuses a folder that holds another run's results unless the
run continues it (``--resume``) or replaces it (``--overwrite``), and checks before
step 1 that the folder is writable and has room for the run's checkpoints and PLY.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from gsnb.train.checkpoint import HISTORY_DIR, NEWEST_NAME
from gsnb.train.metrics_file import METRICS_NAME
from gsnb.utils.atomic import writable_problem
from gsnb.utils.lock import LockHeld, OwnedLock

LOCK_NAME = ".gsnb-run.lock"
OWNER_NAME = ".gsnb-run.owner.json"
RESULT_NAMES = (NEWEST_NAME, "point_cloud.ply", METRICS_NAME, "summary.json", "orbit.mp4")
"""The files a finished run leaves in its folder."""
BYTES_PER_FLOAT = 4


class RunFolderError(RuntimeError):
    """The folder cannot take this run: held by another, holds another run, or has no room."""


def checkpoint_bytes(num_gaussians: int, sh_degree: int) -> int:
    """Bytes of a trainer checkpoint with ``num_gaussians``: parameters and Adam's two moments.

    Example:
        >>> checkpoint_bytes(100_000, 3) // 2**20
        67
    """
    floats = 3 + 3 + 4 + 1 + 3 * (sh_degree + 1) ** 2
    return 3 * floats * BYTES_PER_FLOAT * num_gaussians + (1 << 16)


def ply_bytes(num_gaussians: int, sh_degree: int) -> int:
    """Bytes of the PLY of ``num_gaussians`` (position, normal, colours, opacity, scale, rotation).

    Example:
        >>> ply_bytes(1000, 3)
        248000
    """
    floats = 3 + 3 + 3 * (sh_degree + 1) ** 2 + 1 + 3 + 4
    return floats * BYTES_PER_FLOAT * num_gaussians


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file of :func:`gsnb.utils.atomic.atomic_write`.

    Example:
        >>> is_temporary(".checkpoint.pt.k2j3_x.tmp"), is_temporary("checkpoint.pt")
        (True, False)
    """
    return name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 3


class RunFolder:
    """The output folder ``out`` of one run, held for as long as the run goes on.

    Example:
        >>> import tempfile
        >>> folder = RunFolder(tempfile.mkdtemp())
        >>> folder.claim()
        >>> RunFolder(folder.path).claim()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gsnb.train.rundir.RunFolderError: another run is writing to ... (pid ...); ...
        >>> folder.release()
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.path = Path(out)
        self._lock = OwnedLock(self.path / LOCK_NAME, self.path / OWNER_NAME)
        self.stale_pid: int | None = None
        self.cleaned: list[str] = []
        self._created = False

    @property
    def held(self) -> bool:
        """Whether this object holds the folder's lock."""
        return self._lock.held

    def claim(
        self, *, resume: str | os.PathLike[str] | None = None, overwrite: bool = False
    ) -> None:
        """Lock the folder for this run, clean it, and refuse it if it holds another run.

        ``resume``: the checkpoint this run continues; a folder holding it is this run's
        own. ``overwrite``: remove another run's results instead of refusing.

        Raises:
            RunFolderError: another live run holds the folder, or it holds another run.
            OSError: the folder cannot be made or written.
        """
        if self._lock.held:
            return
        self._created = not self.path.exists()
        problem = writable_problem(self.path)
        if problem is not None:
            raise OSError(f"cannot write to the output folder {self.path}: {problem}")
        try:
            self._lock.acquire(timeout=0)
        except LockHeld:
            raise RunFolderError(
                f"another run is writing to {self.path} ({self._lock.describe_holder()}); "
                "wait for it, stop it, or choose another --out"
            ) from None
        try:
            self.stale_pid = self._lock.stale_pid
            self.cleaned = self._remove_temporaries()
            found = self.results()
            if found and not overwrite and not self._owns(resume):
                resumable = NEWEST_NAME in found or f"{HISTORY_DIR}/" in found
                hint = f"continue it with --resume {self.path}, " if resumable else ""
                raise RunFolderError(
                    f"{self.path} holds another run ({', '.join(found)}); {hint}pass "
                    "--overwrite to replace it, or choose another --out"
                )
            if found and overwrite and not self._owns(resume):
                self._remove_results()
        except BaseException:
            self._lock.release()
            raise

    def results(self) -> list[str]:
        """The names of the run results in the folder (``checkpoint.pt``, ``summary.json``, ...).

        Example:
            >>> import tempfile
            >>> RunFolder(tempfile.mkdtemp()).results()
            []
        """
        found = [name for name in RESULT_NAMES if (self.path / name).exists()]
        history = self.path / HISTORY_DIR
        if history.is_dir() and any(history.glob("*.pt")):
            found.append(f"{HISTORY_DIR}/")
        return found

    def check_space(self, needed: int, what: str) -> None:
        """Raise ``OSError`` ("no space left on device") when the folder's disk has less than
        ``needed`` bytes free for ``what``.

        Example:
            >>> import tempfile
            >>> RunFolder(tempfile.mkdtemp()).check_space(1 << 80, "a test")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            OSError: no space left on device for a test: ... needed, ... free ...
        """
        free = free_bytes(self.path)
        if free is not None and free < needed:
            raise OSError(
                f"no space left on device for {what}: {_size(needed)} needed, {_size(free)} free "
                f"at {self.path}; free disk space or choose another --out"
            )

    def release(self, remove_if_new: bool = False) -> None:
        """Release the folder (the kernel also does when the process ends).

        ``remove_if_new``: a folder this run made and left empty is removed again (a run
        that failed before its first step leaves nothing behind).
        """
        held = self._lock.held
        self._lock.release()
        if held and remove_if_new and self._created:
            with contextlib.suppress(OSError):
                (self.path / LOCK_NAME).unlink()
                self.path.rmdir()

    def _owns(self, resume: str | os.PathLike[str] | None) -> bool:
        if resume is None:
            return False
        source = Path(resume).resolve()
        mine = self.path.resolve()
        return source == mine or mine in source.parents

    def _remove_temporaries(self) -> list[str]:
        # Holding the lock, no writer of this run is alive: every temporary file is a leftover.
        removed = []
        for folder in (self.path, self.path / HISTORY_DIR):
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if is_temporary(entry.name) and entry.is_file():
                    with contextlib.suppress(OSError):
                        entry.unlink()
                        removed.append(entry.name)
        return removed

    def _remove_results(self) -> None:
        for name in RESULT_NAMES:
            (self.path / name).unlink(missing_ok=True)
        history = self.path / HISTORY_DIR
        if history.is_dir():
            for entry in history.glob("*.pt"):
                entry.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r}, {'held' if self.held else 'not held'})"


def free_bytes(folder: Path) -> int | None:
    """Free bytes on the disk holding ``folder`` (its nearest existing parent), None if unknown."""
    probe = Path(folder).resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def _size(count: int) -> str:
    """``count`` bytes in MB or GB."""
    if count >= 1 << 30:
        return f"{count / 2**30:.1f} GB"
    return f"{count / 2**20:.1f} MB"
