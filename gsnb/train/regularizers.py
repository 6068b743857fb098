"""Regularisers on the Gaussians' parameters (raw ``model.splats`` tensors).

Each returns a scalar to add to the loss with a weight; :func:`regularization`
adds up those a run's settings switch on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from gsnb.train.config import TrainConfig


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


def regularization(
    splats: Mapping[str, Tensor], config: TrainConfig, extent: float, extra: Tensor | None = None
) -> Tensor | None:
    """The weighted regularisers ``config`` switches on, added to ``extra`` (a strategy's own).

    ``config.aniso_reg`` weighs :func:`anisotropy` and ``config.big_scale_reg``
    :func:`big_scale`; None when no term is on.

    Example:
        >>> import torch
        >>> from gsnb.train.config import TrainConfig
        >>> splats = {"scales": torch.log(torch.tensor([[20.0, 1.0, 1.0]]))}
        >>> regularization(splats, TrainConfig(), 1.0) is None
        True
        >>> regularization(splats, TrainConfig(aniso_reg=0.1, aniso_max_ratio=10.0), 1.0).item()
        1.0
    """
    terms = [] if extra is None else [extra]
    if config.aniso_reg > 0:
        terms.append(config.aniso_reg * anisotropy(splats["scales"], config.aniso_max_ratio))
    if config.big_scale_reg > 0:
        term = big_scale(splats["scales"], extent, config.big_scale_limit)
        terms.append(config.big_scale_reg * term)
    return sum(terms) if terms else None  # type: ignore[return-value]
