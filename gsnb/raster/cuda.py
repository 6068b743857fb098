"""The CUDA backend: autograd functions over the ``csrc/`` rasterizer.

The compiled module comes from :mod:`gsnb.toolchain` (``%gs_build`` / ``gsnb build``);
:func:`is_available` loads a cached build for this environment without compiling.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gsnb.raster.projection import Projection

_lock = threading.RLock()
_ext: ModuleType | None = None
_looked = False


def set_extension(module: ModuleType | None) -> None:
    """Use ``module`` (a built ``csrc/`` extension) for ``backend="cuda"``; ``None`` forgets it."""
    global _ext, _looked
    with _lock:
        _ext = module
        _looked = module is not None


def get_extension() -> ModuleType | None:
    """The extension in use, loading a cached build on first call; ``None`` if there is none."""
    global _ext, _looked
    with _lock:
        if _ext is None and not _looked:
            _looked = True
            try:
                from gsnb.toolchain import load_cached
            except ImportError:
                return None
            _ext = load_cached()
        return _ext


def is_available() -> bool:
    """True when a CUDA device is visible and a built rasterizer is loaded (or loadable)."""
    return torch.cuda.is_available() and get_extension() is not None


def kernel(name: str) -> Any:
    """The built extension's function ``name``, or ``None`` when there is no such build.

    Example:
        >>> ssim = kernel("ssim_forward")  # None until the extension is built
    """
    ext = get_extension()
    return getattr(ext, name, None) if ext is not None else None


def _require() -> ModuleType:
    ext = get_extension()
    if ext is None:
        raise RuntimeError(
            "the CUDA rasterizer is not built for this environment; run %gs_build in a notebook "
            "or `gsnb build` in a terminal"
        )
    return ext


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        means: Tensor,
        quats: Tensor,
        scales: Tensor,
        opacities: Tensor,
        coeffs: Tensor,
        rest: Tensor | None,
        viewmats: Tensor,
        Ks: Tensor,
        settings: tuple[int, int, float, float, int, bool, bool],
    ) -> tuple[Tensor, ...]:
        width, height, near, far, degree, with_depth, stored = settings
        means2d, conics, depths, radii, feats, tiles = _require().project_forward(
            means, quats, scales, opacities, coeffs, rest, viewmats, Ks, width, height, near, far,
            degree, with_depth, stored,
        )  # fmt: skip
        ctx.save_for_backward(means, quats, scales, coeffs, rest, viewmats, Ks, radii, conics)
        ctx.settings = settings
        ctx.mark_non_differentiable(radii, tiles)
        # Unused outputs get no zero-filled gradient buffers (the kernels read them as zero).
        ctx.set_materialize_grads(False)
        return means2d, conics, depths, radii, feats, tiles

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v_means2d, v_conics, v_depths, _v_radii, v_feats, _v_tiles):  # type: ignore[override]
        means, quats, scales, coeffs, rest, viewmats, Ks, radii, conics = ctx.saved_tensors
        width, height, near, far, degree, with_depth, stored = ctx.settings
        channels = 4 if with_depth else 3
        v_means, v_quats, v_scales, v_coeffs, v_rest = _require().project_backward(
            means, quats, scales, coeffs, rest, viewmats, Ks, width, height, near, far, degree,
            radii, conics, _grad(v_means2d, (*radii.shape[:2], 2), radii),
            _grad(v_conics, (*radii.shape[:2], 3), radii),
            _grad(v_feats, (*radii.shape[:2], channels), radii), _grad(v_depths, None, radii),
            stored,
        )  # fmt: skip
        needs = ctx.needs_input_grad
        return (
            v_means if needs[0] else None,
            v_quats if needs[1] else None,
            v_scales if needs[2] else None,
            None,
            v_coeffs if needs[4] else None,
            v_rest if needs[5] else None,
            None,
            None,
            None,
        )


class _Rasterize(torch.autograd.Function):
    """Blend sorted splats: rgb, expected depth (empty without a depth channel) and alpha."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        means2d: Tensor,
        conics: Tensor,
        feats: Tensor,
        opacities: Tensor,
        offsets: Tensor,
        flat_ids: Tensor,
        settings: tuple[int, int, bool],
        absgrad_sink: Tensor | None,
        backgrounds: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        width, height, stored = settings
        rgb, depth, alpha, last_ids = _require().rasterize_forward(
            means2d, conics, feats, opacities, offsets, flat_ids, width, height, backgrounds,
            stored,
        )  # fmt: skip
        # The backgrounds (no gradient) are saved too, so an in-place change before the
        # backward pass is caught.
        ctx.save_for_backward(
            means2d, conics, feats, opacities, offsets, flat_ids, alpha, depth, last_ids,
            backgrounds,
        )  # fmt: skip
        ctx.settings = settings
        ctx.absgrad_sink = absgrad_sink
        ctx.set_materialize_grads(False)
        return rgb, depth, alpha

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v_rgb: Tensor, v_depth: Tensor, v_alpha: Tensor):  # type: ignore[override]
        means2d, conics, feats, opacities, offsets, flat_ids, alpha, depth, last_ids, bg = (
            ctx.saved_tensors
        )
        width, height, stored = ctx.settings
        sink = ctx.absgrad_sink
        grads = _require().rasterize_backward(
            means2d, conics, feats, opacities, offsets, flat_ids, width, height, alpha, depth,
            last_ids, _grad(v_rgb, (*alpha.shape[:3], 3), alpha), _grad(v_depth, None, alpha),
            _grad(v_alpha, None, alpha), sink is not None, bg, stored,
        )  # fmt: skip
        if sink is not None:
            sink.add_(grads[4])
        return grads[0], grads[1], grads[2], grads[3], None, None, None, None, None


def _grad(grad: Tensor | None, shape: tuple[int, ...] | None, like: Tensor) -> Tensor:
    """A contiguous gradient; a missing one becomes zeros of ``shape``, or an empty tensor
    (read as zero by the kernels) when ``shape`` is None."""
    if grad is not None:
        return grad.contiguous()
    if shape is None:
        return torch.empty(0, device=like.device, dtype=torch.float32)
    return torch.zeros(shape, device=like.device, dtype=torch.float32)


def render(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    degree: int | None,
    near_plane: float,
    far_plane: float,
    absgrad: bool,
    with_depth: bool = True,
    backgrounds: Tensor | None = None,
    *,
    rest: Tensor | None = None,
    stored: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Projection]:
    """Render with the CUDA kernels; arguments are validated by :func:`gsnb.render`.

    ``backgrounds`` (``[3]`` or ``[C, 3]``, no gradient) are composited inside
    the rasterizer: ``rgb = blend + (1 - alpha) * background``. ``stored``: the
    scales are log-scales and the opacities logits (:func:`gsnb.render_splats`);
    ``rest`` ``[N, K-1, 3]``: the SH coefficients after ``colors`` ``[N, 1, 3]``.
    """
    if backgrounds is not None and backgrounds.requires_grad:
        raise ValueError("the rasterizer composites constant backgrounds only; detach them")
    if means.dtype != torch.float32:
        raise ValueError(
            f"the CUDA backend computes in float32, got {means.dtype}; convert the inputs with "
            ".float() or use backend='reference' for float64"
        )
    num_cams = viewmats.shape[0]
    means, quats, scales, opacities = (t.contiguous() for t in (means, quats, scales, opacities))
    coeffs = colors.contiguous()
    if rest is not None:
        rest = rest.contiguous()
    viewmats, Ks = viewmats.contiguous(), Ks.contiguous()
    sh = -1 if degree is None else degree
    means2d, conics, depths, radii, feats, tiles = _Project.apply(
        means, quats, scales, opacities, coeffs, rest, viewmats, Ks,
        (width, height, float(near_plane), float(far_plane), sh, with_depth, stored),
    )  # fmt: skip
    if means2d.requires_grad:
        means2d.retain_grad()
    offsets, flat_ids = _require().bin_splats(
        means2d.detach(), conics.detach(), opacities.detach(), depths.detach(), radii, tiles,
        width, height, stored,
    )  # fmt: skip
    sink = None
    if absgrad:
        sink = torch.zeros((num_cams, means.shape[0], 2), device=means.device)
        means2d.absgrad = sink  # type: ignore[attr-defined]
    bg = None if backgrounds is None else backgrounds.expand(num_cams, 3).contiguous()
    rgb, depth, alpha = _Rasterize.apply(
        means2d, conics, feats, opacities, offsets, flat_ids, (width, height, stored), sink, bg
    )
    return rgb, alpha, depth if with_depth else None, Projection(means2d, conics, depths, radii)
