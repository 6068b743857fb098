"""benchmarks/quality_run.py trains a recipe on the CPU and prints its one result line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gsnb.data.synthetic import make_synthetic_scene

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "quality_run.py"


def test_a_recipe_run_prints_its_result(tmp_path: Path, monkeypatch) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    monkeypatch.setenv("GSNB_RUN_DEVICE", "cpu")
    monkeypatch.setenv("GSNB_RUN_BACKEND", "reference")
    monkeypatch.setenv("GSNB_RUN_RENDERS", str(tmp_path / "renders"))
    argv = ["revised", "3", "2", str(scene), "1", "default", '{"revised_opacity": true}',
            '{"rasterize_mode": "antialiased"}']  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    row = json.loads(line.removeprefix("RESULT "))
    assert row["name"] == "revised" and row["seed"] == 3 and row["steps"] == 2
    assert row["n"] > 0 and 0 < row["psnr"] < 100
    views = row["views"]  # each test view's PSNR, whose mean is the run's
    assert views and sum(views.values()) / len(views) == pytest.approx(row["psnr"], abs=2e-3)
    # two steps train at SH degree 0 still: rendered with degree 0 alone, each view reads alike
    assert row["views_dc"] == pytest.approx(views, abs=2e-3)
    # GSNB_RUN_RENDERS: each test view as photo | render | error x4, whose halves agree with
    # its PSNR (8-bit rounding aside)
    from PIL import Image

    for view, psnr in views.items():
        row_image = np.asarray(
            Image.open(tmp_path / "renders" / "revised_3" / f"{Path(view).stem}.png")
        )
        assert row_image.shape == (16, 48, 3)
        photo, render = row_image[:, :16] / 255.0, row_image[:, 16:32] / 255.0
        mse = float(np.mean((photo - render) ** 2))
        assert 10 * np.log10(1 / mse) == pytest.approx(psnr, abs=0.3)
        error = np.abs(photo - render) * 4
        assert np.allclose(row_image[:, 32:] / 255.0, np.clip(error, 0, 1), atol=5 / 255)


def test_a_run_that_evaluates_while_training_gives_its_trace(tmp_path: Path, monkeypatch) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    monkeypatch.setenv("GSNB_RUN_DEVICE", "cpu")
    monkeypatch.setenv("GSNB_RUN_BACKEND", "reference")
    argv = ["traced", "0", "4", str(scene), "1", "default", "{}", '{"eval_every": 2}']
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    row = json.loads(line.removeprefix("RESULT "))
    assert [step for step, _, _ in row["trace"]] == [2, 4]
    for _, mean, views in row["trace"]:
        assert set(views) == set(row["views"])
        assert sum(views.values()) / len(views) == pytest.approx(mean, abs=2e-3)
    # the evaluation at the last step is of the model the run ends with
    assert row["trace"][-1][2] == pytest.approx(row["views"], abs=1e-3)
    assert row["trace"][0][2] != row["trace"][-1][2]


@pytest.mark.parametrize("exposure", [False, True])  # True: measured on right halves
def test_dc_views_render_without_the_higher_sh_bands(tmp_path: Path, exposure: bool) -> None:
    import torch

    sys.path.insert(0, str(SCRIPT.parent))
    import quality_run

    from gsnb.data.dataset import load_dataset
    from gsnb.train import TrainConfig, Trainer

    scene = make_synthetic_scene(tmp_path / "scene", num_views=8, size=16, num_points=100)
    config = TrainConfig(
        data=str(scene), steps=3, sh_degree_interval=1, device="cpu", backend="reference",
        exposure=exposure,
    )  # fmt: skip
    trainer = Trainer(load_dataset(scene), config)
    trainer.run(progress=False)  # past every SH degree's turn: evaluation renders all bands
    assert trainer.sh_degree_now == 3
    assert trainer.evaluate().protocol == ("right halves" if exposure else "full images")
    splats = trainer.model.splats
    with torch.no_grad():
        splats["shN"].zero_()
    plain = {name: value for name, value, _ in trainer.evaluate().per_view}
    assert quality_run.dc_views(trainer) == pytest.approx(plain, abs=2e-3)
    with torch.no_grad():  # strong view-dependent colour: the full render moves, degree 0 not
        splats["shN"].copy_(torch.randn_like(splats["shN"]))
    shifted = {name: value for name, value, _ in trainer.evaluate().per_view}
    assert all(abs(shifted[n] - plain[n]) > 0.5 for n in plain)
    assert quality_run.dc_views(trainer) == pytest.approx(plain, abs=2e-3)
