"""The docstring examples of gsnb.train run and show what they print.

Method examples speak of ``trainer``: a small trainer on a 4-view synthetic scene
of 16 x 16 px (view 0 held out), made fresh for each module that uses one.
"""

from __future__ import annotations

import doctest
import importlib
import tempfile

import pytest

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer

MODULES = [
    "gsnb.train",
    "gsnb.train.batch",
    "gsnb.train.checkpoint",
    "gsnb.train.commands",
    "gsnb.train.config",
    "gsnb.train.estimate",
    "gsnb.train.control",
    "gsnb.train.corrections",
    "gsnb.train.distributed",
    "gsnb.train.launcher",
    "gsnb.train.process_group",
    "gsnb.train.evaluation",
    "gsnb.train.filter3d",
    "gsnb.train.exported",
    "gsnb.train.exposure",
    "gsnb.train.health",
    "gsnb.train.inputs",
    "gsnb.train.interrupts",
    "gsnb.train.knobs",
    "gsnb.train.losses",
    "gsnb.train.memory",
    "gsnb.train.metrics",
    "gsnb.train.options",
    "gsnb.train.optim",
    "gsnb.train.pose_refine",
    "gsnb.train.regularizers",
    "gsnb.train.rendering",
    "gsnb.train.trainer",
    "gsnb.train.strategy",
    "gsnb.train.strategy.base",
    "gsnb.train.strategy.default",
    "gsnb.train.strategy.mcmc",
    "gsnb.train.strategy.ops",
    "gsnb.train.timeline",
    "gsnb.model",
]


NEEDS_TRAINER = {
    "gsnb.train.trainer",
    "gsnb.train.control",
    "gsnb.train.commands",
    "gsnb.train.exported",
}


def small_trainer() -> Trainer:
    root = make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16, num_points=100)
    data = load_dataset(root, test_every=4)
    return Trainer(data, TrainConfig(steps=10_000, max_init_points=100))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    extra = {"trainer": small_trainer()} if name in NEEDS_TRAINER else {}
    result = doctest.testmod(module, extraglobs=extra, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
