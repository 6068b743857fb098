"""A ``GaussianModel`` as the arrays viser's Gaussian splat renderer draws in the browser."""

from __future__ import annotations

import numpy as np
import torch

from gsnb.model import GaussianModel
from gsnb.raster.sh import sh0_to_rgb


def splat_arrays(model: GaussianModel) -> dict[str, np.ndarray]:
    """Centres ``[N, 3]``, covariances ``[N, 3, 3]``, colours ``[N, 3]`` and opacities ``[N, 1]``.

    The covariance is ``R S S^T R^T`` (``S = diag(exp(scales))``, ``R`` from the
    normalised ``wxyz`` quaternion); the colour is the view-independent
    degree-0 part of the SH, ``max(C0 * sh0 + 0.5, 0)``, clipped to [0, 1]
    (the browser's splat renderer has no SH).

    Example:
        >>> m = GaussianModel.from_points(torch.zeros(1, 3), torch.full((1, 3), 0.25), sh_degree=0)
        >>> a = splat_arrays(m)
        >>> a["rgbs"].round(3).tolist(), a["covariances"].shape
        ([[0.25, 0.25, 0.25]], (1, 3, 3))
    """
    with torch.no_grad():
        s = {k: v.detach().float().cpu() for k, v in model.splats.items()}
        q = torch.nn.functional.normalize(s["quats"], dim=-1)
        w, x, y, z = q.unbind(-1)
        rot = torch.stack(
            [
                1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
            ],
            dim=-1,
        ).reshape(-1, 3, 3)  # fmt: skip
        m = rot * torch.exp(s["scales"])[:, None, :]
        cov = m @ m.transpose(1, 2)
        rgb = sh0_to_rgb(s["sh0"][:, 0, :]).clamp(0.0, 1.0)
        opacity = torch.sigmoid(s["opacities"])[:, None]
    return {
        "centers": s["means"].numpy(),
        "covariances": cov.numpy(),
        "rgbs": rgb.numpy(),
        "opacities": opacity.numpy(),
    }
