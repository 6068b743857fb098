"""The owned file lock: refusal naming the holder, recovery after a killed holder."""

from __future__ import annotations

import doctest
import subprocess
import sys
import textwrap

import pytest

import gsnb.utils.lock
from gsnb.utils.lock import LockHeld, OwnedLock


def test_examples() -> None:
    assert doctest.testmod(gsnb.utils.lock, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_killed_holder_is_reported_as_stale(tmp_path) -> None:
    holder = textwrap.dedent(
        f"""
        from gsnb.utils.lock import OwnedLock
        import time
        lock = OwnedLock({str(tmp_path / "a.lock")!r}, {str(tmp_path / "a.json")!r})
        lock.acquire()
        print("held", flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        lock = OwnedLock(tmp_path / "a.lock", tmp_path / "a.json")
        with pytest.raises(LockHeld, match=f"held by pid {process.pid} on ") as caught:
            lock.acquire(timeout=0)
        assert caught.value.holder["pid"] == process.pid
    finally:
        process.kill()
        process.wait()
    with OwnedLock(tmp_path / "a.lock", tmp_path / "a.json") as lock:
        assert lock.stale_pid == process.pid
    assert not (tmp_path / "a.json").exists()
