"""Every dependency pyproject.toml installs is one gsnb imports (or runs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; gsnb supports 3.10 too

ROOT = Path(__file__).resolve().parents[1]
# Distribution name -> the module gsnb imports it as.
IMPORTED_AS = {
    "pillow": "PIL",
    "opencv-python-headless": "cv2",
    "imageio-ffmpeg": "imageio_ffmpeg",
    "ipython": "IPython",
}
# Not imported by gsnb itself: the build runs ninja; imageio runs ffmpeg from imageio-ffmpeg;
# plotly's FigureWidget (the panel's curves) imports anywidget without requiring it.
RUN_NOT_IMPORTED = {"ninja", "imageio-ffmpeg", "anywidget"}


def _imported_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "gsnb").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_every_required_dependency_is_used() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower() for spec in project["dependencies"]
    ]
    modules = _imported_modules()
    unused = [
        n
        for n in names
        if n not in RUN_NOT_IMPORTED and IMPORTED_AS.get(n, n.replace("-", "_")) not in modules
    ]
    assert not unused, f"pyproject.toml installs what gsnb never imports: {unused}"


def test_no_project_url_points_nowhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "urls" not in project or all(u.startswith("https://") for u in project["urls"].values())
