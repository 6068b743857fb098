"""GaussianModel: initialisation from points, parameter layout, checkpoints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gsnb.model import GaussianModel, knn_distances
from gsnb.raster.sh import sh0_to_rgb


def test_from_points_uses_knn_scales_and_inria_layout() -> None:
    # a unit grid: every point's 3 nearest neighbours lie at distance 1
    grid = torch.stack(torch.meshgrid(*[torch.arange(4.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    rgb = torch.rand(len(grid), 3)
    model = GaussianModel.from_points(grid, rgb, sh_degree=2, init_opacity=0.3, init_scale=0.5)
    s = model.splats
    shapes = {k: tuple(v.shape) for k, v in s.items()}
    assert shapes == {
        "means": (64, 3), "quats": (64, 4), "scales": (64, 3), "opacities": (64,),
        "sh0": (64, 1, 3), "shN": (64, 8, 3),
    }  # fmt: skip
    assert torch.allclose(s["scales"], torch.full((64, 3), math.log(0.5)))
    assert torch.allclose(torch.sigmoid(s["opacities"]), torch.full((64,), 0.3))
    assert torch.equal(s["quats"], torch.tensor([[1.0, 0, 0, 0]]).expand(64, 4))
    assert torch.allclose(sh0_to_rgb(s["sh0"][:, 0]), rgb, atol=1e-6)
    assert bool((s["shN"] == 0).all())
    assert model.sh_degree == 2


def test_knn_distances_is_the_rms_of_the_nearest() -> None:
    pts = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [0.0, 2.0, 0], [10.0, 10, 10]])
    d = knn_distances(pts, k=2)
    assert d[0].item() == pytest.approx(math.sqrt((1 + 4) / 2))
    assert knn_distances(pts[:1], k=3).tolist() == [1.0]


def test_activated_ranges() -> None:
    model = GaussianModel.from_points(torch.randn(20, 3), torch.rand(20, 3), sh_degree=1)
    a = model.activated()
    assert bool((a["scales"] > 0).all())
    assert bool(((a["opacities"] > 0) & (a["opacities"] < 1)).all())
    assert tuple(a["colors"].shape) == (20, 4, 3)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (torch.zeros(0, 3), "non-empty"),
        (torch.zeros(5, 2), "expected a non-empty"),
        (torch.tensor([[0.0, math.nan, 0.0]]), "NaN or Inf"),
    ],
)
def test_from_points_rejects_bad_points(points: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GaussianModel.from_points(points, torch.zeros_like(points))


def test_save_load_roundtrip(tmp_path: Path) -> None:
    model = GaussianModel.from_points(torch.randn(7, 3), torch.rand(7, 3), sh_degree=3)
    model.save(tmp_path / "m.pt")
    back = GaussianModel.load(tmp_path / "m.pt")
    for key, value in model.splats.items():
        assert torch.equal(back.splats[key], value)
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no temporary file left


def test_load_gives_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        GaussianModel.load(tmp_path / "missing.pt")
    model = GaussianModel.from_points(torch.randn(7, 3), torch.rand(7, 3))
    model.save(tmp_path / "m.pt")
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        GaussianModel.load(tmp_path / "cut.pt")
    torch.save({"format": "something-else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="format tag 'something-else'"):
        GaussianModel.load(tmp_path / "other.pt")
    partial = {"format": "gsnb-model-1", "splats": {"means": torch.zeros(1, 3)}}
    torch.save(partial, tmp_path / "p.pt")
    with pytest.raises(ValueError, match="no complete set"):
        GaussianModel.load(tmp_path / "p.pt")


def test_init_rejects_misshapen_tensors() -> None:
    model = GaussianModel.from_points(torch.randn(3, 3), torch.rand(3, 3))
    splats = {k: v.detach() for k, v in model.splats.items()}
    with pytest.raises(ValueError, match="scales has shape"):
        GaussianModel(splats | {"scales": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match="missing"):
        GaussianModel({"means": torch.zeros(3, 3)})


def test_the_background_is_saved_and_read_back(tmp_path) -> None:
    model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3))
    model.background = (1.0, 1.0, 1.0)
    model.save(tmp_path / "m.pt")
    assert GaussianModel.load(tmp_path / "m.pt").background == (1.0, 1.0, 1.0)
    old = {"format": "gsnb-model-1", "splats": {k: v.detach() for k, v in model.splats.items()}}
    torch.save(old, tmp_path / "old.pt")  # written before checkpoints recorded it
    assert GaussianModel.load(tmp_path / "old.pt").background == (0.0, 0.0, 0.0)
    torch.save({**old, "background": [2.0, 0, 0]}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="bad background"):
        GaussianModel.load(tmp_path / "bad.pt")


def test_splat_dict_reads_its_parameters_without_module_getattr(monkeypatch) -> None:
    splats = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3)).splats

    def refuse(self, name):
        raise AssertionError(f"nn.Module.__getattr__({name!r})")

    monkeypatch.setattr(torch.nn.Module, "__getattr__", refuse)
    assert splats["means"].shape == (5, 3)
    assert [p.shape[0] for p in splats.values()] == [5] * 6
    plain = torch.nn.ParameterDict.__getitem__
    with pytest.raises(AssertionError, match="__getattr__"):
        plain(splats, "means")  # the path a ParameterDict takes


def test_splat_dict_looks_up_as_a_parameter_dict() -> None:
    model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3), sh_degree=1)
    splats = model.splats
    assert isinstance(splats, torch.nn.ParameterDict)
    assert all(splats[k] is getattr(splats, k) for k in splats)
    assert list(splats.values()) == [p for _, p in model.named_parameters()]
    new = torch.nn.Parameter(torch.zeros(7, 3))
    splats["means"] = new  # as densification swaps a tensor
    assert splats["means"] is new and dict(splats.items())["means"] is new
    del splats["means"]
    with pytest.raises((KeyError, AttributeError)):
        splats["means"]
    with pytest.raises(TypeError, match="not a string"):
        splats[0]


def test_load_refuses_a_tensor_that_repeats_its_stored_elements(tmp_path: Path) -> None:
    # a file of a few kilobytes describing 10M Gaussians: cloning it would take 1.5 GB
    model = GaussianModel.from_points(torch.randn(3, 3), torch.rand(3, 3))
    splats = {k: v.detach() for k, v in model.splats.items()}
    splats["means"] = torch.zeros(1).expand(10_000_000, 3)
    torch.save({"format": "gsnb-model-1", "splats": splats}, tmp_path / "crafted.pt")
    with pytest.raises(ValueError, match=r"malformed: the tensor at \['splats'\]\['means'\]"):
        GaussianModel.load(tmp_path / "crafted.pt")
