"""What training reads from its dataset: first Gaussians, images and cameras, view order."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import View
from gsnb.train.inputs import ViewImages, ViewOrder, initial_model, step_background, view_camera


def test_every_epoch_is_a_permutation_and_the_seed_fixes_the_order() -> None:
    order = ViewOrder(5, seed=3)
    epochs = [[order.next() for _ in range(5)] for _ in range(4)]
    assert all(sorted(e) == list(range(5)) for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1  # reshuffled each epoch
    again = ViewOrder(5, seed=3)
    assert [again.next() for _ in range(20)] == [i for e in epochs for i in e]


def test_initial_model_subsamples_with_the_generator() -> None:
    points, colors = torch.rand(40, 3), torch.rand(40, 3)

    def pick(seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        model = initial_model(points, colors, sh_degree=2, init_opacity=0.3, init_scale=1.0,
                              max_points=10, generator=g)  # fmt: skip
        return model.splats["means"].detach()

    a, b, c = pick(0), pick(0), pick(1)
    assert a.shape == (10, 3) and torch.equal(a, b) and not torch.equal(a, c)
    rows = [int((points == row).all(-1).nonzero()) for row in a]
    assert rows == sorted(rows)  # the points keep their order
    whole = initial_model(points, colors, sh_degree=0, init_opacity=0.3, init_scale=1.0)
    assert whole.num_gaussians == 40
    assert torch.sigmoid(whole.splats["opacities"]).allclose(torch.tensor(0.3))


def test_random_initial_rotations_come_from_the_generator_and_change_no_render() -> None:
    from gsnb.raster import render_splats

    points, colors = torch.rand(30, 3) + torch.tensor([0.0, 0.0, 3.0]), torch.rand(30, 3)

    def make(rotation: str, seed: int):
        g = torch.Generator().manual_seed(seed)
        return initial_model(points, colors, sh_degree=0, init_opacity=0.5, init_scale=1.0,
                             rotation=rotation, generator=g)  # fmt: skip

    identity, a, b, c = make("identity", 0), make("random", 0), make("random", 0), make("random", 1)
    assert torch.equal(identity.splats["quats"], torch.tensor([[1.0, 0, 0, 0]]).repeat(30, 1))
    qa = a.splats["quats"].detach()
    assert torch.equal(qa, b.splats["quats"]) and not torch.equal(qa, c.splats["quats"])
    assert bool((qa >= 0).all() and (qa < 1).all()) and qa.norm(dim=-1).std() > 0  # unnormalised
    for key in ("means", "scales", "opacities", "sh0"):
        assert torch.equal(identity.splats[key], a.splats[key])
    # round Gaussians: the first render does not depend on their rotation
    K = torch.tensor([[[40.0, 0, 16], [0, 40.0, 12], [0, 0, 1]]])
    images = [
        render_splats(m.splats, torch.eye(4)[None], K, 32, 24, backend="reference").rgb
        for m in (identity, a)
    ]
    assert images[0].amax() > 0.1 and torch.allclose(images[0], images[1], atol=1e-5)
    with pytest.raises(ValueError, match="rotation"):
        make("spin", 0)


def test_images_and_cameras_of_views(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (10, 6), (255, 0, 0)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 4), (0, 0, 255)).save(tmp_path / "b.png")
    K = torch.tensor([[10.0, 0, 5], [0, 10, 3], [0, 0, 1]])
    views = [
        View("a.png", tmp_path / "a.png", 10, 6, K, torch.eye(4)),
        View("b.png", tmp_path / "b.png", 8, 4, K, torch.eye(4)),
    ]
    loaded = ViewImages(views, torch.device("cpu"))
    assert len(loaded) == 2 and loaded.max_size == (10, 6)
    # Stored as bytes; the float32 copy of one step's image counts too.
    assert loaded.nbytes == (10 * 6 + 8 * 4) * 3 + 10 * 6 * 3 * 4
    assert all(image.dtype == torch.uint8 for image in loaded.stored)
    assert loaded.images[1].shape == (4, 8, 3) and loaded.images[1][0, 0].tolist() == [0, 0, 1]
    viewmat, K1 = loaded.cameras[0]
    assert viewmat.shape == (1, 4, 4) and torch.equal(K1[0], K)
    bad = View("c.png", tmp_path / "a.png", 10, 6, torch.full((3, 3), math.nan), torch.eye(4))
    with pytest.raises(ValueError, match=r"view c\.png has a non-finite pose or intrinsics"):
        view_camera(bad, torch.device("cpu"))


def test_random_backgrounds_come_from_the_generator() -> None:
    black = torch.zeros(3)
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    first = step_background(black, True, g1)
    assert torch.equal(first, step_background(black, True, g2))
    assert not torch.equal(first, step_background(black, True, g1))
    assert ((first >= 0) & (first < 1)).all()


def test_view_order_peeks_without_moving_on() -> None:
    order = ViewOrder(3, seed=5)
    order.next()
    ahead = order.peek(7)  # past two epoch boundaries
    state = order.state()
    assert ahead == [order.next() for _ in range(7)]
    order.load_state(state)
    assert order.peek(7) == ahead


def test_host_images_give_the_device_images_values(tmp_path: Path) -> None:
    from gsnb.data.dataset import load_dataset
    from gsnb.data.synthetic import make_synthetic_scene

    data = load_dataset(make_synthetic_scene(tmp_path, num_views=5, size=12), test_every=0)
    on_device = ViewImages(data.views, torch.device("cpu"), images_on="gpu", workers=1)
    on_host = ViewImages(data.views, torch.device("cpu"), images_on="cpu", workers=3)
    assert on_host.host_nbytes == 5 * 12 * 12 * 3 and on_device.host_nbytes == 0
    for idx, upcoming in [(0, [3, 1]), (3, [1, 4]), (1, [4, 1]), (4, [])]:
        image = on_host.image(idx, upcoming)
        assert torch.equal(image, on_device.image(idx))
        assert torch.equal(image, data.views[idx].load_image())
        for images in (on_host, on_device):  # the bytes the floats come from
            photo = images.image_bytes(idx, upcoming)
            assert photo.dtype == torch.uint8 and torch.equal(photo, data.views[idx].load_bytes())
    with pytest.raises(ValueError, match="images_on must be 'gpu' or 'cpu'"):
        ViewImages(data.views, torch.device("cpu"), images_on="auto")
