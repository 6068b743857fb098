"""load_dataset: format detection, splits, centre and extent, View conventions, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gsnb.data.dataset import SceneDataset, View, load_dataset


def test_fox_views_splits_centre_and_extent(fox: Path, tmp_path: Path) -> None:
    ds = load_dataset(fox, downscale=8, cache_dir=tmp_path)
    assert isinstance(ds, SceneDataset) and ds.root == fox
    names = [v.name for v in ds.views]
    assert names == sorted(names) and len(names) == 67
    assert ds.test_ids == [i for i in range(67) if i % 8 == 0]
    assert ds.train_ids == [i for i in range(67) if i % 8 != 0]
    assert [v.name for v in ds.test] == [names[i] for i in ds.test_ids]
    centres = torch.stack([v.camera_center for v in ds.train])
    assert torch.allclose(ds.center, centres.mean(0), atol=1e-5)
    radius = float((centres - ds.center).norm(dim=1).max())
    assert ds.extent == pytest.approx(1.1 * radius, rel=1e-5)
    for view in ds.views[:2]:
        assert view.K.dtype == view.viewmat.dtype == torch.float32
        assert tuple(view.K.shape) == (3, 3) and tuple(view.viewmat.shape) == (4, 4)
        image = view.load_image()
        assert image.dtype == torch.float32 and tuple(image.shape) == (240, 135, 3)
        assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
    assert ds.points.dtype == ds.points_rgb.dtype == torch.float32
    assert ds.background == (0.0, 0.0, 0.0)


def test_camera_centre_is_minus_rotation_transpose_translation() -> None:
    angle = 0.3
    rot = torch.tensor(
        [[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]],
        dtype=torch.float32,
    )
    centre = torch.tensor([1.0, -2.0, 3.0])
    viewmat = torch.eye(4)
    viewmat[:3, :3], viewmat[:3, 3] = rot, -rot @ centre
    view = View("a", Path("a"), 4, 4, torch.eye(3), viewmat)
    assert torch.allclose(view.camera_center, centre, atol=1e-6)


def test_view_without_pipeline_loads_the_file(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (6, 4), (255, 128, 0)).save(tmp_path / "a.png")
    k = torch.tensor([[5.0, 0, 3], [0, 5, 2], [0, 0, 1]])
    image = View("a.png", tmp_path / "a.png", 6, 4, k, torch.eye(4)).load_image()
    assert tuple(image.shape) == (4, 6, 3) and image[0, 0].tolist() == pytest.approx(
        [1.0, 128 / 255, 0.0]
    )


def test_test_every_options(synthetic: Path, tmp_path: Path) -> None:
    every3 = load_dataset(synthetic, test_every=3, cache_dir=tmp_path)
    assert every3.test_ids == [0, 3, 6] and every3.train_ids == [1, 2, 4, 5, 7]
    none = load_dataset(synthetic, test_every=0, cache_dir=tmp_path)
    assert none.test_ids == [] and none.train_ids == list(range(8)) and none.test == []
    all_test = load_dataset(synthetic, test_every=1, cache_dir=tmp_path)
    assert all_test.train == [] and all_test.extent > 0  # centre falls back to every camera


def test_downscale_changes_sizes_and_intrinsics(synthetic: Path, tmp_path: Path) -> None:
    full = load_dataset(synthetic, cache_dir=tmp_path)
    half = load_dataset(synthetic, downscale=2, cache_dir=tmp_path)
    assert (half.views[0].width, half.views[0].height) == (24, 20)
    assert torch.allclose(half.views[0].K[:2], full.views[0].K[:2] / 2)
    assert torch.equal(half.views[0].viewmat, full.views[0].viewmat)
    assert tuple(half.views[0].load_image().shape) == (20, 24, 3)
    mean_full = full.views[0].load_image().mean()
    assert float(half.views[0].load_image().mean()) == pytest.approx(float(mean_full), abs=0.01)


def test_default_cache_is_in_the_user_cache_not_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gsnb.data.synthetic import make_synthetic_scene

    root = make_synthetic_scene(tmp_path / "scene", num_views=2, size=16)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    before = sorted(root.rglob("*"))
    load_dataset(root, downscale=2).views[0].load_image()
    assert sorted(root.rglob("*")) == before
    assert len(list((tmp_path / "user-cache" / "gsnb" / "images").glob("scene-*/*.png"))) == 1


def test_read_only_dataset_trains_and_caches_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gsnb.data.synthetic import make_synthetic_scene

    root = make_synthetic_scene(tmp_path / "scene", num_views=2, size=16)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        data = load_dataset(root, downscale=2)
        first = data.views[0].load_bytes()
        again = load_dataset(root, downscale=2).views[0].load_bytes()  # a cache hit
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert torch.equal(first, again)
    assert not (root / ".gsnb-cache").exists()
    assert len(list((tmp_path / "user-cache" / "gsnb" / "images").glob("scene-*/*.png"))) == 1


def test_cache_dir_is_chosen_and_an_unwritable_one_only_warns(tmp_path: Path) -> None:
    from gsnb.data.synthetic import make_synthetic_scene

    root = make_synthetic_scene(tmp_path / "scene", num_views=2, size=16)
    load_dataset(root, downscale=2, cache_dir=tmp_path / "mine").views[0].load_image()
    assert len(list((tmp_path / "mine").glob("*.png"))) == 1
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    locked = blocker / "cache"  # unwritable even for root: its parent is a file
    with pytest.warns(ResourceWarning, match="cannot write the image cache"):
        image = load_dataset(root, downscale=2, cache_dir=locked).views[1].load_image()
    assert tuple(image.shape) == (8, 8, 3)


@pytest.mark.parametrize("downscale", [0, -1, 1.5, True])
def test_bad_downscale(synthetic: Path, downscale: object) -> None:
    with pytest.raises(ValueError, match=r"downscale must be an integer >= 1"):
        load_dataset(synthetic, downscale=downscale)  # type: ignore[arg-type]


def test_nothing_to_read(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        load_dataset(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match=r"no dataset found .*sparse/0/cameras.bin"):
        load_dataset(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"not a transforms.json"):
        load_dataset(tmp_path / "notes.txt")


def test_photos_or_a_video_without_cameras_point_to_gsnb_process(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as found:
        load_dataset(tmp_path)
    assert f"photos without cameras: `gsnb process {tmp_path / 'images'} --out SCENE`" in str(
        found.value
    )
    (tmp_path / "walk.MP4").write_bytes(b"")
    with pytest.raises(ValueError, match=r"walk.MP4 is a video, not a posed dataset: `gsnb pro"):
        load_dataset(tmp_path / "walk.MP4")
