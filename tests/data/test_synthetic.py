"""The ray-traced demo scene: deterministic, loads through load_dataset, images and points sane."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import SyntheticScene, make_synthetic_scene, ring_cameras


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_scene(tmp_path: Path) -> None:
    a = _files(make_synthetic_scene(tmp_path / "a", num_views=3, size=24, seed=5))
    b = _files(make_synthetic_scene(tmp_path / "b", num_views=3, size=24, seed=5))
    c = _files(make_synthetic_scene(tmp_path / "c", num_views=3, size=24, seed=6))
    assert a == b
    assert a.keys() == c.keys() and a["images/r_000.png"] != c["images/r_000.png"]


def test_loads_through_load_dataset(synthetic: Path, tmp_path: Path) -> None:
    ds = load_dataset(synthetic, cache_dir=tmp_path)
    assert len(ds.views) == 8 and ds.test_ids == [0] and ds.background == (1.0, 1.0, 1.0)
    assert all((v.width, v.height) == (48, 40) for v in ds.views)
    meta = json.loads((synthetic / "transforms.json").read_text())
    assert ds.points.shape == (3000, 3) and meta["ply_file_path"] == "points3D.ply"
    for view in ds.views:
        image = view.load_image()
        assert tuple(image.shape) == (40, 48, 3)
        assert float(image.std()) > 0.1  # not blank
        sky = (image > 0.995).all(dim=-1).float().mean()
        assert 0.02 < float(sky) < 0.9  # both the scene and the transparent sky are in view


def test_poses_and_points_agree_with_the_images(synthetic: Path, tmp_path: Path) -> None:
    """Surface points project onto scene pixels (not onto the white sky) in every view."""
    ds = load_dataset(synthetic, cache_dir=tmp_path)
    pts = ds.points.double().numpy()
    for view in ds.views:
        image = view.load_image().numpy()
        cam = pts @ view.viewmat[:3, :3].double().numpy().T + view.viewmat[:3, 3].double().numpy()
        pix = cam @ view.K.double().numpy().T
        u, v = (pix[:, :2] / pix[:, 2:]).T
        inside = (
            (cam[:, 2] > 0) & (u >= 1) & (u < view.width - 1) & (v >= 1) & (v < view.height - 1)
        )
        colours = image[v[inside].astype(int), u[inside].astype(int)]
        on_sky = (colours > 0.995).all(axis=1).mean()
        assert inside.sum() > 100 and on_sky < 0.02, on_sky


def test_point_colours_match_the_rendered_surface() -> None:
    """A ray shot back onto each surface point along its normal sees the point's stored colour."""
    scene = SyntheticScene.random(seed=0)
    pts, rgb = scene.surface_points(200, seed=0)
    normals = np.zeros_like(pts)
    normals[np.abs(pts[:, 2]) < 1e-12] = (0.0, 0.0, 1.0)
    for s in scene.spheres:
        on = np.abs(np.linalg.norm(pts - s.center, axis=1) - s.radius) < 1e-9
        normals[on] = (pts[on] - s.center) / s.radius
    assert (np.linalg.norm(normals, axis=1) > 0.5).all()  # every point lies on a surface
    traced, hit = scene.trace(pts + 1e-3 * normals, -normals)
    assert hit.all()
    np.testing.assert_allclose(traced, rgb, atol=1e-6)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"num_views"):
        make_synthetic_scene(tmp_path, num_views=0)
    with pytest.raises(ValueError, match=r"positive"):
        make_synthetic_scene(tmp_path, size=0)


def test_detail_adds_a_pattern_and_leaves_the_default_scene_alone(tmp_path: Path) -> None:
    plain = SyntheticScene.random(0)
    speckled = dataclasses.replace(plain, detail=0.9)
    points = np.random.default_rng(0).uniform(-2, 2, (500, 3))
    assert np.array_equal(plain.speckle(points), np.ones(500))
    factor = speckled.speckle(points)
    assert factor.min() >= 0.1 - 1e-9 and factor.max() <= 1.0 and factor.std() > 0.2
    K = np.array([[40.0, 0, 32], [0, 40.0, 24], [0, 0, 1]])
    c2w = ring_cameras(1)[0]
    a, b = plain.render(c2w, K, 64, 48, samples=1), speckled.render(c2w, K, 64, 48, samples=1)
    assert np.array_equal(a[..., 3], b[..., 3]) and not np.allclose(a[..., :3], b[..., :3])
    with pytest.raises(ValueError, match="detail"):
        make_synthetic_scene(tmp_path, num_views=1, size=8, detail=1.5)
