"""EWA projection (gsnb.raster.projection) against plain matrix maths."""

from __future__ import annotations

import math

import pytest
import torch

from gsnb.raster.projection import covariances_3d, project, quat_to_rotmat, splat_radii

from .bruteforce import project_brute, raw_alphas, rotation_matrices
from .scenes import random_scene

F64 = torch.float64
GEN = torch.Generator().manual_seed(0)


def test_rotation_matrices_are_proper_rotations() -> None:
    quats = 3.0 * torch.randn(100, 4, generator=GEN, dtype=F64)
    rot = quat_to_rotmat(quats)
    eye = torch.eye(3, dtype=F64).expand(100, 3, 3)
    torch.testing.assert_close(rot @ rot.transpose(-1, -2), eye)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(100, dtype=F64))
    torch.testing.assert_close(rot, rotation_matrices(quats))
    torch.testing.assert_close(quat_to_rotmat(-quats), rot)


def test_quaternion_wxyz_convention() -> None:
    half = math.sqrt(0.5)
    about_z = quat_to_rotmat(torch.tensor([[half, 0.0, 0.0, half]], dtype=F64))[0]  # 90 deg about z
    torch.testing.assert_close(
        about_z @ torch.tensor([1.0, 0, 0], dtype=F64), torch.tensor([0.0, 1, 0], dtype=F64)
    )


def test_covariances_3d() -> None:
    quats = torch.randn(20, 4, generator=GEN, dtype=F64)
    scales = torch.rand(20, 3, generator=GEN, dtype=F64)
    cov = covariances_3d(quats, scales)
    rot = rotation_matrices(quats)
    torch.testing.assert_close(cov, rot @ torch.diag_embed(scales**2) @ rot.transpose(-1, -2))
    torch.testing.assert_close(torch.linalg.eigvalsh(cov), (scales**2).sort(-1).values)
    # A quarter turn about z swaps the x and y extents.
    half = math.sqrt(0.5)
    turned = covariances_3d(
        torch.tensor([[half, 0, 0, half]], dtype=F64), torch.tensor([[1.0, 2, 3]], dtype=F64)
    )
    torch.testing.assert_close(turned[0], torch.diag(torch.tensor([4.0, 1, 9], dtype=F64)))


def test_project_matches_plain_matrix_maths() -> None:
    scene = random_scene(50, width=33, height=20, num_cams=3, seed=5)
    proj = project(
        *list(scene.tensors().values())[:4], scene.viewmats, scene.Ks, 33, 20, 0.01, 1e10
    )
    want = project_brute(scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, 33, 20)
    torch.testing.assert_close(proj.means2d, want.means2d)
    torch.testing.assert_close(proj.depths, want.depths)
    conic = torch.linalg.inv(want.cov2d)
    torch.testing.assert_close(
        proj.conics, torch.stack([conic[..., 0, 0], conic[..., 0, 1], conic[..., 1, 1]], -1)
    )


def test_radii_bound_every_pixel_that_alpha_reaches() -> None:
    scene = random_scene(200, width=33, height=20, num_cams=2, seed=6, opacity_range=(0.001, 1.0))
    proj = project(
        *list(scene.tensors().values())[:4], scene.viewmats, scene.Ks, 33, 20, 0.01, 1e10
    )
    splats = project_brute(scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, 33, 20)
    reached = raw_alphas(splats, scene.opacities, 33, 20) >= 1 / 255  # [C, N, H, W]
    visible = (proj.radii > 0).all(-1)
    assert visible.sum() > 100 and (~visible).any()
    # Culled splats reach no pixel (a visible one may still miss: its box is not its ellipse).
    assert not reached[~visible].any()
    py, px = torch.meshgrid(
        torch.arange(20, dtype=F64) + 0.5, torch.arange(33, dtype=F64) + 0.5, indexing="ij"
    )
    dx = (px - proj.means2d[..., 0, None, None]).abs()
    dy = (py - proj.means2d[..., 1, None, None]).abs()
    inside = (dx <= proj.radii[..., 0, None, None]) & (dy <= proj.radii[..., 1, None, None])
    assert not (reached & ~inside).any()


def test_radii_are_the_box_of_the_1_over_255_ellipse() -> None:
    means2d = torch.tensor([[[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]]], dtype=F64)
    cov_xx = torch.tensor([[4.0, 9.0, 0.3]], dtype=F64)
    cov_yy = torch.tensor([[1.0, 16.0, 0.3]], dtype=F64)
    opacities = torch.tensor([0.5, 1.0, 1 / 255], dtype=F64)
    radii = splat_radii(means2d, cov_xx, cov_yy, opacities, 20, 20)
    k = [2 * math.log(255 * o) for o in opacities.tolist()]
    want = [
        [
            max(1, math.ceil(math.sqrt(k[i] * cov_xx[0, i]))),
            max(1, math.ceil(math.sqrt(k[i] * cov_yy[0, i]))),
        ]
        for i in range(3)
    ]
    assert radii[0].tolist() == want
    assert radii.dtype == torch.int32


@pytest.mark.parametrize(
    ("centre", "visible"),
    [((-5.0, 10.0), True), ((-8.0, 10.0), False), ((25.0, 10.0), True), ((28.0, 10.0), False)],
)
def test_radii_are_zero_when_the_box_misses_every_pixel_centre(
    centre: tuple[float, float], visible: bool
) -> None:
    # Box half extent ceil(sqrt(2 ln(127.5) 4)) = 7 px, image 20 px wide.
    radii = splat_radii(
        torch.tensor([[centre]], dtype=F64), torch.tensor([[4.0]], dtype=F64),
        torch.tensor([[4.0]], dtype=F64), torch.tensor([0.5], dtype=F64), 20, 20,
    )  # fmt: skip
    assert bool((radii > 0).all()) == visible
