"""Fixtures for gsnb.data tests: the shared fox capture, and small datasets built in tmp folders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gsnb.data.colmap import ColmapModel, read_colmap_model, write_colmap_text
from gsnb.data.synthetic import make_synthetic_scene

FOX = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "fox"


@pytest.fixture(scope="session")
def fox() -> Path:
    """The fox capture beside the checkout (research-use data, never copied into the repo)."""
    if not (FOX / "sparse" / "0" / "cameras.bin").is_file():
        pytest.skip(f"the fox capture is not at {FOX.resolve()} (it lives in ../shared/data/fox)")
    return FOX.resolve()


@pytest.fixture(scope="session")
def fox_model(fox: Path) -> ColmapModel:
    """The fox's COLMAP model, read once."""
    return read_colmap_model(fox / "sparse" / "0")


def make_fox_subset(fox: Path, model: ColmapModel, folder: Path, count: int) -> Path:
    """A COLMAP text dataset in ``folder`` with the first ``count`` fox images (symlinked)."""
    keep = sorted(model.images, key=lambda i: model.images[i][0])[:count]
    sub = ColmapModel(
        model.cameras, {i: model.images[i] for i in keep}, model.points, model.points_rgb
    )
    (folder / "sparse" / "0").mkdir(parents=True)
    (folder / "images").mkdir()
    for i in keep:
        name = model.images[i][0]
        (folder / "images" / name).symlink_to(fox / "images" / name)
    write_colmap_text(sub, folder / "sparse" / "0")
    return folder


@pytest.fixture
def fox_subset(fox: Path, fox_model: ColmapModel, tmp_path: Path) -> Callable[[int], Path]:
    """``fox_subset(count)``: a fresh text-model dataset of the first ``count`` fox images."""
    return lambda count: make_fox_subset(fox, fox_model, tmp_path / f"fox{count}", count)


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic scene (8 views of 48x40), made once per session."""
    return make_synthetic_scene(tmp_path_factory.mktemp("synthetic"), num_views=8, size=(48, 40))
