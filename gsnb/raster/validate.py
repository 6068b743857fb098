"""Argument checks for :func:`gsnb.render`.

Each error names the argument, its shape and the expected one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gsnb.raster.sh import sh_degree_from_bases


def _describe(t: Tensor) -> str:
    return f"shape {list(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_tensor(name: str, t: object, shape: tuple[int | str, ...], expected: str) -> Tensor:
    """Check type and shape; ``-1`` in ``shape`` matches any size."""
    if not isinstance(t, Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor of shape {expected}, got {type(t).__name__}"
        )
    if t.dim() != len(shape) or any(
        s != -1 and s != d for s, d in zip(shape, t.shape, strict=True)
    ):
        raise ValueError(f"{name} has {_describe(t)}; expected shape {expected}")
    return t


def validate_inputs(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    sh_degree: int | None,
    backgrounds: Tensor | None,
    near_plane: float,
    far_plane: float,
    check_values: bool,
    *,
    rest: Tensor | None = None,
    stored: bool = False,
) -> int | None:
    """Validate :func:`gsnb.render` inputs; returns the SH degree to use (None for RGB).

    With ``stored`` the inputs are stored parameters (:func:`gsnb.render_splats`):
    ``colors`` is ``sh0 [N, 1, 3]``, ``rest`` is ``shN [N, K-1, 3]``, and scales and
    opacities are log-scales and logits (any finite value).
    """
    check_tensor("means", means, (-1, 3), "[N, 3]")
    n = means.shape[0]
    check_tensor("quats", quats, (n, 4), f"[N, 4] with N = {n}")
    check_tensor("scales", scales, (n, 3), f"[N, 3] with N = {n}")
    check_tensor("opacities", opacities, (n,), f"[N] with N = {n}")
    if stored:
        check_tensor("sh0", colors, (n, 1, 3), f"[N, 1, 3] with N = {n}")
        rest = check_tensor("shN", rest, (n, -1, 3), f"[N, K-1, 3] with N = {n}")
    elif rest is not None:
        raise ValueError("rest (shN) is taken with stored parameters only")
    elif not isinstance(colors, Tensor) or colors.dim() not in (2, 3):
        got = _describe(colors) if isinstance(colors, Tensor) else type(colors).__name__
        raise ValueError(f"colors has {got}; expected RGB [N, 3] or SH coefficients [N, K, 3]")
    if colors.shape[0] != n or colors.shape[-1] != 3:
        raise ValueError(
            f"colors has {_describe(colors)}; expected RGB [N, 3] or SH [N, K, 3] with N = {n}"
        )
    check_tensor("viewmats", viewmats, (-1, 4, 4), "[C, 4, 4] (world-to-camera)")
    c = viewmats.shape[0]
    if c == 0:
        raise ValueError("viewmats has shape [0, 4, 4]; at least one camera is needed")
    check_tensor("Ks", Ks, (c, 3, 3), f"[C, 3, 3] with C = {c}")
    if backgrounds is not None and (
        not isinstance(backgrounds, Tensor) or tuple(backgrounds.shape) not in ((3,), (c, 3))
    ):
        got = _describe(backgrounds) if isinstance(backgrounds, Tensor) else type(backgrounds)
        raise ValueError(f"backgrounds has {got}; expected [3] or [C, 3] with C = {c}")
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not hasattr(type(value), "__index__") or int(value) <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (0 <= near_plane < far_plane):
        raise ValueError(f"need 0 <= near_plane < far_plane, got {near_plane} and {far_plane}")

    tensors = {"means": means, "quats": quats, "scales": scales, "opacities": opacities}
    if stored:
        tensors |= {"sh0": colors, "shN": rest}
    else:
        tensors["colors"] = colors
    tensors |= {"viewmats": viewmats, "Ks": Ks}
    if backgrounds is not None:
        tensors["backgrounds"] = backgrounds
    for name, t in tensors.items():
        if t.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{name} has {_describe(t)}; expected float32 or float64")
        if t.dtype != means.dtype:
            raise ValueError(f"{name} has {_describe(t)}; expected dtype {means.dtype} like means")
        if t.device != means.device:
            raise ValueError(
                f"{name} has {_describe(t)}; expected device {means.device} like means"
            )

    degree = None
    if colors.dim() == 3:
        k = colors.shape[1] + (rest.shape[1] if stored else 0)
        full = sh_degree_from_bases(k) if k in (1, 4, 9, 16) else None
        if full is None:
            what = f"shN has {_describe(rest)}" if stored else f"colors has {_describe(colors)}"
            raise ValueError(
                f"{what}; K = {k} coefficients is not (degree+1)^2 for a degree 0..3 "
                "(1, 4, 9 or 16)"
            )
        degree = full if sh_degree is None else sh_degree
        if not 0 <= degree <= full:
            raise ValueError(
                f"sh_degree={sh_degree} needs {(degree + 1) ** 2} coefficients, "
                f"{'sh0 and shN hold' if stored else 'colors holds'} {k} (degree {full})"
            )
    elif sh_degree is not None:
        raise ValueError(
            f"sh_degree={sh_degree} given but colors {list(colors.shape)} is RGB [N, 3]"
        )

    if check_values:
        _check_values(tensors, opacities, scales, Ks, stored=stored)
    return degree


def _check_values(
    tensors: dict[str, Tensor], opacities: Tensor, scales: Tensor, Ks: Tensor, stored: bool
) -> None:
    # One device-to-host sync for all checks; details are worked out only on failure.
    # Stored log-scales and logits may take any finite value.
    flags = [torch.isfinite(t).all() for t in tensors.values()]
    if not stored:
        flags += [(opacities >= 0).all() & (opacities <= 1).all(), (scales >= 0).all()]
    flags += [(Ks[:, 0, 0] > 0).all() & (Ks[:, 1, 1] > 0).all()]
    if bool(torch.stack(flags).all()):
        return
    for name, t in tensors.items():
        bad = ~torch.isfinite(t)
        if bad.any():
            rows = bad.reshape(t.shape[0], -1).any(-1).sum().item() if t.dim() else 1
            raise ValueError(
                f"{name} ({_describe(t)}) has non-finite values (NaN or Inf) in {rows} rows"
            )
    if not stored and not bool(((opacities >= 0) & (opacities <= 1)).all()):
        raise ValueError(
            f"opacities ({_describe(opacities)}) must lie in [0, 1] "
            f"(min {opacities.min().item():.3g}, max {opacities.max().item():.3g}); "
            "apply a sigmoid to logits first"
        )
    if not stored and not bool((scales >= 0).all()):
        raise ValueError(
            f"scales ({_describe(scales)}) must be >= 0 (linear scales; exponentiate log-scales "
            f"first); min {scales.min().item():.3g}"
        )
    raise ValueError(f"Ks ({_describe(Ks)}) must have positive focal lengths fx, fy")
