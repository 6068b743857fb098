"""Adam over the Gaussians with 3DGS's per-parameter learning rates and the means' decay."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from gsnb.train.config import TrainConfig

LR_KNOBS = {
    "means": "lr_means",
    "quats": "lr_quats",
    "scales": "lr_scales",
    "opacities": "lr_opacities",
    "sh0": "lr_sh0",
    "shN": "lr_shN",
}
"""Parameter name -> the :class:`TrainConfig` field holding its learning rate."""

ADAM_EPS = 1e-15
"""Adam's epsilon, tiny as in the 3DGS code, since scales and SH gradients are small."""


def learning_rates(config: TrainConfig, step: int, extent: float) -> dict[str, float]:
    """Learning rate of each parameter at ``step`` (0-based).

    The means' rate is ``lr_means * extent`` at step 0 and decays
    exponentially to ``lr_means_final`` times that at ``config.steps``, then
    stays there; the others are constant.

    Example:
        >>> from gsnb.train.config import TrainConfig
        >>> cfg = TrainConfig(steps=100)
        >>> lr = learning_rates(cfg, 100, extent=2.0)["means"]
        >>> round(lr / (1.6e-4 * 2.0), 6)
        0.01
    """
    progress = min(step, config.steps) / config.steps
    rates = {name: float(getattr(config, knob)) for name, knob in LR_KNOBS.items()}
    rates["means"] = config.lr_means * extent * config.lr_means_final**progress
    return rates


def make_optimizer(
    splats: Mapping[str, nn.Parameter], rates: Mapping[str, float]
) -> torch.optim.Adam:
    """One Adam with a parameter group per splat tensor, each group ``name``-d after its key.

    Fused (one kernel per group) when the parameters live on the GPU.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> opt = make_optimizer({"means": nn.Parameter(torch.zeros(2, 3))}, {"means": 0.1})
        >>> opt.param_groups[0]["name"], opt.param_groups[0]["lr"]
        ('means', 0.1)
    """
    groups = [{"params": [p], "lr": rates[name], "name": name} for name, p in splats.items()]
    # On the GPU the fused kernel updates a group in one launch instead of about ten.
    fused = bool(splats) and all(p.is_cuda for p in splats.values())
    return torch.optim.Adam(groups, eps=ADAM_EPS, fused=fused or None)


def set_learning_rates(optimizer: torch.optim.Optimizer, rates: Mapping[str, float]) -> None:
    """Write ``rates`` into the optimizer's named groups."""
    for group in optimizer.param_groups:
        group["lr"] = rates[group["name"]]
