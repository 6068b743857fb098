"""Tiny scenes for trainer tests: photos rendered from known Gaussians, written as PNG files."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image

import gsnb
from gsnb.cameras import intrinsics, look_at
from gsnb.data.dataset import SceneDataset, View

FOX = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "fox"


def build_scene(
    root: Path,
    *,
    size: int = 16,
    views: int = 4,
    gaussians: int = 40,
    points: int = 30,
    test_every: int = 0,
    seed: int = 0,
) -> SceneDataset:
    """Photos of ``gaussians`` random blobs seen by a ring of cameras, plus noisy points."""
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(gaussians, 3, generator=g) - 0.5) * 1.2
    quats = torch.randn(gaussians, 4, generator=g)
    scales = 0.08 + 0.12 * torch.rand(gaussians, 3, generator=g)
    opac = 0.6 + 0.4 * torch.rand(gaussians, generator=g)
    rgb = torch.rand(gaussians, 3, generator=g)
    K = intrinsics(size, size, 58.0, axis="x")
    root.mkdir(parents=True, exist_ok=True)
    view_list = []
    for i in range(views):
        angle = 2 * math.pi * i / views
        eye = torch.tensor([3.0 * math.cos(angle), 3.0 * math.sin(angle), 1.0])
        viewmat = look_at(eye, torch.zeros(3), up=torch.tensor([0.0, 0.0, 1.0]))
        out = gsnb.render(means, quats, scales, opac, rgb, viewmat[None], K[None], size, size)
        pixels = (out.rgb[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        path = root / f"{i:03d}.png"
        Image.fromarray(pixels).save(path)
        view_list.append(View(path.name, path, size, size, K.clone(), viewmat))
    pick = torch.randint(0, gaussians, (points,), generator=g)
    init = means[pick] + 0.05 * torch.randn(points, 3, generator=g)
    test_ids = [i for i in range(views) if test_every and i % test_every == 0]
    centers = torch.stack([v.camera_center for v in view_list])
    center = centers.mean(0)
    return SceneDataset(
        root=root,
        views=view_list,
        train_ids=[i for i in range(views) if i not in test_ids],
        test_ids=test_ids,
        points=init,
        points_rgb=torch.rand(points, 3, generator=g),
        center=center,
        extent=1.1 * float((centers - center).norm(dim=1).max()),
    )


@pytest.fixture
def make_scene(tmp_path: Path) -> Callable[..., SceneDataset]:
    """``make_scene(**options)`` builds a tiny scene under a fresh temporary folder."""
    counter = iter(range(1000))
    return lambda **options: build_scene(tmp_path / f"scene{next(counter)}", **options)


@pytest.fixture
def fox_path() -> Path:
    if not (FOX / "images").is_dir():
        pytest.skip(f"the fox dataset is not at {FOX.resolve()}")
    return FOX


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny images train faster on one thread than on two fighting over small tensors."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
