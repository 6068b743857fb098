"""Atomic writes leave a whole file with the permissions a plain ``open()`` gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gsnb.utils.atomic import atomic_write, make_temporary, plain_file_mode


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_file_gets_the_mode_open_would_give(tmp_path: Path, umask_022: None) -> None:
    with open(tmp_path / "plain.bin", "wb") as f:
        f.write(b"x")
    with atomic_write(tmp_path / "atomic.bin") as f:
        f.write(b"x")
    assert _mode(tmp_path / "atomic.bin") == _mode(tmp_path / "plain.bin") == 0o644


def test_umask_is_respected(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        assert plain_file_mode() == 0o600
        with atomic_write(tmp_path / "private.txt", "w") as f:
            f.write("secret")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "private.txt") == 0o600


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "data.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target, "w") as f:
        f.write("new, half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_temporary_beside_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="does not exist"):
        make_temporary(tmp_path / "missing" / "file.bin")
