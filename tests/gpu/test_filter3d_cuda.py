"""The 3D filter on the GPU: its recomputation inside a training step waits for nothing."""

from __future__ import annotations

import traceback
import warnings

import torch

from gsnb.train import TrainConfig, Trainer
from tests.train.conftest import build_scene


def test_recomputing_the_filter_does_not_wait_for_the_gpu(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=32, views=4, points=200)
    trainer = Trainer(data, TrainConfig(steps=5, device="cuda", backend="cuda", filter3d=True))
    splats = trainer.model.splats
    trainer.filter3d.variances(splats, 0)  # the first use: allocations settle
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a copy from the host would synchronise
    try:
        value = trainer.filter3d.variances(splats, trainer.filter3d.every)  # a recomputation
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert value.device.type == "cuda" and value.shape == (trainer.num_gaussians,)


def syncs_in_one_step(trainer: Trainer) -> list[str]:
    """The host syncs torch reports during one step, after three that create every state, each
    named by the gsnb lines that called it (so that a failure says where the new sync is)."""
    trainer.run(3)
    trainer.filter3d.every = 3  # with filter3d on, the measured step recomputes it
    torch.cuda.synchronize()
    found: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message).lower():
            frames = [f for f in traceback.extract_stack()[:-1] if "/gsnb/" in f.filename]
            found.append(
                " <- ".join(
                    f"{f.filename.split('/gsnb/')[-1]}:{f.lineno}" for f in frames[::-1][:4]
                )
            )

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return found


def test_the_new_options_add_no_host_sync_to_a_step(cuda_ext, tmp_path):
    # A step reads its metrics in one copy to the host (values.tolist()); the 3D filter and its
    # recomputation, the exposure and pose corrections and the antialiased mode add none.
    data = build_scene(tmp_path / "scene", size=32, views=6, points=200, test_every=3)
    base = dict(steps=20, device="cuda", backend="cuda")
    plain = syncs_in_one_step(Trainer(data, TrainConfig(**base)))
    options = dict(filter3d=True, exposure=True, pose_refine=True, rasterize_mode="antialiased")
    every = syncs_in_one_step(Trainer(data, TrainConfig(**base, **options)))
    assert plain and len(every) == len(plain), (plain, every)
