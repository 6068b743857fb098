"""``%gs_process`` in a real IPython shell: the stages' widget, the summary, the top view."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gsnb.data.sfm import ProcessError
from gsnb.notebook.process_magics import ProcessMagics, StageProgress

pytest.importorskip("pycolmap")


@pytest.fixture
def shell():
    ip = InteractiveShell.instance()
    ip.register_magics(ProcessMagics)
    return ip


def test_processes_shows_progress_summary_and_top_view(shell, tmp_path: Path, monkeypatch, capsys):
    from tests.data.sfm.conftest import photograph

    photos = photograph(tmp_path / "photos", num_views=24, keep=range(8), size=(256, 192))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs: shown.extend(objs))
    summary = shell.run_line_magic("gs_process", f"{photos.path} --out {tmp_path / 'scene'}")
    assert summary.registered == 8 and (tmp_path / "scene" / "sparse" / "0").is_dir()
    assert "8 of 8 images registered" in capsys.readouterr().out
    box, figure = shown
    labels = [row.children[0].value for row in box.children]
    assert labels == [f"{s}: done" for s in ("images", "features", "matching", "mapping")] + [
        "undistortion: done"
    ]
    points, cameras = figure.data
    assert len(cameras.x) == 8 and len(points.x) == summary.points
    assert sorted(cameras.text) == sorted(photos.truth)


def test_errors_and_help(shell, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr("IPython.display.display", lambda *objs: None)
    with pytest.raises(ProcessError, match=r"%gs_process: .* does not exist"):
        shell.run_line_magic("gs_process", f"{tmp_path / 'nowhere'} --out {tmp_path / 'o'}")
    with pytest.raises(ValueError, match="see %gs_process --help"):
        shell.run_line_magic("gs_process", "photos --out o --fps x")
    assert shell.run_line_magic("gs_process", "--help") is None
    assert "--max-image-size" in capsys.readouterr().out


def test_stage_progress_marks_earlier_stages_done():
    box = StageProgress(["images", "features", "mapping"])
    box.update("mapping", 2, 5)
    assert [box.labels[s].value for s in box.stages] == [
        "images: done",
        "features: done",
        "mapping: 2/5",
    ]
    assert (box.bars["mapping"].value, box.bars["mapping"].max) == (2, 5)
