"""The compiled ``csrc/`` extension: the module in use and one wrapper per op, arguments named.

The module is the one :mod:`gsnb.toolchain` built or loaded in this process
(``%gs_build`` / ``gsnb build``, or a cached build found on first use). Each wrapper
below calls the op of the same name in ``csrc/ext.cpp`` with its arguments in the C++
order; a tensor argument's shape is in its trailing comment (C cameras, N Gaussians,
K SH coefficients, B images of H x W pixels and ``ch`` channels). :func:`applies` is
the one test of whether a fused kernel may run on given tensors; the callers keep a
PyTorch path for everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch
from torch import Tensor

from gsnb import toolchain

__all__ = [
    "accumulate_grad2d",
    "adam_step",
    "applies",
    "bin_splats",
    "bin_splats_within",
    "extension",
    "health_sums",
    "photometric_backward",
    "photometric_forward",
    "project_backward",
    "project_forward",
    "rasterize_backward",
    "rasterize_forward",
    "refine_rows",
    "require",
    "set_extension",
    "set_rasterize_forward_segments",
    "set_rasterize_patch",
    "set_rasterize_rows",
    "set_rasterize_segments",
    "ssim_backward",
    "ssim_forward",
    "train_forward_backward",
]


def set_extension(module: ModuleType | None) -> None:
    """Use ``module`` (a built ``csrc/`` extension) for every kernel; ``None`` forgets it, so
    the next :func:`extension` looks for a cached build again.

    Example:
        >>> set_extension(extension())  # the same module again: nothing changes
    """
    toolchain.use_module(module)


def extension() -> ModuleType | None:
    """The extension in use, loading a cached build on first call; ``None`` if there is none.

    Example:
        >>> from gsnb import toolchain
        >>> extension() is toolchain.loaded_module()  # None until a build exists for this GPU
        True
    """
    return toolchain.loaded_module()


def require() -> ModuleType:
    """The extension in use; raises ``RuntimeError`` saying how to build it when there is none."""
    ext = extension()
    if ext is None:
        raise RuntimeError(
            "the CUDA rasterizer is not built for this environment; run %gs_build in a notebook "
            "or `gsnb build` in a terminal"
        )
    return ext


def applies(op: str, *tensors: Tensor, contiguous: bool = True) -> bool:
    """Whether the fused kernel ``op`` may run on ``tensors``: all float32 on one CUDA device,
    contiguous (unless ``contiguous=False``: the caller makes them so), and the extension
    built with ``op``.

    Example:
        >>> import torch
        >>> applies("adam_step", torch.zeros(3))  # a CPU tensor
        False
    """
    # One pass, the device compared by index: this runs several times a training step.
    index = None
    for t in tensors:
        if not t.is_cuda or t.dtype != torch.float32 or (contiguous and not t.is_contiguous()):
            return False
        if index is None:
            index = t.get_device()
        elif t.get_device() != index:
            return False
    ext = extension()
    return ext is not None and hasattr(ext, op)


# The rasterizer (gsnb.raster.cuda's autograd functions).


def project_forward(
    *,
    means: Tensor,  # [N, 3]
    quats: Tensor,  # [N, 4] wxyz
    scales: Tensor,  # [N, 3] linear, or log-scales when stored
    opacities: Tensor,  # [N] in [0, 1], or logits when stored
    coeffs: Tensor,  # [N, 3] RGB, or [N, K, 3] SH ([N, 1, 3] sh0 beside rest)
    rest: Tensor | None,  # [N, K-1, 3] SH after coeffs, or None
    viewmats: Tensor,  # [C, 4, 4]
    Ks: Tensor,  # [C, 3, 3]
    width: int,
    height: int,
    near_plane: float,
    far_plane: float,
    sh_degree: int,  # -1: coeffs are RGB
    with_depth: bool,
    stored: bool,
    antialiased: bool,
    backgrounds: Tensor | None = None,  # [C, 3], checked only (with check_values)
    check_values: bool = False,
    filter3d: Tensor | None = None,  # [N] the 3D filter's variances, or None
) -> list[Tensor]:
    """EWA projection, colours and tile counts: ``[means2d [C, N, 2], conics [C, N, 3],
    depths [C, N], radii [C, N, 2] int32, feats [C, N, 3 or 4 with depth], tiles [C, N] int32,
    opacities_cam, problems]``; ``opacities_cam`` ``[C, N]`` is each splat's opacity times its
    compensation when ``antialiased`` and its 3D filter factor with ``filter3d`` (the scales
    then drawn as ``sqrt(scales^2 + filter3d)``, :func:`gsnb.train.filter3d.apply_filter3d`),
    else empty; ``problems`` ``[1]`` int32 holds a bit per kind of bad value found when
    ``check_values`` (:data:`gsnb.raster.validate.PROBLEM_BITS`), else it is empty.
    """
    return require().project_forward(
        means, quats, scales, opacities, coeffs, rest, viewmats, Ks, width, height, near_plane,
        far_plane, sh_degree, with_depth, stored, antialiased, backgrounds, check_values,
        filter3d,
    )  # fmt: skip


def project_backward(
    *,
    means: Tensor,  # [N, 3]
    quats: Tensor,  # [N, 4]
    scales: Tensor,  # [N, 3]
    opacities: Tensor,  # [N] (read when antialiased or with filter3d)
    coeffs: Tensor,  # [N, 3] or [N, K, 3]
    rest: Tensor | None,  # [N, K-1, 3] or None
    viewmats: Tensor,  # [C, 4, 4]
    Ks: Tensor,  # [C, 3, 3]
    width: int,
    height: int,
    near_plane: float,
    far_plane: float,
    sh_degree: int,
    radii: Tensor,  # [C, N, 2] int32
    v_means2d: Tensor,  # [C, N, 2]
    v_conics: Tensor,  # [C, N, 3]
    v_feats: Tensor,  # [C, N, 3 or 4]
    v_depths: Tensor,  # [C, N], or empty: zero
    v_opacities_cam: Tensor,  # [C, N] when antialiased or with filter3d, else empty
    stored: bool,
    antialiased: bool,
    filter3d: Tensor | None = None,  # [N] the 3D filter's variances, or None
) -> list[Tensor]:
    """Gradients of :func:`project_forward`: ``[v_means, v_quats, v_scales, v_coeffs, v_rest,
    v_opacities]`` (``v_rest`` empty without ``rest``, ``v_opacities`` ``[N]`` empty unless
    ``antialiased`` or ``filter3d``). The conics are recomputed from the inputs: the forward's
    need not be kept for it."""
    return require().project_backward(
        means, quats, scales, opacities, coeffs, rest, viewmats, Ks, width, height, near_plane,
        far_plane, sh_degree, radii, v_means2d, v_conics, v_feats, v_depths, v_opacities_cam,
        stored, antialiased, filter3d,
    )  # fmt: skip


def bin_splats(
    *,
    means2d: Tensor,  # [C, N, 2]
    conics: Tensor,  # [C, N, 3]
    opacities: Tensor,  # [N], or [C, N] per camera
    depths: Tensor,  # [C, N]
    radii: Tensor,  # [C, N, 2] int32
    tiles: Tensor,  # [C, N] int32
    width: int,
    height: int,
    stored: bool,
) -> list[Tensor]:
    """Splat-tile intersections sorted by tile and depth: ``[offsets [C, tiles_y, tiles_x]
    int32, flat_ids [M] int32]``."""
    return require().bin_splats(
        means2d, conics, opacities, depths, radii, tiles, width, height, stored
    )


def bin_splats_within(
    *,
    means2d: Tensor,  # [C, N, 2]
    conics: Tensor,  # [C, N, 3]
    opacities: Tensor,  # [N], or [C, N] per camera
    depths: Tensor,  # [C, N]
    radii: Tensor,  # [C, N, 2] int32
    tiles: Tensor,  # [C, N] int32
    width: int,
    height: int,
    stored: bool,
    capacity: int,
) -> list[Tensor]:
    """:func:`bin_splats` into buffers of ``capacity`` intersections, the host not waiting
    for their count: ``[offsets, flat_ids [capacity] int32, count [1] int64]``. The unused
    entries come first and belong to no tile; where ``count`` exceeds ``capacity`` the tiles'
    lists lack some intersections. ``capacity=0`` sizes the buffers by the count."""
    return require().bin_splats_within(
        means2d, conics, opacities, depths, radii, tiles, width, height, stored, capacity
    )


def rasterize_forward(
    *,
    means2d: Tensor,  # [C, N, 2]
    conics: Tensor,  # [C, N, 3]
    feats: Tensor,  # [C, N, 3 or 4]
    opacities: Tensor,  # [N], or [C, N] per camera
    offsets: Tensor,  # [C, tiles_y, tiles_x] int32
    flat_ids: Tensor,  # [M] int32
    width: int,
    height: int,
    backgrounds: Tensor | None,  # [C, 3] or None
    stored: bool,
) -> list[Tensor]:
    """Front-to-back blending: ``[rgb [C, H, W, 3], depth [C, H, W, 1] (empty without a depth
    channel), alpha [C, H, W, 1], last_ids [C, H, W] int16, seg_starts [slots + 2] int32,
    states [S, channels + 1, 256]]``: each pixel's walk end past its tile's first
    intersection (uint16 bits), and on small grids the segments of the tiles' splat lists
    that :func:`rasterize_backward` walks in parallel, with the walk's state where each
    begins (both empty on large grids)."""
    return require().rasterize_forward(
        means2d, conics, feats, opacities, offsets, flat_ids, width, height, backgrounds, stored
    )


def rasterize_backward(
    *,
    means2d: Tensor,  # [C, N, 2]
    conics: Tensor,  # [C, N, 3]
    feats: Tensor,  # [C, N, 3 or 4]
    opacities: Tensor,  # [N], or [C, N] per camera (its gradient has its shape)
    offsets: Tensor,  # [C, tiles_y, tiles_x] int32
    flat_ids: Tensor,  # [M] int32
    width: int,
    height: int,
    alpha: Tensor,  # [C, H, W, 1]
    depth: Tensor,  # [C, H, W, 1] or empty
    last_ids: Tensor,  # [C, H, W] int16, rasterize_forward's
    seg_starts: Tensor,  # [slots + 2] int32 or empty, rasterize_forward's
    states: Tensor,  # [S, channels + 1, 256] or empty, rasterize_forward's
    v_rgb: Tensor,  # [C, H, W, 3]
    v_depth: Tensor,  # [C, H, W, 1], or empty: zero
    v_alpha: Tensor,  # [C, H, W, 1], or empty: zero
    absgrad: bool,
    backgrounds: Tensor | None,  # [C, 3] or None
    stored: bool,
) -> list[Tensor]:
    """Gradients of :func:`rasterize_forward`: ``[v_means2d, v_conics, v_feats, v_opacities]``,
    then ``|v_means2d|`` summed over pixels ``[C, N, 2]`` when ``absgrad``."""
    return require().rasterize_backward(
        means2d, conics, feats, opacities, offsets, flat_ids, width, height, alpha, depth,
        last_ids, seg_starts, states, v_rgb, v_depth, v_alpha, absgrad, backgrounds, stored,
    )  # fmt: skip


def set_rasterize_rows(*, rows: int) -> int:
    """Pixels a thread of the backward compositing shades: ``0`` (the default) chooses by the
    grid's size (two, unless one-pixel blocks would fill the GPU fewer than four times: one,
    with segments, set_rasterize_segments), ``1`` or ``2`` force it. The gradients agree
    either way, to the order of float additions; for benchmarks and tests. Returns the
    previous setting."""
    return require().set_rasterize_rows(rows)


def set_rasterize_patch(*, width: int) -> int:
    """The width of the pixel patch a warp of the backward compositing covers: ``0`` (the
    default, 8: a warp covers 8 x 4 pixels of its tile, 8 x 8 with two pixel rows a
    thread), or ``8`` or ``16`` forced (16: whole rows of the tile, 16 x 2 or
    16 x 4). The gradients agree either way, to the order of float additions; for benchmarks
    and tests. The forward compositing's warps always cover 8 x 4 pixels. Returns the
    previous setting."""
    return require().set_rasterize_patch(width)


def set_rasterize_forward_segments(*, mode: int) -> int:
    """Whether a forward pass with segments (:func:`set_rasterize_segments`) walks them at
    once, one block each, in three passes: ``0`` (the default) where one-pixel blocks would
    not fill the GPU once, ``1`` whenever there are segments, ``-1`` never (one block a tile,
    recording the segments' states on its way). The outputs agree either way, to the order
    of float operations; for benchmarks and tests. Returns the previous setting."""
    return require().set_rasterize_forward_segments(mode)


def set_rasterize_segments(*, length: int) -> int:
    """Segments of long splat lists that the backward compositing walks in parallel, one
    block each: ``0`` (the default) on the small grids that shade one pixel a thread
    (:func:`set_rasterize_rows`), ``-1`` none, or a forced length (a positive multiple of
    256). The gradients agree either way, to the order of float additions; for benchmarks
    and tests. Returns the previous setting."""
    return require().set_rasterize_segments(length)


# The training kernels (gsnb.train: losses, optimiser, health, densification).


def ssim_forward(
    *,
    img1: Tensor,  # [B, H, W, ch] the render
    img2: Tensor,  # [B, H, W, ch] the target
    pad: int,
    sigma: float,
    c1: float,
    c2: float,
    with_grad: bool,
) -> list[Tensor]:
    """The SSIM map ``[B, Ho, Wo, ch]`` and, when ``with_grad``, the three derivative maps the
    backward pass reads (``d_mu, d_xx, d_xy``, each ``[B, Ho, Wo, ch]``)."""
    return require().ssim_forward(img1, img2, pad, sigma, c1, c2, with_grad)


def ssim_backward(
    *,
    img1: Tensor,  # [B, H, W, ch]
    img2: Tensor,  # [B, H, W, ch]
    v_map: Tensor,  # [B, Ho, Wo, ch]
    d_mu: Tensor,  # [B, Ho, Wo, ch]
    d_xx: Tensor,  # [B, Ho, Wo, ch]
    d_xy: Tensor,  # [B, Ho, Wo, ch]
    pad: int,
    sigma: float,
) -> Tensor:
    """The gradient ``[B, H, W, ch]`` of :func:`ssim_forward`'s map with respect to ``img1``."""
    return require().ssim_backward(img1, img2, v_map, d_mu, d_xx, d_xy, pad, sigma)


def photometric_forward(
    *,
    img1: Tensor,  # [B, H, W, ch] the render
    img2: Tensor,  # [B, H, W, ch] the target, float32 or uint8 (read as v / 255)
    pad: int,
    sigma: float,
    c1: float,
    c2: float,
    lam: float,  # weight of 1 - SSIM
    with_grad: bool,
) -> list[Tensor]:
    """``[stats [4] (loss, l1, ssim, mse), d_mu, d_xx, d_xy]``, the derivative maps
    ``[B, Ho, Wo, ch]`` (empty without ``with_grad``)."""
    return require().photometric_forward(img1, img2, pad, sigma, c1, c2, lam, with_grad)


def photometric_backward(
    *,
    img1: Tensor,  # [B, H, W, ch]
    img2: Tensor,  # [B, H, W, ch] float32 or uint8, as photometric_forward's
    d_mu: Tensor,  # [B, Ho, Wo, ch]
    d_xx: Tensor,  # [B, Ho, Wo, ch]
    d_xy: Tensor,  # [B, Ho, Wo, ch]
    pad: int,
    sigma: float,
    lam: float,
    g_loss: Tensor | None,  # [] or None: zero
    g_l1: Tensor | None,  # [] or None
    g_ssim: Tensor | None,  # [] or None
    g_mse: Tensor | None,  # [] or None
) -> Tensor:
    """The gradient ``[B, H, W, ch]`` of :func:`photometric_forward`'s four values with respect
    to ``img1``, given theirs."""
    return require().photometric_backward(
        img1, img2, d_mu, d_xx, d_xy, pad, sigma, lam, g_loss, g_l1, g_ssim, g_mse
    )


def health_sums(
    *,
    scales: Tensor,  # [N, 3] log-scales
    opacities: Tensor,  # [N] logits
    params: list[Tensor],  # at most 8, any shapes
    grads: list[Tensor],  # at most 8, any shapes
    tail: Sequence[Tensor] = (),  # at most 4 float32 or int64, up to 64 values each
    host: Tensor | None = None,  # [9 + tail values] float64 on the CPU (pinned), or None
) -> Tensor:
    """The sums of :func:`gsnb.train.health.health_sums`, float64 ``[9]``, in one pass, then
    the values of ``tail`` as float64; copied into ``host`` too (on the current stream)."""
    return require().health_sums(scales, opacities, params, grads, tail, host)


def adam_step(
    *,
    params: list[Tensor],  # updated in place
    grads: list[Tensor],  # shapes of params
    exp_avgs: list[Tensor],  # shapes of params, updated in place
    exp_avg_sqs: list[Tensor],  # shapes of params, updated in place
    step_sizes: list[float],  # lr / (1 - beta1^t), one per tensor
    bias2_sqrts: list[float],  # sqrt(1 - beta2^t), one per tensor
    beta1: float,
    beta2: float,
    eps: float,
    gate: Tensor | None = None,  # [3] float64: gradients' sum of squares, non-finite count, loss
    row_values: Sequence[int] = (),  # values per row, one per tensor (or none)
    active_values: Sequence[int] = (),  # leading values of each row updated (or none)
) -> None:
    """One Adam update of every tensor of ``params`` in one launch; with ``gate``, none
    unless the gradients' sum of squares fits a float32, their count of non-finite values
    is 0 and the loss is finite (decided on the device, no host sync). With ``row_values``
    and ``active_values``, tensor ``i`` is rows of ``row_values[i]`` values of which only
    the first ``active_values[i]`` are updated."""
    require().adam_step(
        params, grads, exp_avgs, exp_avg_sqs, step_sizes, bias2_sqrts, beta1, beta2, eps, gate,
        row_values, active_values,
    )  # fmt: skip


def accumulate_grad2d(
    *,
    grads: Tensor,  # [C, N, 2] screen-space gradients
    radii: Tensor,  # [C, N, 2] int32
    sx: float,  # width / 2 * C
    sy: float,  # height / 2 * C
    grad2d: Tensor,  # [N] running sum of norms, updated in place
    count: Tensor,  # [N] running count of views, updated in place
    gate: Tensor | None = None,  # [3] float64, as adam_step's
) -> None:
    """Add each visible Gaussian's normalised gradient norm to ``grad2d`` and 1 to ``count``;
    with ``gate``, nothing unless it opens as :func:`adam_step`'s does (on the device)."""
    require().accumulate_grad2d(grads, radii, sx, sy, grad2d, count, gate)


REFINE_KINDS = {"copy": 0, "moment": 1, "means": 2, "log_scales": 3, "revised_logit": 4}
"""How :func:`refine_rows` fills a tensor's new rows (``csrc/launch.h``'s ``RefineKind``)."""


def refine_rows(
    *,
    pos: Tensor,  # [4, N] int32 inclusive scans: kept in place, clone kept, children kept, split
    kept: int,  # rows kept in place
    cloned: int,  # clones kept
    children: int,  # split Gaussians whose children are kept (two rows each)
    quats: Tensor,  # [N, 4] the parents' quaternions
    log_scales: Tensor,  # [N, 3] the parents' log-scales
    noise: Tensor,  # [2, S, 3] the split children's draws, S = split Gaussians
    shrink: float,  # a child's scales are its parent's over this
    sources: list[Tensor],  # [N, ...] float32 each
    outputs: list[Tensor],  # [kept + cloned + 2 children, ...], written
    kinds: list[int],  # REFINE_KINDS, one per tensor
    rows: Tensor,  # [kept + cloned + 2 children] int64, written; or empty
) -> None:
    """A refine step's clone, split and prune of every tensor in one launch (see
    :func:`gsnb.train.strategy.refine.clone_split_prune`)."""
    require().refine_rows(
        pos, kept, cloned, children, quats, log_scales, noise, shrink, sources, outputs, kinds,
        rows,
    )  # fmt: skip


def train_forward_backward(
    *,
    means: Tensor,  # [N, 3]
    quats: Tensor,  # [N, 4] wxyz
    scales: Tensor,  # [N, 3] log-scales
    opacities: Tensor,  # [N] logits
    sh0: Tensor,  # [N, 1, 3]
    shN: Tensor | None,  # [N, K-1, 3]
    viewmats: Tensor,  # [1, 4, 4]
    Ks: Tensor,  # [1, 3, 3]
    width: int,
    height: int,
    near_plane: float,
    far_plane: float,
    sh_degree: int,
    backgrounds: Tensor | None,  # [1, 3]
    target: Tensor,  # [1, H, W, 3] float32 in [0, 1] or uint8 (read as v / 255)
    pad: int,
    sigma: float,
    c1: float,
    c2: float,
    lam: float,
    absgrad: bool,
    antialiased: bool = False,
    filter3d: Tensor | None = None,  # [N] the 3D filter's variances, or None
    capacity: int = 0,
    error_shares: bool = False,
) -> list[Tensor]:
    """A training step's render (:func:`gsnb.render_splats`, classic or ``antialiased``,
    through the 3D filter's variances ``filter3d``; no depth: with ``error_shares`` a fourth
    channel, zero for every splat, blends in its place), photometric loss and gradients
    in one call: ``[stats [4] (loss, L1, SSIM, MSE), v_means, v_quats, v_scales, v_opacities,
    v_sh0, v_shN, means2d [1, N, 2], v_means2d [1, N, 2], radii [1, N, 2] int32, absgrad
    [1, N, 2] (empty unless absgrad), count [1] int64, shares [N]]``: ``count`` splat-tile
    intersections; ``shares`` (empty unless ``error_shares``) each splat's share of the
    error, as :func:`gsnb.train.error_shares.error_shares` of
    :func:`~gsnb.train.error_shares.pixel_error` gives it, from the same render (the fourth
    channel's gradient). ``capacity > 0`` bins the intersections into buffers of that size
    without the host waiting for the count (:func:`bin_splats_within`); where the count
    exceeds it, the loss is NaN."""
    return require().train_forward_backward(
        means, quats, scales, opacities, sh0, shN, viewmats, Ks, width, height, near_plane,
        far_plane, sh_degree, backgrounds, target, pad, sigma, c1, c2, lam, absgrad,
        antialiased, filter3d, capacity, error_shares,
    )  # fmt: skip
