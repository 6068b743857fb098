"""``gsnb process``: the summary, one-line errors, and what happens without pycolmap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gsnb.cli import main
from tests.data.sfm.conftest import Capture

INSTALL = 'pip install "gsnb[sfm]"'


def test_prints_the_summary(photos: Capture, processed_photos: Path, capsys):
    assert main(["process", str(photos.path), "--out", str(processed_photos), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "24 of 24 images registered" in out
    assert "(reused: images, features, matching, mapping)" in out
    assert f"gsnb train {processed_photos}" in out


def test_error_is_one_line(tmp_path: Path, capsys):
    (tmp_path / "empty").mkdir()
    args = ["process", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gsnb process: error: no photos in")


def test_without_pycolmap_names_the_extra(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap now raises ImportError
    assert main(["process", str(tmp_path), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and INSTALL in err[0], err


@pytest.mark.timeout(120)
def test_nothing_else_needs_pycolmap():
    code = (
        "import sys; sys.modules['pycolmap'] = None\n"
        "import gsnb, gsnb.cli, gsnb.data, gsnb.data.sfm, gsnb.data.sfm.commands\n"
        "import gsnb.data.sfm.pipeline, gsnb.notebook.magics, gsnb.notebook.process_magics\n"
        "from gsnb.cli import build_parser\n"
        "build_parser('process').parse_args(['process', 'photos', '--out', 'x'])\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
