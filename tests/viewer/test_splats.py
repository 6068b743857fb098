"""Tests for gsnb/viewer/splats.py against an independent covariance and colour computation."""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from gsnb.model import GaussianModel
from gsnb.raster.sh import C0
from gsnb.viewer.splats import splat_arrays


def test_splat_arrays_match_rotation_scale_and_sh0():
    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(
        torch.randn(30, 3, generator=g), torch.rand(30, 3, generator=g)
    )
    with torch.no_grad():
        model.splats["quats"].copy_(torch.randn(30, 4, generator=g) * 3)
        model.splats["scales"].copy_(torch.randn(30, 3, generator=g))
        model.splats["sh0"].copy_(torch.randn(30, 1, 3, generator=g))
    a = splat_arrays(model)
    s = {k: v.detach().double().numpy() for k, v in model.splats.items()}
    rot = Rotation.from_quat(np.roll(s["quats"], -1, axis=1)).as_matrix()  # wxyz -> xyzw
    expected = (
        rot @ np.apply_along_axis(np.diag, 1, np.exp(2 * s["scales"])) @ rot.transpose(0, 2, 1)
    )
    assert np.allclose(a["covariances"], expected, rtol=1e-4, atol=1e-6)
    assert np.all(np.linalg.eigvalsh(a["covariances"].astype(np.float64)) > 0)
    assert np.allclose(a["rgbs"], np.clip(s["sh0"][:, 0] * C0 + 0.5, 0, 1), atol=1e-6)
    assert np.allclose(a["opacities"][:, 0], 1 / (1 + np.exp(-s["opacities"])), atol=1e-6)
    assert np.array_equal(a["centers"], s["means"].astype(np.float32))
    assert {k: v.shape for k, v in a.items()} == {
        "centers": (30, 3),
        "covariances": (30, 3, 3),
        "rgbs": (30, 3),
        "opacities": (30, 1),
    }
