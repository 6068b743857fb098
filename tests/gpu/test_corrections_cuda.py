"""Exposure and pose corrections on the CUDA backend against the reference backend."""

from __future__ import annotations

import math

import torch

import gsnb
from gsnb.train import TrainConfig, Trainer
from gsnb.train.pose_refine import correction_matrices, move_splats
from tests.train.conftest import build_scene
from tests.train.test_pose_refine import CORRECTION, blobs


def test_moved_gaussians_on_cuda_match_the_moved_camera_on_the_reference(cuda_ext):
    splats, viewmat, K = blobs(0)
    target = torch.rand(32, 40, 3, generator=torch.Generator().manual_seed(5))
    grads = []
    for backend in ("reference", "cuda"):
        device = "cpu" if backend == "reference" else "cuda"
        used = {k: v.to(device) for k, v in splats.items()}
        p = CORRECTION.clone().to(device).requires_grad_(True)
        if backend == "reference":  # the camera moves: the reference differentiates viewmats
            camera, gaussians = correction_matrices(p, 2.0) @ viewmat, used
        else:  # the Gaussians move: the CUDA backend has no viewmats gradient
            camera, gaussians = viewmat.to(device), move_splats(used, viewmat.to(device), p, 2.0)
        out = gsnb.render_splats(
            gaussians, camera[None], K[None].to(device), 40, 32, sh_degree=0, backend=backend
        )
        (out.rgb[0] - target.to(device)).abs().mean().backward()
        grads.append((out.rgb[0].detach().cpu(), p.grad.cpu()))
    (ref_rgb, ref_grad), (cuda_rgb, cuda_grad) = grads
    assert (ref_rgb - cuda_rgb).abs().max() < 1e-3
    assert torch.allclose(cuda_grad, ref_grad, rtol=2e-2, atol=1e-5), (cuda_grad, ref_grad)


def test_training_with_both_on_cuda_learns_them(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=48, views=6, gaussians=60, points=200,
                       test_every=3)  # fmt: skip
    config = TrainConfig(
        steps=30, device="cuda", backend="cuda", exposure=True, pose_refine=True, lr_pose=1e-3
    )
    trainer = Trainer(data, config)
    trainer.run()
    fix = trainer.corrections
    assert fix.exposure.matrices.is_cuda and fix.poses.params.is_cuda
    assert not torch.equal(fix.exposure.matrices, torch.eye(3, 4, device="cuda").expand(6, 3, 4))
    assert fix.poses.params.abs().sum() > 0 and trainer.skipped_steps == 0
    result = trainer.evaluate("test")
    assert result.protocol == "right halves" and math.isfinite(result.psnr)
    path = trainer.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    resumed = Trainer.resume_from(path, data)
    assert torch.equal(resumed.corrections.poses.params, fix.poses.params)
    assert resumed.corrections.exposure.matrices.device.type == "cuda"
