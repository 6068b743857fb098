"""The CUDA backend: autograd functions over the ``csrc/`` rasterizer.

The ops are :mod:`gsnb.kernels`' (the module ``%gs_build`` / ``gsnb build`` built);
:func:`is_available` loads a cached build for this environment without compiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gsnb import kernels
from gsnb.raster.projection import Projection
from gsnb.raster.validate import DeferredCheck


def is_available() -> bool:
    """True when a CUDA device is visible and a built rasterizer is loaded (or loadable).

    Example:
        >>> import torch
        >>> is_available() <= torch.cuda.is_available()
        True
    """
    return torch.cuda.is_available() and kernels.extension() is not None


@dataclass(frozen=True)
class _Frame:
    """What projection and rasterization need besides tensors; the backward passes read it again."""

    width: int
    height: int
    near_plane: float
    far_plane: float
    sh_degree: int  # -1: the colours are RGB
    with_depth: bool
    stored: bool  # log-scales and opacity logits
    antialiased: bool = False  # opacities times the compensation, per camera
    check_values: bool = False  # the projection flags bad input values (no host sync)

    @property
    def stored_opacities(self) -> bool:
        """Whether the rasterizer reads opacity logits: the antialiased mode hands it the
        compensated opacities ``[C, N]``, already activated."""
        return self.stored and not self.antialiased


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
        frame: _Frame,
        checked_backgrounds: Tensor | None,
    ) -> tuple[Tensor, ...]:
        outs = kernels.project_forward(
            means=means, quats=quats, scales=scales, opacities=opacities, coeffs=coeffs,
            rest=rest, viewmats=viewmats, Ks=Ks, width=frame.width, height=frame.height,
            near_plane=frame.near_plane, far_plane=frame.far_plane, sh_degree=frame.sh_degree,
            with_depth=frame.with_depth, stored=frame.stored, antialiased=frame.antialiased,
            backgrounds=checked_backgrounds, check_values=frame.check_values, filter3d=None,
        )  # fmt: skip
        means2d, conics, depths, radii, feats, tiles, opacities_cam, problems = outs
        # The conics are not kept: the backward recomputes them (12 bytes a splat less at the
        # peak of a forward+backward, where the parameters' gradients are allocated).
        ctx.save_for_backward(
            means, quats, scales, opacities if frame.antialiased else None, coeffs, rest,
            viewmats, Ks, radii,
        )  # fmt: skip
        ctx.frame = frame
        ctx.mark_non_differentiable(radii, tiles, problems)
        # Unused outputs get no zero-filled gradient buffers (the kernels read them as zero).
        ctx.set_materialize_grads(False)
        return means2d, conics, depths, radii, feats, tiles, opacities_cam, problems

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: Any, v_means2d, v_conics, v_depths, _v_radii, v_feats, _v_tiles, v_opac, _v_problems
    ):
        means, quats, scales, opacities, coeffs, rest, viewmats, Ks, radii = ctx.saved_tensors
        frame: _Frame = ctx.frame
        channels = 4 if frame.with_depth else 3
        aa = frame.antialiased
        v_means, v_quats, v_scales, v_coeffs, v_rest, v_opacities = kernels.project_backward(
            means=means, quats=quats, scales=scales,
            opacities=opacities if aa else _grad(None, None, radii), coeffs=coeffs, rest=rest,
            viewmats=viewmats, Ks=Ks, width=frame.width, height=frame.height,
            near_plane=frame.near_plane, far_plane=frame.far_plane, sh_degree=frame.sh_degree,
            radii=radii,
            v_means2d=_grad(v_means2d, (*radii.shape[:2], 2), radii),
            v_conics=_grad(v_conics, (*radii.shape[:2], 3), radii),
            v_feats=_grad(v_feats, (*radii.shape[:2], channels), radii),
            v_depths=_grad(v_depths, None, radii),
            v_opacities_cam=_grad(v_opac, radii.shape[:2] if aa else None, radii),
            stored=frame.stored, antialiased=aa, filter3d=None,
        )  # fmt: skip
        needs = ctx.needs_input_grad
        return (
            v_means if needs[0] else None,
            v_quats if needs[1] else None,
            v_scales if needs[2] else None,
            v_opacities if aa and needs[3] else None,
            v_coeffs if needs[4] else None,
            v_rest if needs[5] else None,
            None,
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
        frame: _Frame,
        absgrad_sink: Tensor | None,
        backgrounds: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        rgb, depth, alpha, last_ids, seg_starts, states = kernels.rasterize_forward(
            means2d=means2d, conics=conics, feats=feats, opacities=opacities, offsets=offsets,
            flat_ids=flat_ids, width=frame.width, height=frame.height, backgrounds=backgrounds,
            stored=frame.stored_opacities,
        )  # fmt: skip
        # The backgrounds (no gradient) are saved too, so an in-place change before the
        # backward pass is caught.
        ctx.save_for_backward(
            means2d, conics, feats, opacities, offsets, flat_ids, alpha, depth, last_ids,
            seg_starts, states, backgrounds,
        )  # fmt: skip
        ctx.frame = frame
        ctx.absgrad_sink = absgrad_sink
        ctx.set_materialize_grads(False)
        return rgb, depth, alpha

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v_rgb: Tensor, v_depth: Tensor, v_alpha: Tensor):  # type: ignore[override]
        (
            means2d, conics, feats, opacities, offsets, flat_ids, alpha, depth, last_ids,
            seg_starts, states, bg,
        ) = ctx.saved_tensors  # fmt: skip
        frame: _Frame = ctx.frame
        sink = ctx.absgrad_sink
        grads = kernels.rasterize_backward(
            means2d=means2d, conics=conics, feats=feats, opacities=opacities, offsets=offsets,
            flat_ids=flat_ids, width=frame.width, height=frame.height, alpha=alpha, depth=depth,
            last_ids=last_ids, seg_starts=seg_starts, states=states,
            v_rgb=_grad(v_rgb, (*alpha.shape[:3], 3), alpha), v_depth=_grad(v_depth, None, alpha),
            v_alpha=_grad(v_alpha, None, alpha),
            absgrad=sink is not None, backgrounds=bg, stored=frame.stored_opacities,
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
    antialiased: bool = False,
    value_check: DeferredCheck | None = None,
    checked_backgrounds: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Projection]:
    """Render with the CUDA kernels; arguments are validated by :func:`gsnb.render`.

    ``backgrounds`` (``[3]`` or ``[C, 3]``, no gradient) are composited inside
    the rasterizer: ``rgb = blend + (1 - alpha) * background``. ``stored``: the
    scales are log-scales and the opacities logits (:func:`gsnb.render_splats`);
    ``rest`` ``[N, K-1, 3]``: the SH coefficients after ``colors`` ``[N, 1, 3]``.
    ``antialiased``: gsplat's ``rasterize_mode="antialiased"`` (the projection hands the
    rasterizer each splat's compensated opacity ``[C, N]``).

    With ``value_check`` the projection kernel checks the values it reads (and
    ``checked_backgrounds`` ``[3]`` or ``[C, 3]``, composited elsewhere, or ``backgrounds``)
    and its flag goes to ``value_check.start`` before binning, whose wait for the GPU then
    makes the flag's host copy known (:meth:`DeferredCheck.poll`) with no sync of its own.
    The rasterizer needs no checks: it reads the projection's outputs, the opacities and
    the backgrounds, all checked there.
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
    frame = _Frame(
        width=width,
        height=height,
        near_plane=float(near_plane),
        far_plane=float(far_plane),
        sh_degree=-1 if degree is None else degree,
        with_depth=with_depth,
        stored=stored,
        antialiased=antialiased,
        check_values=value_check is not None,
    )
    bg = None if backgrounds is None else backgrounds.expand(num_cams, 3).contiguous()
    checked = bg
    if value_check is not None and checked_backgrounds is not None:
        checked = checked_backgrounds.detach().expand(num_cams, 3).contiguous()
    means2d, conics, depths, radii, feats, tiles, opacities_cam, problems = _Project.apply(
        means, quats, scales, opacities, coeffs, rest, viewmats, Ks, frame,
        checked if value_check is not None else None,
    )  # fmt: skip
    if value_check is not None:
        value_check.start(problems)
    if antialiased:
        opacities = opacities_cam  # [C, N], activated: the rasterizer reads no logits
    if means2d.requires_grad:
        means2d.retain_grad()
    offsets, flat_ids = kernels.bin_splats(
        means2d=means2d.detach(), conics=conics.detach(), opacities=opacities.detach(),
        depths=depths.detach(), radii=radii, tiles=tiles, width=width, height=height,
        stored=frame.stored_opacities,
    )  # fmt: skip
    sink = None
    if absgrad:
        sink = torch.zeros((num_cams, means.shape[0], 2), device=means.device)
        means2d.absgrad = sink  # type: ignore[attr-defined]
    rgb, depth, alpha = _Rasterize.apply(
        means2d, conics, feats, opacities, offsets, flat_ids, frame, sink, bg
    )
    return rgb, alpha, depth if with_depth else None, Projection(means2d, conics, depths, radii)
