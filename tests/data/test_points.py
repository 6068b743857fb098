"""Initial points: checks, PLY round trip and malformed PLY, random points in the view frustums."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gsnb.data.dataset import load_dataset
from gsnb.data.points import check_points, random_frustum_points, read_ply_points, write_ply_points


def test_ply_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pts, rgb = rng.normal(size=(50, 3)), rng.uniform(size=(50, 3))
    write_ply_points(tmp_path / "p.ply", pts, rgb)
    got, got_rgb = read_ply_points(tmp_path / "p.ply")
    np.testing.assert_allclose(got, pts, atol=1e-6)
    np.testing.assert_allclose(got_rgb, rgb, atol=0.5 / 255 + 1e-9)


def test_malformed_ply_vertex_count_is_refused(tmp_path: Path) -> None:
    write_ply_points(tmp_path / "p.ply", np.zeros((4, 3)), np.zeros((4, 3)))
    data = (
        (tmp_path / "p.ply")
        .read_bytes()
        .replace(b"element vertex 4", b"element vertex 999999999999")
    )
    (tmp_path / "bad.ply").write_bytes(data)
    with pytest.raises(ValueError, match=r"PLY file is malformed"):
        read_ply_points(tmp_path / "bad.ply")
    (tmp_path / "junk.ply").write_bytes(b"ply\nformat nonsense\n")
    with pytest.raises(ValueError, match=r"PLY file is malformed"):
        read_ply_points(tmp_path / "junk.ply")


def test_check_points_errors() -> None:
    with pytest.raises(ValueError, match=r"is empty"):
        check_points(np.zeros((0, 3)), None, "x")
    with pytest.raises(ValueError, match=r"2 of 3 points of x hold NaN or Inf"):
        check_points(np.array([[0, 0, 0], [np.nan, 0, 0], [0, np.inf, 0]]), None, "x")
    with pytest.raises(ValueError, match=r"shape \(3, 2\)"):
        check_points(np.zeros((3, 2)), None, "x")
    with pytest.raises(ValueError, match=r"colours of x hold NaN"):
        check_points(np.zeros((1, 3)), np.full((1, 3), np.nan), "x")


def test_random_points_lie_in_the_views(synthetic: Path, tmp_path: Path) -> None:
    ds = load_dataset(synthetic, cache_dir=tmp_path)
    pts, rgb = random_frustum_points(ds.views, ds.center.numpy(), ds.extent, 2000, seed=1)
    again, _ = random_frustum_points(ds.views, ds.center.numpy(), ds.extent, 2000, seed=1)
    np.testing.assert_array_equal(pts, again)
    assert pts.shape == rgb.shape == (2000, 3) and ((rgb >= 0) & (rgb <= 1)).all()
    seen = np.zeros(len(pts), bool)
    for view in ds.views:
        cam = pts @ view.viewmat[:3, :3].double().numpy().T + view.viewmat[:3, 3].double().numpy()
        pix = cam @ view.K.double().numpy().T
        with np.errstate(divide="ignore", invalid="ignore"):
            u, v = pix[:, 0] / pix[:, 2], pix[:, 1] / pix[:, 2]
        seen |= (cam[:, 2] > 0) & (u >= 0) & (u <= view.width) & (v >= 0) & (v <= view.height)
    assert seen.all()
    # they cover the scene around the centre, not only the space next to the cameras
    dist = np.linalg.norm(pts - ds.center.numpy(), axis=1)
    assert np.median(dist) < ds.extent
