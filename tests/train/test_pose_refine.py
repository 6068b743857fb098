"""Pose refinement: rotations, the move of the Gaussians against a moved camera, recovery."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import gsnb
from gsnb.cameras import intrinsics, look_at
from gsnb.raster.projection import quat_to_rotmat
from gsnb.train import TrainConfig, Trainer
from gsnb.train.pose_refine import (
    PoseRefinement,
    axis_angle_to_matrix,
    axis_angle_to_quat,
    correction_matrices,
    move_splats,
    pose_difference,
    quat_multiply,
    skew,
)
from tests.train.known_scene import known_scene, starting_copy, with_photos


def test_rotations_agree_with_the_matrix_exponential() -> None:
    g = torch.Generator().manual_seed(0)
    for scale in (1e-7, 1e-3, 0.5, 3.0):
        w = scale * torch.randn(5, 3, generator=g, dtype=torch.float64)
        R = axis_angle_to_matrix(w)
        assert torch.allclose(R, torch.linalg.matrix_exp(skew(w)), atol=1e-12)
        assert torch.allclose(quat_to_rotmat(axis_angle_to_quat(w)), R, atol=1e-12)
    zero = torch.zeros(3, requires_grad=True)
    axis_angle_to_matrix(zero)[0, 1].backward()
    assert zero.grad.tolist() == [0.0, 0.0, -1.0]  # d R / d w at 0 is skew: finite


def test_quaternion_product_composes_rotations() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    a, b = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    composed = quat_to_rotmat(quat_multiply(a, b))
    assert torch.allclose(composed, quat_to_rotmat(a) @ quat_to_rotmat(b), atol=1e-5)


def blobs(degree: int, seed: int = 0):
    """Random Gaussians in front of a camera, stored as 3DGS stores them."""
    g = torch.Generator().manual_seed(seed)
    n = 60
    splats = {
        "means": (torch.rand(n, 3, generator=g) - 0.5) * 1.5,
        "quats": torch.randn(n, 4, generator=g),
        "scales": torch.log(0.05 + 0.1 * torch.rand(n, 3, generator=g)),
        "opacities": torch.randn(n, generator=g),
        "sh0": torch.randn(n, 1, 3, generator=g),
        "shN": 0.3 * torch.randn(n, (degree + 1) ** 2 - 1, 3, generator=g),
    }
    eye = torch.tensor([0.4, -2.8, 1.2])
    viewmat = look_at(eye, torch.zeros(3), up=torch.tensor([0.0, 0.0, 1.0]))
    return splats, viewmat, intrinsics(40, 32, 55.0, axis="x")


def two_renders(degree: int, params: torch.Tensor, extent: float = 2.0):
    """The image and its gradient w.r.t. the correction, (a) moving the camera (the reference
    backend differentiates viewmats), (b) moving the Gaussians from the uncorrected camera."""
    splats, viewmat, K = blobs(degree)
    target = torch.rand(32, 40, 3, generator=torch.Generator().manual_seed(5))
    results = []
    for moved in (False, True):
        p = params.clone().requires_grad_(True)
        if moved:
            used, camera = move_splats(splats, viewmat, p, extent), viewmat
        else:
            used, camera = splats, correction_matrices(p, extent) @ viewmat
        out = gsnb.render_splats(
            used, camera[None], K[None], 40, 32, sh_degree=degree, backend="reference"
        )
        loss = (out.rgb[0] - target).abs().mean()
        loss.backward()
        results.append((out.rgb[0].detach(), p.grad.clone()))
    return results


CORRECTION = torch.tensor([0.03, -0.04, 0.02, 0.01, -0.008, 0.012])
"""About 3 degrees and 3 cm for a scene of 2 m."""


def test_moving_the_gaussians_equals_moving_the_camera_for_base_colours() -> None:
    (cam_rgb, cam_grad), (moved_rgb, moved_grad) = two_renders(0, CORRECTION)
    assert (cam_rgb - moved_rgb).abs().max() < 1e-5
    assert torch.allclose(moved_grad, cam_grad, rtol=1e-3, atol=1e-6), (moved_grad, cam_grad)
    # At zero correction too (where the gradients start).
    (_, cam_grad0), (_, moved_grad0) = two_renders(0, torch.zeros(6))
    assert torch.allclose(moved_grad0, cam_grad0, rtol=1e-3, atol=1e-6)


def test_view_dependent_colour_differs_by_the_correction_angle_only() -> None:
    (cam_rgb, cam_grad), (moved_rgb, moved_grad) = two_renders(3, CORRECTION)
    difference = (cam_rgb - moved_rgb).abs()
    # SH is read at a direction turned by the correction (about 3 degrees here): a small
    # colour difference, far below what the correction itself changes in the image.
    (no_fix, _), _ = two_renders(3, torch.zeros(6))
    change = (cam_rgb - no_fix).abs()
    print(f"degree 3: max {difference.max():.2e}, mean {difference.mean():.2e} (the "
          f"correction itself changes pixels by mean {change.mean():.2e})")  # fmt: skip
    assert 0 < difference.mean() < 0.05 * change.mean()
    # The rotation's gradient also sees the colours turn with the Gaussians: close, not equal
    # (cosine 0.98 here; 1 for degree 0, see above).
    cosine = torch.nn.functional.cosine_similarity(moved_grad, cam_grad, dim=0)
    print(f"gradient cosine {cosine:.4f}")
    assert cosine > 0.95, (moved_grad, cam_grad)


def test_pose_difference_measures_angles_and_centres() -> None:
    w = torch.tensor([0.0, 0.0, math.radians(4.0)])
    moved = correction_matrices(torch.cat([w, torch.tensor([0.0, 0.0, 0.0])]), 1.0)
    angle, distance = pose_difference(moved, torch.eye(4))
    assert math.degrees(angle) == pytest.approx(4.0, abs=1e-4) and distance < 1e-6


def perturbed_scene(tmp_path: Path, size: int = 24):
    """The known scene with the cameras of views 1-4 turned by 3 degrees about a random axis
    and moved by 1% of the scene extent (5 cm for its 5 m); views 0 and 5 are exact."""
    data, model, photos = known_scene(tmp_path / "scene", size=size)
    g = torch.Generator().manual_seed(2)
    errors = torch.zeros(len(photos), 6)
    for i in (1, 2, 3, 4):
        axis, shift = torch.randn(3, generator=g), torch.randn(3, generator=g)
        errors[i, :3] = axis / axis.norm() * math.radians(3.0)
        errors[i, 3:] = shift / shift.norm() * 0.01
    true = torch.stack([v.viewmat for v in data.views])
    wrong = correction_matrices(errors, data.extent) @ true
    dataset = with_photos(data, tmp_path / "posed", photos, viewmats=list(wrong))
    return dataset, model, true, wrong


def reprojection(data, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean pixel distance ``[V]`` between the scene's points seen by cameras ``a`` and ``b``."""
    out = []
    for i, view in enumerate(data.views):
        pixels = []
        for viewmat in (a[i], b[i]):
            p = (data.points @ viewmat[:3, :3].T + viewmat[:3, 3]) @ view.K.T
            pixels.append(p[:, :2] / p[:, 2:])
        out.append((pixels[0] - pixels[1]).norm(dim=-1).mean())
    return torch.stack(out)


def test_training_recovers_known_pose_errors(tmp_path: Path) -> None:
    data, truth, true, wrong = perturbed_scene(tmp_path, size=20)
    psnr = {}
    for on in (False, True):
        # lr_pose 2e-3 instead of 1e-5: 150 steps here against gsplat's 30000, and the
        # translation is in extents (5 m), so a step moves a pose by at most ~0.1 deg, ~1 cm.
        config = TrainConfig(
            steps=150, backend="reference", sh_degree=0, pose_refine=on, lr_pose=2e-3
        )
        trainer = Trainer(data, config, model=starting_copy(truth, data.background))
        trainer.run()
        psnr[on] = trainer.evaluate("train").psnr
    with torch.no_grad():
        fixed = trainer.corrections.poses.corrected_viewmats(wrong, torch.arange(len(wrong)))
    angle_before, centre_before = pose_difference(wrong, true)
    angle_after, centre_after = pose_difference(fixed, true)
    pixels_before, pixels_after = reprojection(data, wrong, true), reprojection(data, fixed, true)
    moved = slice(1, 5)
    print(
        f"PSNR {psnr[False]:.2f} -> {psnr[True]:.2f} dB; rotation error (deg) "
        f"{torch.rad2deg(angle_before).tolist()} -> {torch.rad2deg(angle_after).tolist()}; "
        f"centre error (extents) {(centre_before / data.extent).tolist()} -> "
        f"{(centre_after / data.extent).tolist()}; reprojection (px) "
        f"{pixels_before.tolist()} -> {pixels_after.tolist()}"
    )
    assert psnr[True] > psnr[False] + 5.0
    # What the photos pin down is where the scene lands in each image: at 20 px a turn of
    # the camera and a shift across the view look nearly alike, so the angle alone is only
    # partly recovered while the reprojection error falls several times.
    assert (pixels_after[moved] < 0.4 * pixels_before[moved]).all()
    assert pixels_after.mean() < 0.3 * pixels_before.mean()
    assert angle_after[moved].mean() < 0.6 * angle_before[moved].mean()


def test_switched_off_it_stops_learning_and_stays_applied(tmp_path: Path) -> None:
    data, truth, *_ = perturbed_scene(tmp_path)
    config = TrainConfig(steps=40, backend="reference", sh_degree=0, pose_refine=True)
    config.lr_pose = 1e-3
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    trainer.run(10)
    learned = trainer.corrections.poses.params.detach().clone()
    assert learned.abs().sum() > 0
    trainer.set(pose_refine=False)
    trainer.run(10)
    assert torch.equal(trainer.corrections.poses.params.detach(), learned)
    view = data.train[2]
    plain, corrected = trainer.render_view(view).rgb, trainer.render_view(view, corrected=True).rgb
    assert not torch.equal(plain, corrected)  # still applied


def test_corrections_learn_from_the_start_step_on(tmp_path: Path) -> None:
    data, truth, *_ = perturbed_scene(tmp_path)
    config = TrainConfig(
        steps=40, backend="reference", sh_degree=0, pose_refine=True, lr_pose=1e-3,
        pose_refine_start=8,
    )  # fmt: skip
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    seen = []
    trainer.on_step(lambda m: seen.append(trainer.corrections.poses.params.detach().clone()))
    trainer.run(12)
    # Steps 0-7 leave the corrections at zero and unlearned; step 8 is the first to move them.
    assert all(p.abs().sum() == 0 for p in seen[:8])
    assert seen[8].abs().sum() > 0 and seen[11].abs().sum() > seen[8].abs().sum()
    assert trainer.corrections.poses.learned
    # A live change: a later start stops the learning until the step reaches it.
    trainer.set(pose_refine_start=30)
    learned = trainer.corrections.poses.params.detach().clone()
    trainer.run(5)
    assert torch.equal(trainer.corrections.poses.params.detach(), learned)
    view = data.train[2]
    plain, corrected = trainer.render_view(view).rgb, trainer.render_view(view, corrected=True).rgb
    assert not torch.equal(plain, corrected)  # learned corrections stay applied meanwhile


def test_state_refuses_other_views() -> None:
    poses = PoseRefinement(["a.png", "b.png"], extent=1.0)
    with pytest.raises(ValueError, match="other views"):
        PoseRefinement(["b.png", "a.png"], extent=1.0).load_state_dict(poses.state_dict())
    assert TrainConfig().lr_pose == 1e-5 and TrainConfig().pose_weight_decay == 1e-6
    assert TrainConfig().pose_refine_start == 0  # gsplat's pose_opt learns from the start
