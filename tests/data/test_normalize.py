"""gsnb.data.normalize: the canonical world frame and similarities applied to datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gsnb.cameras import look_at, rigid_inverse
from gsnb.data import load_dataset
from gsnb.data.normalize import normalize_world, transform_dataset, world_alignment
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer
from gsnb.train.strategy import DefaultStrategy


def ring_capture(radius: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    """Cameras on a tilted ring around the origin, 0.3 radii above its plane, looking at the
    origin (so every optical axis passes through it: the focus); points in a flat slab."""
    rng = np.random.default_rng(0)
    centre = np.zeros(3)
    tilt = torch.linalg.matrix_exp(torch.tensor([[0, -0.3, 0.2], [0.3, 0, -0.5], [-0.2, 0.5, 0]]))
    tilt = tilt.double().numpy()
    eyes = [
        centre + tilt @ (radius * np.array([np.cos(a), np.sin(a), 0.3]))
        for a in np.linspace(0, 2 * np.pi, 16, endpoint=False)
    ]
    views = np.stack([look_at(e, centre, up=tilt @ np.array([0, 0, 1.0])) for e in eyes])
    slab = rng.normal(size=(800, 3)) * (1.5, 0.7, 0.05)
    slab[:600, 2] -= 0.3  # most points low: the floor
    return views, centre + slab @ tilt.T


def test_world_alignment_centres_scales_and_orders_the_principal_axes() -> None:
    views, points = ring_capture(radius=4.0)
    T = world_alignment(views, points)
    scale = float(np.cbrt(np.linalg.det(T[:3, :3])))
    rotation = T[:3, :3] / scale
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-9)
    distance = 4.0 * np.hypot(1.0, 0.3)  # every camera this far from the focus
    assert scale == pytest.approx(1 / distance, rel=1e-6)
    moved = points @ T[:3, :3].T + T[:3, 3]
    cov = np.cov(moved, rowvar=False)
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0, atol=1e-9)
    assert cov[0, 0] > cov[1, 1] > cov[2, 2]  # x the widest spread, z the thinnest
    # centred on the points' median (taken before the last rotation, so near 0, not at 0)
    assert np.abs(np.median(moved, axis=0)).max() < 0.05
    assert np.median(moved[:, 2]) < np.mean(moved[:, 2])  # the denser side (the floor) down
    centres = rigid_inverse(views)[:, :3, 3] @ T[:3, :3].T + T[:3, 3]
    # the ring lies parallel to the slab's plane
    # (to the sampling noise of the points' axes, well under a degree)
    assert np.ptp(centres[:, 2]) < 0.02


GSPLAT_NORMALIZE = (
    Path(__file__).resolve().parents[2]
    / ".."
    / "shared"
    / "anchors"
    / "gsplat-simple-trainer"
    / "examples"
    / "datasets"
    / "normalize.py"
)


def gsplat_alignment(viewmats: np.ndarray, points: np.ndarray) -> np.ndarray:
    """gsplat 1.5.3's own normalize_world_space transform (its examples' code, run as is)."""
    import importlib.util

    if not GSPLAT_NORMALIZE.is_file():
        pytest.skip(f"gsplat's examples are not at {GSPLAT_NORMALIZE.resolve()}")
    spec = importlib.util.spec_from_file_location("gsplat_normalize", GSPLAT_NORMALIZE)
    assert spec is not None and spec.loader is not None
    gsplat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gsplat)
    c2w = rigid_inverse(viewmats)
    first = gsplat.similarity_from_cameras(c2w)
    moved = gsplat.transform_points(first, points)
    second = gsplat.align_principal_axes(moved)
    total = second @ first
    moved = gsplat.transform_points(second, moved)
    if np.median(moved[:, 2]) > np.mean(moved[:, 2]):  # simple_trainer's colmap.py flip
        total = np.diag([1.0, -1.0, -1.0, 1.0]) @ total
    return total


@pytest.mark.parametrize("seed", range(5))
def test_world_alignment_is_gsplats_normalize_world_space(seed: int) -> None:
    rng = np.random.default_rng(seed)
    turn = rng.normal(size=(3, 3))
    tilt = torch.linalg.matrix_exp(torch.from_numpy(turn - turn.T)).numpy()
    centre = rng.normal(size=3) * 5
    eyes = [
        centre + tilt @ (rng.uniform(2, 6) * np.array([np.cos(a), np.sin(a), rng.uniform(0, 1)]))
        for a in rng.uniform(0, 2 * np.pi, 12)
    ]
    target = centre + rng.normal(size=3) * 0.3  # the cameras look near, not at, the centre
    views = np.stack([look_at(e, target, up=tilt @ np.array([0, 0, 1.0])) for e in eyes])
    points = centre + (rng.normal(size=(400, 3)) * (2.0, 1.0, 0.3)) @ tilt.T
    np.testing.assert_allclose(
        world_alignment(views, points), gsplat_alignment(views, points), atol=1e-9
    )


def test_world_alignment_refuses_too_little_to_align() -> None:
    with pytest.raises(ValueError, match="needs a camera and 3 points"):
        world_alignment(np.eye(4)[None], np.zeros((2, 3)))


def test_transform_dataset_moves_cameras_points_centre_and_extent(tmp_path: Path) -> None:
    ds = load_dataset(make_synthetic_scene(tmp_path, num_views=6, size=16), test_every=3)
    rotation = torch.linalg.matrix_exp(
        torch.tensor([[0, -0.4, 0.1], [0.4, 0, -0.7], [-0.1, 0.7, 0]])
    )
    T = np.eye(4)
    T[:3, :3] = 0.3 * rotation.double().numpy()
    T[:3, 3] = (5.0, -1.0, 2.0)
    moved = transform_dataset(ds, T)
    assert moved.extent == pytest.approx(0.3 * ds.extent)
    assert moved.train_ids == ds.train_ids and moved.test_ids == ds.test_ids
    lift = torch.from_numpy(T).float()
    torch.testing.assert_close(moved.points, ds.points @ lift[:3, :3].T + lift[:3, 3])
    torch.testing.assert_close(moved.center, ds.center @ lift[:3, :3].T + lift[:3, 3])
    for before, after in zip(ds.views, moved.views, strict=True):
        # the same image: a point and its image under T project to the same pixel, at s x depth
        p = torch.tensor([0.2, -0.1, 0.3, 1.0])
        seen = before.viewmat @ p
        seen_after = after.viewmat @ (lift @ p)
        torch.testing.assert_close(seen_after[:3], 0.3 * seen[:3], atol=1e-5, rtol=1e-5)
        assert torch.equal(after.K, before.K) and after.image_path == before.image_path
    with pytest.raises(ValueError, match="rotation times a uniform scale"):
        transform_dataset(ds, np.diag([1.0, 2.0, 1.0, 1.0]))


def test_training_is_equivariant_to_the_scale_and_position_of_the_world(tmp_path: Path) -> None:
    # Every length the trainer uses is in scene extents or pixels: a run in a world scaled
    # by 0.2 and moved follows the same losses and densification, step by step.
    ds = load_dataset(make_synthetic_scene(tmp_path, num_views=4, size=16), test_every=4)
    T = np.diag([0.2, 0.2, 0.2, 1.0])
    T[:3, 3] = (3.0, -2.0, 1.0)
    moved = transform_dataset(ds, T)
    config = dict(device="cpu", backend="reference", sh_degree=1, sh_degree_interval=5, steps=14)

    def run(data):
        torch.manual_seed(0)
        strategy = DefaultStrategy(
            refine_start_iter=3, refine_every=5, reset_every=11, opacity_reset=True
        )
        trainer = Trainer(data, TrainConfig(**config), strategy=strategy)
        return [trainer.step() for _ in range(14)], trainer

    steps, trainer = run(ds)
    steps_moved, trainer_moved = run(moved)
    # densification and an opacity reset happened within the run
    assert any("split" in s.events for s in steps) and any("reset" in s.events for s in steps)
    for a, b in zip(steps, steps_moved, strict=True):
        assert a.events == b.events and a.num_gaussians == b.num_gaussians
        assert b.loss == pytest.approx(
            a.loss, rel=1e-3
        )  # a world of the wrong extent misses by 10-30%
    means = trainer.model.splats["means"].detach()
    expected = means * 0.2 + torch.tensor([3.0, -2.0, 1.0])
    torch.testing.assert_close(
        trainer_moved.model.splats["means"].detach(), expected, atol=2e-3, rtol=0
    )


def test_normalize_world_returns_the_dataset_in_the_canonical_frame(tmp_path: Path) -> None:
    ds = load_dataset(make_synthetic_scene(tmp_path, num_views=8, size=16), test_every=4)
    canonical, T = normalize_world(ds)
    viewmats = np.stack([v.viewmat.double().numpy() for v in ds.views])
    np.testing.assert_allclose(T, world_alignment(viewmats, ds.points.double().numpy()))
    cov = np.cov(canonical.points.double().numpy(), rowvar=False)
    assert cov[0, 0] >= cov[1, 1] >= cov[2, 2]
    assert abs(cov[0, 1]) < 1e-4 * cov[0, 0] and abs(cov[1, 2]) < 1e-4 * cov[0, 0]
