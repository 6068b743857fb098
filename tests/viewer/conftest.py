"""A small non-square scene and a CPU trainer on it, for the viewer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gsnb.data.dataset import SceneDataset, load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer
from gsnb.viewer import Viewer


@pytest.fixture(scope="session")
def wide_scene(tmp_path_factory: pytest.TempPathFactory) -> SceneDataset:
    """Five 24x16 views of the synthetic demo scene (one held out), 80 surface points."""
    folder = tmp_path_factory.mktemp("wide")
    make_synthetic_scene(folder, num_views=5, size=(24, 16), num_points=80, samples=1)
    return load_dataset(folder, test_every=5)


@pytest.fixture
def trainer(wide_scene: SceneDataset) -> Iterator[Trainer]:
    """A seeded CPU trainer with SH degree 1; stopped after the test."""
    run = Trainer(wide_scene, TrainConfig(steps=10_000, sh_degree=1, device="cpu", seed=3))
    yield run
    run.stop(timeout=30)


@pytest.fixture
def viewers() -> Iterator:
    """Makes viewers; stops them all after the test."""
    made: list[Viewer] = []

    def make(*args, **kwargs) -> Viewer:
        made.append(viewer := Viewer(*args, **kwargs))
        return viewer

    yield make
    for viewer in made:
        viewer.stop()
