"""The synthetic scene with a known answer: photos rendered from Gaussians at its surface points.

The ray-traced photos of :func:`gsnb.data.synthetic.make_synthetic_scene` cannot be fitted
exactly in a few CPU steps, which would hide what a correction recovers. Here the same
scene (cameras, surface points and their colours) is photographed by gsnb's reference
renderer from Gaussians at those points, so a perfect fit exists and any residual after
training belongs to the correction under test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from PIL import Image

from gsnb.data.dataset import SceneDataset, View, load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.model import GaussianModel


def known_scene(
    root: Path, views: int = 6, size: int = 24, points: int = 300
) -> tuple[SceneDataset, GaussianModel, list[torch.Tensor]]:
    """The synthetic scene's dataset (no held-out view), the Gaussians that photograph it
    and their photos ``[size, size, 3]`` (over the dataset's background)."""
    scene = make_synthetic_scene(root, num_views=views, size=size, num_points=points)
    data = load_dataset(scene, test_every=0)
    model = GaussianModel.from_points(data.points, data.points_rgb, sh_degree=0)
    with torch.no_grad():
        model.splats["opacities"].fill_(2.0)  # opaque enough to hide what lies behind
    background = torch.tensor(data.background)
    photos = []
    with torch.no_grad():
        for v in data.views:
            out = model.render(
                v.viewmat[None], v.K[None], v.width, v.height,
                backgrounds=background, backend="reference",
            )  # fmt: skip
            photos.append(out.rgb[0].clamp(0, 1))
    return data, model, photos


def with_photos(
    data: SceneDataset,
    folder: Path,
    photos: list[torch.Tensor],
    viewmats: list[torch.Tensor] | None = None,
    test_ids: list[int] | None = None,
) -> SceneDataset:
    """``data`` with its photos replaced by ``photos`` (written as 8-bit PNGs in ``folder``)
    and, when given, its cameras by ``viewmats`` and its held-out views by ``test_ids``."""
    folder.mkdir(parents=True, exist_ok=True)
    views = []
    for i, (view, photo) in enumerate(zip(data.views, photos, strict=True)):
        path = folder / f"{i:03d}.png"
        Image.fromarray((photo.clamp(0, 1) * 255).round().byte().numpy()).save(path)
        viewmat = view.viewmat if viewmats is None else viewmats[i]
        views.append(View(path.name, path, view.width, view.height, view.K, viewmat))
    test = list(test_ids or [])
    train = [i for i in range(len(views)) if i not in test]
    return dataclasses.replace(data, root=folder, views=views, train_ids=train, test_ids=test)


def starting_copy(model: GaussianModel, background: tuple[float, float, float]) -> GaussianModel:
    """A fresh copy of ``model`` to start a run from."""
    return GaussianModel({k: v.detach() for k, v in model.splats.items()}, background)
