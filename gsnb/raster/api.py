"""``gsnb.render``: one entry point, two backends (CUDA and the PyTorch reference)."""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from gsnb.cameras import camera_centres
from gsnb.raster import reference
from gsnb.raster.constants import FAR_PLANE, NEAR_PLANE
from gsnb.raster.projection import Projection, project
from gsnb.raster.sh import eval_sh
from gsnb.raster.validate import DeferredCheck, check_values_of, validate_inputs, value_tensors

Backend = Literal["auto", "cuda", "reference"]
RasterizeMode = Literal["classic", "antialiased"]
RASTERIZE_MODES = ("classic", "antialiased")


@dataclass
class RenderMeta:
    """Per-Gaussian by-products of a render.

    Attributes:
        means2d: ``[C, N, 2]`` screen-space centres. After ``backward()``,
            ``means2d.grad`` is the screen-space gradient used by densification
            (when any input required grad).
        radii: ``[C, N, 2]`` int32 half extents in pixels of each splat's box;
            0 where the Gaussian is culled in that camera.
        depths: ``[C, N]`` view-space depth (z) of each centre.
        absgrad: ``[C, N, 2]`` sum over pixels of ``|d loss / d means2d|``
            (AbsGS), filled by ``backward()``; ``None`` unless ``render(...,
            absgrad=True)``.
        backend: ``"cuda"`` or ``"reference"``, the backend that rendered.
    """

    means2d: Tensor
    radii: Tensor
    depths: Tensor
    backend: str
    absgrad: Tensor | None = None
    _num_visible: int | None = field(default=None, repr=False)

    @property
    def visible(self) -> Tensor:
        """``[C, N]`` bool: the Gaussian's box overlaps the image of that camera."""
        return (self.radii > 0).all(-1)

    @property
    def num_visible(self) -> int:
        """Number of Gaussians visible in at least one camera."""
        if self._num_visible is None:
            self._num_visible = int(self.visible.any(0).sum().item())
        return self._num_visible


@dataclass
class RenderResult:
    """Images rendered by :func:`gsnb.render`.

    Attributes:
        rgb: ``[C, H, W, 3]`` colour, composited over the background.
        alpha: ``[C, H, W, 1]`` accumulated opacity, ``1 - final transmittance``.
        depth: ``[C, H, W, 1]`` expected depth ``sum(w_i z_i) / alpha`` (0 where alpha is 0);
            ``None`` when rendered with ``with_depth=False``.
        meta: :class:`RenderMeta`.
        problems: ``[1]`` int32 device tensor, nonzero when the CUDA projection found bad
            input values (``check_values``); ``None`` on the reference backend (checked
            before rendering) or without ``check_values``.
    """

    rgb: Tensor
    alpha: Tensor
    depth: Tensor | None
    meta: RenderMeta
    _deferred: DeferredCheck | None = field(default=None, repr=False)

    @property
    def problems(self) -> Tensor | None:
        return None if self._deferred is None else self._deferred.problems

    def check(self, problems: int | None = None) -> RenderResult:
        """Raise the ``ValueError`` of ``check_values`` now if the inputs held NaN/Inf or
        out-of-range values; returns ``self``.

        The call usually raised already, and then this does nothing. On the CUDA backend
        a flag not yet read (a render that never waited for the GPU) is read here: one
        host sync, unless ``problems``, the value of :attr:`problems` read by the caller,
        is given. Nothing happens on the reference backend (checked before rendering) or
        with ``check_values=False``.

        Example:
            >>> import torch, gsnb
            >>> K = torch.tensor([[[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]])
            >>> out = gsnb.render(torch.tensor([[0.0, 0, 2]]), torch.tensor([[1.0, 0, 0, 0]]),
            ...     torch.full((1, 3), 0.2), torch.tensor([0.9]), torch.ones(1, 3),
            ...     torch.eye(4)[None], K, 16, 16).check()
        """
        if self._deferred is not None:
            self._deferred.check(problems)
        return self


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
    *,
    sh_degree: int | None = None,
    backgrounds: Tensor | None = None,
    near_plane: float = NEAR_PLANE,
    far_plane: float = FAR_PLANE,
    backend: Backend = "auto",
    absgrad: bool = False,
    with_depth: bool = True,
    check_values: bool = True,
    rasterize_mode: RasterizeMode = "classic",
) -> RenderResult:
    """Render 3D Gaussians into ``C`` cameras, differentiably.

    Conventions (the same as gsplat): cameras follow OpenCV (+x right, +y down,
    +z forward); ``viewmats`` map world to camera; pixel centres lie at
    ``i + 0.5``. Each Gaussian is projected with EWA splatting plus a 0.3 px^2
    low-pass; its alpha ``opacity * exp(-d^T S^-1 d / 2)`` is clamped to 0.99,
    ignored below 1/255, and splats are blended front to back by view depth
    until a pixel's transmittance would fall below 1e-4.

    Args:
        means: ``[N, 3]`` centres in world space.
        quats: ``[N, 4]`` rotations as quaternions ``(w, x, y, z)``, any norm.
        scales: ``[N, 3]`` standard deviations along the rotated axes (linear, >= 0).
        opacities: ``[N]`` in ``[0, 1]``.
        colors: RGB ``[N, 3]``, or SH coefficients ``[N, K, 3]`` with ``K`` = 1,
            4, 9 or 16 (degree 0 to 3, INRIA constants; colour is
            ``max(SH(dir) + 0.5, 0)`` with ``dir`` from camera centre to Gaussian).
        viewmats: ``[C, 4, 4]`` world-to-camera matrices.
        Ks: ``[C, 3, 3]`` pinhole intrinsics in pixels.
        width, height: image size in pixels (any size).
        sh_degree: SH degree to evaluate (default: all that ``colors`` holds);
            lower values use only the first ``(sh_degree + 1) ** 2`` coefficients.
        backgrounds: ``[3]`` or ``[C, 3]`` colour behind the Gaussians
            (``rgb + (1 - alpha) * background``); default black.
        near_plane, far_plane: Gaussians with depth outside ``(near, far)`` are culled.
        backend: ``"cuda"`` (needs the built extension and CUDA tensors),
            ``"reference"`` (pure PyTorch, any device) or ``"auto"``: CUDA when
            the tensors are on a GPU and the extension is built, else reference.
        absgrad: also accumulate ``meta.absgrad`` (for AbsGS densification).
        with_depth: also blend depth; ``False`` skips that channel (faster, less
            memory) and leaves ``depth`` as ``None``.
        check_values: check for NaN/Inf values, opacities outside [0, 1], negative scales
            and focal lengths <= 0, raising ``ValueError`` naming the tensor. The reference
            backend checks before rendering. The CUDA backend checks inside its projection
            kernel, on the values it reads anyway (every Gaussian's means, quats, scales
            and opacity, every camera and background, and the colour coefficients of the
            splats visible in some camera: a NaN in a colour no camera sees is not found),
            adding no pass over the inputs and no host sync: the default call is as fast
            as ``check_values=False``. The flag is read where the renderer waits for the
            GPU anyway (tile binning reads how many splat-tile pairs to sort, as gsplat's
            does), so the error is raised by this call, after its GPU work is queued. A
            render with no such wait (no Gaussians) leaves it to
            ``out.check()`` or to the next ``render()`` / ``render_splats()`` of the same
            thread (its message says so), as a CUDA error in PyTorch comes at a later
            call. ``out.problems`` is the device flag. ``False`` skips the checks.
        rasterize_mode: ``"classic"`` (default, 3DGS) or ``"antialiased"``: as gsplat's
            option of that name (Mip-Splatting's 2D filter, Yu et al. 2024), each splat's
            opacity is multiplied by ``sqrt(det(S) / det(S + 0.3 I))`` of its 2D covariance
            ``S``, so the 0.3 px^2 low-pass blurs a small splat without brightening it
            (no dilation when the view zooms out).

    Returns:
        A :class:`RenderResult` with ``rgb [C, H, W, 3]``, ``alpha [C, H, W, 1]``,
        ``depth [C, H, W, 1]`` and ``meta`` (``means2d``, ``radii``, ``depths``,
        ``num_visible``, ``absgrad``).

    Raises:
        ValueError: an argument has the wrong shape, dtype, device or values;
            the message names it with its shape and the expected one. Values are
            checked on the CUDA backend once the GPU has projected them (see
            ``check_values``).

    Example:
        >>> import torch, gsnb
        >>> means = torch.tensor([[0.0, 0.0, 2.0]])
        >>> out = gsnb.render(
        ...     means, torch.tensor([[1.0, 0, 0, 0]]), torch.full((1, 3), 0.2),
        ...     torch.tensor([0.9]), torch.tensor([[1.0, 0.5, 0.0]]),
        ...     torch.eye(4)[None], torch.tensor([[[64.0, 0, 32], [0, 64, 32], [0, 0, 1]]]),
        ...     64, 64)
        >>> out.rgb.shape, round(out.alpha[0, 32, 32, 0].item(), 2)
        (torch.Size([1, 64, 64, 3]), 0.89)
    """
    degree = validate_inputs(
        means, quats, scales, opacities, colors, viewmats, Ks, width, height,
        sh_degree, backgrounds, near_plane, far_plane, check_values=False,
    )  # fmt: skip
    return _dispatch(
        _choose_backend(backend, means.device, means.dtype),
        (means, quats, scales, opacities, colors, None), viewmats, Ks, int(width), int(height),
        degree, backgrounds, near_plane, far_plane, absgrad, with_depth, stored=False,
        antialiased=_antialiased(rasterize_mode), check_values=check_values,
    )  # fmt: skip


SPLAT_KEYS = ("means", "quats", "scales", "opacities", "sh0", "shN")


def activate_splats(splats: Mapping[str, Tensor] | torch.nn.ParameterDict) -> dict[str, Tensor]:
    """Render-ready tensors from stored ones: what :func:`render_splats` renders.

    Returns ``means``, ``quats``, ``scales = exp(scales)``, ``opacities =
    sigmoid(opacities)`` and ``colors = cat([sh0, shN], 1)`` ``[N, K, 3]``.

    Example:
        >>> import torch
        >>> a = activate_splats({"means": torch.zeros(2, 3), "quats": torch.ones(2, 4),
        ...     "scales": torch.zeros(2, 3), "opacities": torch.zeros(2),
        ...     "sh0": torch.zeros(2, 1, 3), "shN": torch.zeros(2, 3, 3)})
        >>> a["scales"][0].tolist(), a["opacities"].tolist(), tuple(a["colors"].shape)
        ([1.0, 1.0, 1.0], [0.5, 0.5], (2, 4, 3))
    """
    return {
        "means": splats["means"],
        "quats": splats["quats"],
        "scales": torch.exp(splats["scales"]),
        "opacities": torch.sigmoid(splats["opacities"]),
        # An empty shN [N, 0, 3] too: it gets its (empty) gradient.
        "colors": torch.cat([splats["sh0"], splats["shN"]], dim=1),
    }


def render_splats(
    splats: Mapping[str, Tensor] | torch.nn.ParameterDict,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    sh_degree: int | None = None,
    backgrounds: Tensor | None = None,
    near_plane: float = NEAR_PLANE,
    far_plane: float = FAR_PLANE,
    backend: Backend = "auto",
    absgrad: bool = False,
    with_depth: bool = True,
    check_values: bool = True,
    rasterize_mode: RasterizeMode = "classic",
) -> RenderResult:
    """Render Gaussians given as 3DGS stores and trains them, differentiably.

    The image is :func:`render`'s of ``means``, ``quats``, ``exp(scales)``,
    ``sigmoid(opacities)`` and ``cat([sh0, shN], 1)``. The CUDA backend applies
    these activations inside its kernels: no activated copies are made and the
    gradients land directly on the stored tensors (fewer kernel launches per
    training step). The reference backend activates in PyTorch.

    Args:
        splats: a dict or ``torch.nn.ParameterDict`` (``GaussianModel.splats``) with
            ``means [N, 3]``, ``quats [N, 4]``, ``scales [N, 3]`` (log standard deviations),
            ``opacities [N]`` (logits), ``sh0 [N, 1, 3]`` and ``shN [N, K-1, 3]``
            (the SH coefficients past the first; K = 1, 4, 9 or 16).
        viewmats, Ks, width, height, sh_degree, backgrounds, near_plane, far_plane,
        backend, absgrad, with_depth, check_values, rasterize_mode: as for :func:`render`.

    Returns:
        A :class:`RenderResult`, as :func:`render` returns.

    Raises:
        ValueError: a key is missing, or a tensor has the wrong shape, dtype,
            device or (with ``check_values``, raised as :func:`render` says) NaN/Inf values.

    Example:
        >>> import torch, gsnb
        >>> splats = {
        ...     "means": torch.tensor([[0.0, 0.0, 2.0]]), "quats": torch.tensor([[1.0, 0, 0, 0]]),
        ...     "scales": torch.full((1, 3), -1.6), "opacities": torch.tensor([2.2]),
        ...     "sh0": torch.zeros(1, 1, 3), "shN": torch.zeros(1, 3, 3)}
        >>> K = torch.tensor([[[64.0, 0, 32], [0, 64, 32], [0, 0, 1]]])
        >>> out = gsnb.render_splats(splats, torch.eye(4)[None], K, 64, 64)
        >>> out.rgb.shape, round(out.alpha[0, 32, 32, 0].item(), 2)
        (torch.Size([1, 64, 64, 3]), 0.89)
    """
    try:  # a dict, a torch.nn.ParameterDict, ...
        means, quats, scales, opacities, sh0, shn = [splats[k] for k in SPLAT_KEYS]
    except (KeyError, TypeError, IndexError):
        have = list(splats.keys()) if hasattr(splats, "keys") else type(splats).__name__
        raise ValueError(
            f"splats must map the keys {list(SPLAT_KEYS)} to tensors, got {have}"
        ) from None
    degree = validate_inputs(
        means, quats, scales, opacities, sh0, viewmats, Ks, width, height,
        sh_degree, backgrounds, near_plane, far_plane, check_values=False, rest=shn, stored=True,
    )  # fmt: skip
    return _dispatch(
        _choose_backend(backend, means.device, means.dtype),
        (means, quats, scales, opacities, sh0, shn), viewmats, Ks, int(width), int(height),
        degree, backgrounds, near_plane, far_plane, absgrad, with_depth, stored=True,
        antialiased=_antialiased(rasterize_mode), check_values=check_values,
    )  # fmt: skip


def _antialiased(rasterize_mode: str) -> bool:
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(
            f"rasterize_mode must be one of {list(RASTERIZE_MODES)}, got {rasterize_mode!r}"
        )
    return rasterize_mode == "antialiased"


def _dispatch(
    backend: str,
    gaussians: tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None],
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    degree: int | None,
    backgrounds: Tensor | None,
    near_plane: float,
    far_plane: float,
    absgrad: bool,
    with_depth: bool,
    *,
    stored: bool,
    antialiased: bool = False,
    check_values: bool = False,
) -> RenderResult:
    """Render validated inputs with ``backend``; ``gaussians`` is ``(means, quats, scales,
    opacities, colors, rest)``, stored parameters (``colors`` = sh0, ``rest`` = shN) when
    ``stored``."""
    means, quats, scales, opacities, colors, rest = gaussians
    deferred = None
    if check_values:
        checked = value_tensors(
            means, quats, scales, opacities, colors, viewmats, Ks, backgrounds, rest, stored
        )
    if backend == "cuda":
        from gsnb.raster import cuda

        _poll_earlier_checks()
        if check_values:
            deferred = DeferredCheck(checked, stored)
        # The kernels composite a constant background; one with a gradient is done below.
        inside = backgrounds is not None and not backgrounds.requires_grad
        rgb, alpha, depth, proj = cuda.render(
            means, quats, scales, opacities, colors, viewmats, Ks, width, height,
            degree, near_plane, far_plane, absgrad, with_depth, backgrounds if inside else None,
            rest=rest, stored=stored, antialiased=antialiased, value_check=deferred,
            checked_backgrounds=backgrounds,
        )  # fmt: skip
        # Known by now when the render waited for the GPU anyway (binning reads its
        # intersection count): a bad value raises here. Else a later call reads it.
        if deferred is not None and not deferred.poll():
            _pending_checks().append(deferred)
        if inside:
            backgrounds = None
    else:
        if check_values:  # on the host: a sync costs nothing here
            check_values_of(checked, stored=stored)
        if stored:
            a = activate_splats(dict(zip(SPLAT_KEYS, gaussians, strict=True)))
            scales, opacities, colors = a["scales"], a["opacities"], a["colors"]
        rgb, alpha, depth, proj = _render_reference(
            means, quats, scales, opacities, colors, viewmats, Ks, width, height,
            degree, near_plane, far_plane, absgrad, with_depth, antialiased,
        )  # fmt: skip
    if backgrounds is not None:
        bg = backgrounds.expand(viewmats.shape[0], 3)[:, None, None, :]
        rgb = rgb + (1.0 - alpha) * bg
    meta = RenderMeta(
        means2d=proj.means2d,
        radii=proj.radii,
        depths=proj.depths,
        backend=backend,
        absgrad=getattr(proj.means2d, "absgrad", None),
    )
    return RenderResult(rgb=rgb, alpha=alpha, depth=depth, meta=meta, _deferred=deferred)


_local = threading.local()

# Said by an error found at a later call than the render whose inputs were bad.
_EARLIER = (
    " (found on the GPU by an earlier render() call of this thread; call result.check() "
    "right after render() to raise there)"
)


def _pending_checks() -> deque[DeferredCheck]:
    """This thread's CUDA value checks whose flags are not read yet; the CUDA launch queue
    bounds how far the host runs ahead, and so their number."""
    if not hasattr(_local, "pending"):
        _local.pending = deque()
    return _local.pending


def _poll_earlier_checks() -> None:
    """Raise the error of an earlier render of this thread whose flag is known by now;
    flags not yet known stay pending (no wait)."""
    pending = _pending_checks()
    while pending:
        first = pending[0]
        if first.done:
            pending.popleft()
            continue
        if not first.poll(_EARLIER):
            return  # renders finish in order on a stream: the later ones are not known either
        pending.popleft()


def _render_reference(
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
    with_depth: bool,
    antialiased: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Projection]:
    proj = project(
        means, quats, scales, opacities, viewmats, Ks, width, height, near_plane, far_plane,
        antialiased,
    )  # fmt: skip
    if proj.compensations is not None:
        opacities = opacities[None] * proj.compensations  # [C, N]
    means2d = proj.means2d
    if means2d.requires_grad:
        means2d.retain_grad()
    if degree is None:
        rgb = colors[None].expand(viewmats.shape[0], -1, -1)
    else:
        dirs = means[None] - camera_centres(viewmats)[:, None, :]
        rgb = eval_sh(degree, colors[None], dirs)
    feats = torch.cat([rgb, proj.depths[..., None]], dim=-1) if with_depth else rgb
    sink = None
    if absgrad:
        sink = means2d.new_zeros(means2d.shape)
        means2d.absgrad = sink  # type: ignore[attr-defined]
    image, alpha = reference.rasterize(
        means2d, proj.conics, feats, opacities, proj.depths, proj.radii, width, height, sink
    )
    depth = image[..., 3:4] / alpha.clamp_min(1e-10) if with_depth else None
    return image[..., :3], alpha, depth, proj


_warned_fallback = False


def _choose_backend(backend: str, device: torch.device, dtype: torch.dtype) -> str:
    global _warned_fallback
    if backend == "reference":
        return "reference"
    if backend not in ("auto", "cuda"):
        raise ValueError(f"backend must be 'auto', 'cuda' or 'reference', got {backend!r}")
    if device.type != "cuda":
        if backend == "cuda":
            raise ValueError(
                f"backend='cuda' needs tensors on a CUDA device, got {device}; "
                "move them with .cuda() or use backend='reference'"
            )
        return "reference"
    from gsnb.raster import cuda

    if backend == "auto" and dtype != torch.float32:
        return "reference"  # the CUDA kernels compute in float32
    if cuda.is_available():
        return "cuda"
    if backend == "cuda":
        raise RuntimeError(
            "the CUDA rasterizer is not built for this environment; run %gs_build in a "
            "notebook or `gsnb build` in a terminal (gsnb doctor explains any problem)"
        )
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            "gsnb: CUDA tensors but no built CUDA rasterizer; using the slow reference "
            "backend. Run %gs_build (or `gsnb build`) to build it.",
            stacklevel=3,
        )
    return "reference"
