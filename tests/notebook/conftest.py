"""A tiny ray-traced scene and trainers on it, for the panel and magic tests (CPU, seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gsnb.data.dataset import SceneDataset, load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer


@pytest.fixture(scope="session")
def scene_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six 16x16 views of the synthetic demo scene with 60 surface points."""
    return make_synthetic_scene(
        tmp_path_factory.mktemp("scene"), num_views=6, size=16, num_points=60, samples=1
    )


@pytest.fixture
def dataset(scene_root: Path) -> SceneDataset:
    """The scene with every third view held out for testing."""
    return load_dataset(scene_root, test_every=3)


@pytest.fixture
def make_trainer(dataset: SceneDataset) -> Iterator[Callable[..., Trainer]]:
    """Makes CPU trainers (few Gaussians, SH degree 1); stops them after the test."""
    made: list[Trainer] = []

    def make(steps: int = 1000, **kwargs) -> Trainer:
        config = TrainConfig(steps=steps, max_init_points=60, sh_degree=1, device="cpu")
        trainer = Trainer(dataset, config, **kwargs)
        made.append(trainer)
        return trainer

    yield make
    for trainer in made:
        trainer.stop(timeout=30)
