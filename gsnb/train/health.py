"""Numerical health of a training run: signals measured every step and warnings when they go bad."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from gsnb import kernels


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
"""Names of the signals :func:`health_signals` returns."""


SUMS = 9
"""Length of :func:`health_sums`' tensor."""

FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def health_sums(
    splats: Mapping[str, Tensor],
    grads: Sequence[Tensor] = (),
    tail: Sequence[Tensor] = (),
    host: Tensor | None = None,
) -> Tensor:
    """The sums behind the health signals and the gradient norm, one float64 tensor ``[9]``,
    then the values of ``tail`` (a step's other numbers, read back with the sums).

    In order: the number of NaN/Inf values in all parameters; the largest
    log-scale of any Gaussian; the sum and the sum of squares of each
    Gaussian's largest log-scale, shifted by the first Gaussian's; the sum and
    the maximum of log(largest / smallest scale); the sum of the opacities;
    the sum of squares of all ``grads`` and their number of NaN/Inf values.
    Read them back with the step's other metrics and finish them on the host
    with :func:`signals_from_sums`. On the GPU, with the extension built, one
    fused pass (``csrc/health.cu``) computes them and copies the ``tail`` (up to
    four float32 or int64 tensors of at most 64 values) after them; elsewhere
    PyTorch does. ``host`` (a float64 CPU tensor of the result's length, pinned for the
    copy not to wait) receives a copy too, queued on the current stream: the values are
    there once the stream has passed this point (an event recorded after the call).

    Example:
        >>> import torch
        >>> s = {"scales": torch.zeros(4, 3), "opacities": torch.zeros(4)}
        >>> health_sums(s, [torch.full((4,), 0.5)]).tolist()
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 1.0, 0.0]
        >>> health_sums(s, tail=[torch.tensor([0.25]), torch.tensor([7])]).tolist()[9:]
        [0.25, 7.0]
        >>> copy = torch.empty(SUMS, dtype=torch.float64)
        >>> bool(health_sums(s, host=copy).equal(copy))
        True
    """
    log_s, logits = splats["scales"], splats["opacities"]
    params, grads, tail = list(splats.values()), list(grads), list(tail)
    if log_s.shape[0] > 0 and _fused(params, grads, tail):  # the kernel only reads them
        return kernels.health_sums(
            scales=log_s, opacities=logits, params=params, grads=grads, tail=tail, host=host
        )
    with torch.no_grad():
        sums = _torch_sums(log_s, logits, params, grads)
        out = torch.cat([sums, *(t.reshape(-1).to(sums) for t in tail)])
        if host is not None:
            if host.dtype != torch.float64 or host.shape != out.shape or host.is_cuda:
                raise ValueError(
                    f"host must be a float64 CPU tensor of {out.numel()} values, got "
                    f"{host.dtype} {list(host.shape)} on {host.device}"
                )
            host.copy_(out, non_blocking=True)
        return out


def _torch_sums(log_s: Tensor, logits: Tensor, params: list[Tensor], grads: list[Tensor]) -> Tensor:
    """:func:`health_sums` in PyTorch."""
    zero = torch.zeros((), dtype=torch.float64, device=log_s.device)
    counts = [_non_finite(params, zero)]
    gradient = [sum((g.double().square().sum() for g in grads), zero), _non_finite(grads, zero)]
    if log_s.shape[0] == 0:  # no Gaussian statistics; the gradients still count
        return torch.stack([*counts, *[zero + math.nan] * 6, *gradient])
    top = log_s.amax(-1)
    ratio = top - log_s.amin(-1)
    first = top[0].double()
    shifted = top.double() - torch.where(torch.isfinite(first), first, 0.0)
    scales = [top.max().double(), shifted.sum(), (shifted * shifted).sum()]
    ratios = [ratio.double().sum(), ratio.max().double()]
    opacity = [torch.sigmoid(logits.double()).sum()]
    return torch.stack([*counts, *scales, *ratios, *opacity, *gradient])


def gate_open(gate: Tensor) -> Tensor:
    """Whether a step keeps its updates, on the device (bool ``[]``): ``gate`` is float64
    ``[3]``, the gradients' sum of squares, their count of non-finite values and the loss
    (``sums[7:9]`` of :func:`health_sums` and the loss), read as ``grads_finite`` of
    :func:`signals_from_sums` and a finite loss; the rule of the kernels' gate
    (``csrc/gate.cuh``).

    Example:
        >>> import torch
        >>> gate_open(torch.tensor([4.0, 0.0, 0.5], dtype=torch.float64)).item()
        True
        >>> gate_open(torch.tensor([4.0, 0.0, float("nan")], dtype=torch.float64)).item()
        False
    """
    return (gate[0] <= FLOAT32_MAX) & (gate[1] == 0) & torch.isfinite(gate[2])


def _non_finite(tensors: list[Tensor], zero: Tensor) -> Tensor:
    """The number of NaN/Inf values in ``tensors``, as a float64 scalar like ``zero``."""
    return sum(((~torch.isfinite(t)).sum().double() for t in tensors), zero)


def _fused(params: list[Tensor], grads: list[Tensor], tail: list[Tensor]) -> bool:
    """Whether ``csrc/health.cu`` takes these tensors (it reads at most 8 of each kind, and
    a tail of at most 4 small contiguous float32 or int64 tensors on their device)."""
    if len(params) > 8 or len(grads) > 8 or len(tail) > 4:
        return False
    if not kernels.applies("health_sums", *params, *grads):
        return False
    device = params[0].device
    return all(
        t.dtype in (torch.float32, torch.int64)
        and t.device == device
        and t.is_contiguous()
        and t.numel() <= 64
        for t in tail
    )


def signals_from_sums(sums: Sequence[float], count: int, extent: float) -> dict[str, float]:
    """The health signals (:data:`HEALTH_SIGNALS`) and the gradient's, from :func:`health_sums`.

    - ``scale_max``: the largest scale of any Gaussian, in scene extents;
    - ``scale_spread``: standard deviation of each Gaussian's largest log-scale;
    - ``anisotropy``: geometric mean over Gaussians of largest / smallest scale;
    - ``anisotropy_max``: the largest such ratio;
    - ``mean_opacity``: mean opacity in [0, 1];
    - ``params_finite``: 1 when every parameter is finite, else 0;
    - ``grad_norm``: the L2 norm of all gradients (NaN when one is not finite);
    - ``grads_finite``: 1 when every gradient is finite and their squared norm fits
      float32, else 0.

    A NaN scale or opacity makes the signals it enters NaN.

    Args:
        sums: the values of :func:`health_sums`.
        count: the number of Gaussians.
        extent: the scene extent.

    Example:
        >>> signals_from_sums([0, 0.0, 0, 0, 0, 0.0, 2.0, 9.0, 0], count=4, extent=2.0)["grad_norm"]
        3.0
    """
    bad, top_max, top_sum, top_sq, ratio_sum, ratio_max, opacity_sum, grad_sq, bad_grads = sums
    # A norm past float32's range counts as non-finite too: Adam squares gradients in float32.
    grads = {
        "grad_norm": math.sqrt(grad_sq) if bad_grads == 0 else math.nan,
        "grads_finite": float(bad_grads == 0 and grad_sq <= FLOAT32_MAX),
    }
    if count == 0:
        nan = dict.fromkeys(HEALTH_SIGNALS[:-1], math.nan)
        return nan | {"params_finite": float(bad == 0)} | grads
    var = max(top_sq - top_sum * top_sum / count, 0.0) / (count - 1) if count > 1 else 0.0
    # A NaN scale makes its sums NaN; the maxima follow them (whichever way they were taken).
    return {
        "scale_max": math.nan if math.isnan(top_sum) else _exp(top_max) / extent,
        "scale_spread": math.sqrt(var),
        "anisotropy": _exp(ratio_sum / count),
        "anisotropy_max": math.nan if math.isnan(ratio_sum) else _exp(ratio_max),
        "mean_opacity": opacity_sum / count,
        "params_finite": float(bad == 0),
    } | grads


def _exp(x: float) -> float:
    return math.inf if x > 709.0 else math.exp(x)


def health_signals(splats: Mapping[str, Tensor], extent: float) -> dict[str, float]:
    """The health signals of the Gaussians now (one host sync); see :func:`signals_from_sums`.

    Example:
        >>> import torch
        >>> s = {"scales": torch.zeros(4, 3), "opacities": torch.zeros(4)}
        >>> signals = health_signals(s, extent=2.0)
        >>> signals["scale_max"], signals["mean_opacity"], signals["params_finite"]
        (0.5, 0.5, 1.0)
    """
    signals = signals_from_sums(health_sums(splats).tolist(), splats["scales"].shape[0], extent)
    return {name: signals[name] for name in HEALTH_SIGNALS}


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
