"""Steering two GPU workers (NCCL) through the store: knobs at the same step, pause, stop."""

from __future__ import annotations

import pytest
import torch

from tests.train.conftest import build_scene
from tests.train.test_remote import check_steering

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs 2 GPUs (NCCL between them)"
)


@pytest.mark.timeout(300)
def test_a_knob_from_the_store_applies_at_the_same_step_on_two_gpus(tmp_path) -> None:
    data = build_scene(tmp_path / "scene", size=64, views=4)
    config = dict(batch_size=2, steps=100000, device="cuda", backend="cuda", sh_degree=0)
    check_steering(data, config, tmp_path)
