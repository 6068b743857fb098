"""Numerical health of a training run: signals measured every step and warnings when they go bad."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor


class TrainingHealthWarning(UserWarning):
    """Warned when training goes numerically bad (NaN loss, exploding scales, ...)."""


HEALTH_SIGNALS = (
    "scale_max",
    "scale_spread",
    "anisotropy",
    "anisotropy_max",
    "mean_opacity",
    "params_finite",
)
"""Names of the signals :func:`health_signals` returns, in order."""


@torch.no_grad()
def health_signals(splats: Mapping[str, Tensor], extent: float) -> Tensor:
    """The health signals of the Gaussians as one device tensor (read back with the step's metrics).

    In the order of :data:`HEALTH_SIGNALS`:

    - ``scale_max``: the largest scale of any Gaussian, in scene extents;
    - ``scale_spread``: standard deviation of each Gaussian's largest log-scale;
    - ``anisotropy``: geometric mean over Gaussians of largest / smallest scale;
    - ``anisotropy_max``: the largest such ratio;
    - ``mean_opacity``: mean opacity in [0, 1];
    - ``params_finite``: 1 when every parameter is finite, else 0 (also when their
      norm overflows float32, which only happens to a model already broken).

    Example:
        >>> import torch
        >>> s = {"scales": torch.zeros(4, 3), "opacities": torch.zeros(4)}
        >>> health_signals(s, extent=2.0).tolist()
        [0.5, 0.0, 1.0, 1.0, 0.5, 1.0]
    """
    log_s = splats["scales"]
    top = log_s.amax(-1)
    log_ratio = top - log_s.amin(-1)
    # The norm over all parameters is finite exactly when every value is (barring overflow).
    finite = torch.isfinite(torch.nn.utils.get_total_norm(list(splats.values())))
    spread = top.std() if top.numel() > 1 else top.new_zeros(())
    return torch.stack(
        [
            torch.exp(top.max()) / extent,
            spread,
            torch.exp(log_ratio.mean()),
            torch.exp(log_ratio.max()),
            torch.sigmoid(splats["opacities"]).mean(),
            finite.to(log_s.dtype),
        ]
    )


class HealthMonitor:
    """Turns each step's metrics into warnings, once per problem until it clears.

    Each warning is returned (for the metrics stream) and raised as a
    :class:`TrainingHealthWarning` through :mod:`warnings`.

    Example:
        >>> import warnings
        >>> m = HealthMonitor()
        >>> with warnings.catch_warnings(record=True):
        ...     found = m.check(7, {"loss": float("nan")}, warn_scale=10.0, skipping=True)
        >>> found[0].split(";")[0]
        'step 7: the loss is NaN or Inf'
    """

    def __init__(self) -> None:
        self._active: set[str] = set()

    def check(
        self, step: int, values: Mapping[str, float], warn_scale: float, skipping: bool
    ) -> list[str]:
        """Warnings for one step's ``values`` (``loss``, ``grads_finite``, the health signals)."""
        skipped = "the step was skipped" if skipping else "the model may now hold NaN"
        problems: dict[str, str] = {}
        if not math.isfinite(values.get("loss", 0.0)):
            problems["loss"] = (
                f"step {step}: the loss is NaN or Inf; {skipped} "
                "(lower the learning rates or check the images)"
            )
        elif values.get("grads_finite", 1.0) < 0.5:
            problems["grads"] = (
                f"step {step}: a gradient is NaN or Inf (or overflows); {skipped} "
                "(lower the learning rates, or set scale_grad_clip)"
            )
        if values.get("params_finite", 1.0) < 0.5:
            problems["params"] = (
                f"step {step}: the model holds NaN or Inf values; resume from the last "
                "checkpoint with lower learning rates"
            )
        scale_max = values.get("scale_max", 0.0)
        if warn_scale > 0 and math.isfinite(scale_max) and scale_max > warn_scale:
            problems["scales"] = (
                f"step {step}: the largest Gaussian spans {scale_max:.3g} scene extents "
                f"(warn_scale={warn_scale:g}); scales are exploding: lower lr_scales, or set "
                "big_scale_reg or scale_grad_clip"
            )
        new = [msg for kind, msg in problems.items() if kind not in self._active]
        self._active = set(problems)
        for msg in new:
            warnings.warn(msg, TrainingHealthWarning, stacklevel=3)
        return new
