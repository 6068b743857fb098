"""``MCMCStrategy``: 3D Gaussian Splatting as Markov Chain Monte Carlo (Kheradmand et al. 2024)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gsnb.train import regularizers
from gsnb.train.knobs import knob
from gsnb.train.strategy import ops
from gsnb.train.strategy.base import Strategy


@dataclass
class MCMCStrategy(Strategy):
    """Relocate dead Gaussians, grow to a cap, explore with noise (3DGS-MCMC); gsplat's defaults.

    Every ``refine_every`` steps between ``refine_start_iter`` and
    ``refine_stop_iter``, Gaussians with opacity at most ``min_opacity`` are
    moved onto live ones drawn in proportion to opacity (the copies share the
    source's opacity and scale so the picture does not change), then the count
    grows by ``grow_rate`` up to ``cap_max``. Every step the means get noise
    shaped by their covariance, scaled by the means' learning rate times
    ``noise_lr``, mostly where opacity is low. The loss gains
    ``opacity_reg * mean(opacity) + scale_reg * mean(scale)``.

    Attributes:
        cap_max: the largest number of Gaussians (default 1000000, gsplat).
        noise_lr: factor from the means' learning rate to the noise scale
            (default 5e5, 3DGS-MCMC).
        refine_start_iter: first step that relocates and grows (default 500).
        refine_stop_iter: no relocation or growth from this step on (default 25000).
        refine_every: relocate and grow every this many steps (default 100).
        min_opacity: Gaussians at or below this opacity count as dead (default 0.005).
        grow_rate: fraction by which the count grows at each refine step (default 0.05).
        opacity_reg: weight of the mean-opacity regulariser (default 0.01, 3DGS-MCMC).
        scale_reg: weight of the mean-scale regulariser (default 0.01, 3DGS-MCMC).

    Example:
        >>> from gsnb.train.strategy import MCMCStrategy
        >>> MCMCStrategy(cap_max=50_000).initialize_state(scene_scale=1.0)
        {'scene_scale': 1.0}
    """

    ORDERED: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("refine_start_iter", "<=", "refine_stop_iter"),
    )
    name: ClassVar[str] = "mcmc"
    init_opacity: ClassVar[float] = 0.5
    init_scale: ClassVar[float] = 0.1

    cap_max: int = knob(1_000_000, low=1)
    noise_lr: float = knob(5e5, low=0.0, high=1e9, log=True)
    refine_start_iter: int = knob(500, low=0)
    refine_stop_iter: int = knob(25_000, low=0)
    refine_every: int = knob(100, low=1)
    min_opacity: float = knob(0.005, low=0.0, high=1.0, log=True)
    grow_rate: float = knob(0.05, low=0.0, high=10.0)
    opacity_reg: float = knob(0.01, low=0.0, high=10.0)
    scale_reg: float = knob(0.01, low=0.0, high=10.0)

    def step_post_backward(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer,
        state: dict[str, Any],
        step: int,
        info: dict[str, Any],
        lr_means: float,
        generator: torch.Generator | None = None,
    ) -> dict[str, int]:
        """Relocate and grow at refine steps; add noise to the means every step."""
        counts = {"relocated": 0, "added": 0}
        if self.refine_start_iter < step < self.refine_stop_iter and step % self.refine_every == 0:
            counts["relocated"] = self.relocate(params, optimizer, generator)
            counts["added"] = self.grow(params, optimizer, generator)
        ops.inject_noise(params, lr_means * self.noise_lr, generator)
        return counts

    def densifies_at(self, step: int) -> bool:
        """Whether ``step`` relocates and adds Gaussians (the noise comes every step).

        Example:
            >>> from gsnb.train.strategy import MCMCStrategy
            >>> [MCMCStrategy().densifies_at(s) for s in (500, 600, 650)]
            [False, True, False]
        """
        start, stop = self.refine_start_iter, self.refine_stop_iter
        return start < step < stop and step % self.refine_every == 0

    @torch.no_grad()
    def relocate(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer | None,
        generator: torch.Generator | None = None,
    ) -> int:
        """Move every dead Gaussian onto a live one; returns how many moved."""
        dead = torch.sigmoid(params["opacities"]) <= self.min_opacity
        return ops.relocate(params, optimizer, {}, dead, self.min_opacity, generator)

    @torch.no_grad()
    def grow(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer | None,
        generator: torch.Generator | None = None,
    ) -> int:
        """Add ``grow_rate`` more Gaussians, never beyond ``cap_max``; returns how many."""
        n = params["means"].shape[0]
        target = min(self.cap_max, int((1.0 + self.grow_rate) * n))
        return ops.sample_add(
            params, optimizer, {}, max(0, target - n), self.min_opacity, generator
        )

    def regularization(self, params: MutableMapping[str, nn.Parameter]) -> Tensor | None:
        """``opacity_reg * mean(opacity) + scale_reg * mean(scale)``."""
        terms = []
        if self.opacity_reg > 0:
            terms.append(self.opacity_reg * regularizers.opacity_l1(params["opacities"]))
        if self.scale_reg > 0:
            terms.append(self.scale_reg * regularizers.scale_l1(params["scales"]))
        return sum(terms) if terms else None  # type: ignore[return-value]
