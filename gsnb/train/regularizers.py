"""Regularisers on the Gaussians' parameters (raw ``model.splats`` tensors).

Each returns a scalar to add to the loss with a weight.
"""

from __future__ import annotations

import torch
from torch import Tensor


def opacity_l1(opacity_logits: Tensor) -> Tensor:
    """Mean opacity, ``mean(sigmoid(logits))`` (3DGS-MCMC, Kheradmand et al. 2024).

    Example:
        >>> import torch
        >>> opacity_l1(torch.zeros(4)).item()
        0.5
    """
    return torch.sigmoid(opacity_logits).mean()


def scale_l1(log_scales: Tensor) -> Tensor:
    """Mean scale, ``mean(exp(log_scales))`` over ``[N, 3]`` (3DGS-MCMC).

    Example:
        >>> import torch
        >>> scale_l1(torch.zeros(2, 3)).item()
        1.0
    """
    return torch.exp(log_scales).mean()


def anisotropy(log_scales: Tensor, max_ratio: float) -> Tensor:
    """``mean(max(s_max / s_min, r) - r)`` of ``[N, 3]`` log-scales (PhysGaussian, Xie et al. 2024).

    Zero while no Gaussian is more than ``max_ratio`` times longer than wide.

    Example:
        >>> import math, torch
        >>> s = torch.log(torch.tensor([[1.0, 1.0, 1.0], [20.0, 1.0, 1.0]]))
        >>> anisotropy(s, 10.0).item()
        5.0
    """
    ratio = torch.exp(log_scales.amax(-1) - log_scales.amin(-1))
    return (ratio.clamp_min(max_ratio) - max_ratio).mean()


def big_scale(log_scales: Tensor, extent: float, limit: float) -> Tensor:
    """``mean(relu(s_max / extent - limit))``: penalises Gaussians larger than ``limit`` extents.

    Example:
        >>> import math, torch
        >>> s = torch.log(torch.tensor([[0.5, 0.1, 0.1], [0.05, 0.05, 0.05]]))
        >>> round(big_scale(s, extent=1.0, limit=0.1).item(), 3)
        0.2
    """
    return torch.relu(torch.exp(log_scales.amax(-1)) / extent - limit).mean()
