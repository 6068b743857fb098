"""An operating-system file lock that names its holder and notices a holder that was killed.

The lock itself is ``filelock``'s (``flock`` on POSIX): the kernel releases it when its
holder dies, however it dies, so a lock never outlives its process. Beside it an owner
file records who holds it (pid, host, start time). An owner file found by whoever takes
the lock next can only come from a holder that was killed before it could clean up: its
pid is reported as :attr:`OwnedLock.stale_pid`, so the caller can treat what that holder
was writing as unfinished.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from gsnb.utils.atomic import atomic_write

OWNER_LIMIT = 4096
"""Largest owner file read; a bigger one is not ours and counts as an unknown holder."""


class LockHeld(RuntimeError):
    """The lock is held by another live process (:attr:`holder` describes it)."""

    def __init__(self, message: str, holder: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.holder = holder


class OwnedLock:
    """A file lock at ``lock_path`` with an owner file at ``owner_path``.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> lock = OwnedLock(folder / "run.lock", folder / "run.owner.json")
        >>> lock.acquire(timeout=0)
        >>> lock.held, lock.stale_pid
        (True, None)
        >>> OwnedLock(folder / "run.lock", folder / "run.owner.json").acquire(timeout=0)
        Traceback (most recent call last):
        ...
        gsnb.utils.lock.LockHeld: ... is held by pid ...
        >>> lock.release()
    """

    def __init__(self, lock_path: Path, owner_path: Path) -> None:
        self.lock_path = Path(lock_path)
        self.owner_path = Path(owner_path)
        self._lock = FileLock(str(self.lock_path))
        self.stale_pid: int | None = None
        self.waited = 0.0

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._lock.is_locked

    def holder(self) -> dict[str, Any] | None:
        """The owner file's record (``pid``, ``host``, ``started``), ``{}`` when unreadable,
        None when there is none."""
        try:
            if self.owner_path.stat().st_size > OWNER_LIMIT:
                return {}
            record = json.loads(self.owner_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def describe_holder(self) -> str:
        """``pid 123 on host, since 12:00:01``, or ``holder unknown``.

        Example:
            >>> import tempfile, pathlib
            >>> folder = pathlib.Path(tempfile.mkdtemp())
            >>> OwnedLock(folder / "a.lock", folder / "a.json").describe_holder()
            'holder unknown'
        """
        record = self.holder() or {}
        pid = record.get("pid")
        if not isinstance(pid, int):
            return "holder unknown"
        text = f"pid {pid}"
        if isinstance(record.get("host"), str):
            text += f" on {record['host']}"
        if isinstance(record.get("started"), (int, float)):
            text += f", since {time.strftime('%H:%M:%S', time.localtime(record['started']))}"
        return text

    def acquire(self, timeout: float = 0.0, on_wait: Any = None) -> None:
        """Take the lock, waiting at most ``timeout`` seconds (0: not at all).

        ``on_wait(description)`` is called once before waiting. Raises
        :class:`LockHeld` naming the holder when the time runs out.
        """
        start = time.monotonic()
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            if timeout <= 0:
                raise LockHeld(
                    f"{self.lock_path} is held by {self.describe_holder()}", self.holder()
                ) from None
            if on_wait is not None:
                on_wait(self.describe_holder())
            try:
                self._lock.acquire(timeout=timeout)
            except Timeout:
                raise LockHeld(
                    f"{self.lock_path} has been held by {self.describe_holder()} for "
                    f"{timeout:.0f} s",
                    self.holder(),
                ) from None
            self.waited = time.monotonic() - start
        try:
            # Holding the OS lock, a leftover owner file can only come from a killed holder.
            record = self.holder()
            if record is None:
                self.stale_pid = None
            else:
                pid = record.get("pid")
                self.stale_pid = pid if isinstance(pid, int) else -1
            with atomic_write(self.owner_path, "w") as handle:
                json.dump(
                    {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()},
                    handle,
                )
        except BaseException:
            self._lock.release()
            raise

    def release(self) -> None:
        """Remove the owner file, then release the lock (a no-op when not held)."""
        if not self._lock.is_locked:
            return
        with contextlib.suppress(OSError):
            self.owner_path.unlink()
        self._lock.release()

    def __enter__(self) -> OwnedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
