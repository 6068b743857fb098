"""The reference backend: the whole renderer in plain, differentiable PyTorch.

It runs on any device, in float32 or float64, and is the ground truth the CUDA
backend is tested against. Splats are binned into 16x16 tiles exactly as the
CUDA backend bins them; each group of tiles is composited as one padded
``[tiles, splats, pixels]`` block, front to back, with the transmittance
carried from block to block, so memory stays bounded by the block size (never
``N x H x W``). Under autograd, large blocks are recomputed in the backward
pass (activation checkpointing) instead of being kept.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from gsnb.raster.constants import ALPHA_MAX, ALPHA_MIN, T_MIN, TILE_SIZE

_LOG_T_MIN = math.log(T_MIN)
_BLOCK_ELEMENTS = 1 << 21  # tiles x splats x pixels per block
_MAX_BLOCK_SPLATS = 128
_PIXELS = TILE_SIZE * TILE_SIZE


class _AbsGradTap(torch.autograd.Function):
    """Identity on ``(dx, dy)``; its backward adds per-pixel |grad| into ``sink[ids]``."""

    @staticmethod
    def forward(ctx, dx: Tensor, dy: Tensor, ids: Tensor, sink: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.save_for_backward(ids)
        ctx.sink = sink
        return dx.view_as(dx), dy.view_as(dy)

    @staticmethod
    def backward(ctx, gdx: Tensor, gdy: Tensor):  # type: ignore[override]
        (ids,) = ctx.saved_tensors
        per_splat = torch.stack([gdx.abs().sum(-1), gdy.abs().sum(-1)], dim=-1)  # [T, K, 2]
        ctx.sink.index_add_(0, ids.reshape(-1), per_splat.reshape(-1, 2).to(ctx.sink.dtype))
        return gdx, gdy, None, None


def _composite_block(
    px: Tensor,
    py: Tensor,
    pix_ok: Tensor,
    mean2d: Tensor,
    conic: Tensor,
    opacity: Tensor,
    feats: Tensor,
    pad_ok: Tensor,
    log_t: Tensor,
    ids: Tensor,
    absgrad_sink: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Composite one block of splats over a group of tiles.

    Args:
        px, py: ``[T, P]`` pixel centres; pix_ok ``[T, P]`` inside the image.
        mean2d ``[T, K, 2]``, conic ``[T, K, 3]``, opacity ``[T, K]``, feats
        ``[T, K, D]``: the splats of each tile, front to back; pad_ok ``[T, K]``.
        log_t: ``[T, P]`` log transmittance before this block.

    Returns:
        Features ``[T, P, D]``, accumulated alpha ``[T, P]`` and the log
        transmittance after the block ``[T, P]``.
    """
    dx = px[:, None, :] - mean2d[..., 0:1]
    dy = py[:, None, :] - mean2d[..., 1:2]
    if absgrad_sink is not None:
        dx, dy = _AbsGradTap.apply(dx, dy, ids, absgrad_sink)
    a, b, c = conic[..., 0:1], conic[..., 1:2], conic[..., 2:3]
    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
    alpha = torch.clamp_max(opacity[..., None] * torch.exp(-sigma), ALPHA_MAX)
    ok = pad_ok[..., None] & pix_ok[:, None, :] & (alpha >= ALPHA_MIN) & (sigma >= 0)
    alpha = torch.where(ok, alpha, torch.zeros_like(alpha))
    log1m = torch.log1p(-alpha)
    cum = log_t[:, None, :] + torch.cumsum(log1m, dim=1)
    keep = cum >= _LOG_T_MIN
    weights = torch.where(keep, alpha * torch.exp(cum - log1m), torch.zeros_like(alpha))
    out = torch.einsum("tkp,tkd->tpd", weights, feats)
    return out, weights.sum(1), cum[:, -1, :]


def _bin_tiles(
    means2d: Tensor, radii: Tensor, depths: Tensor, width: int, height: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Sort (tile, splat) pairs by tile, then by depth.

    Returns the splat index of each pair ``[M]``, the first pair of each tile
    and the pair count of each tile (``[tiles]`` each).
    """
    tiles_x = (width + TILE_SIZE - 1) // TILE_SIZE
    tiles_y = (height + TILE_SIZE - 1) // TILE_SIZE
    num_tiles = tiles_x * tiles_y
    device = means2d.device
    visible = torch.nonzero((radii > 0).all(-1), as_tuple=True)[0]
    visible = visible[torch.argsort(depths[visible], stable=True)]
    m = means2d[visible].detach().double()
    r = radii[visible].double()
    # The pixel centres inside each box; a visible box may hold none (it then has no tile).
    px0, px1 = torch.ceil(m[:, 0] - r[:, 0] - 0.5), torch.floor(m[:, 0] + r[:, 0] - 0.5)
    py0, py1 = torch.ceil(m[:, 1] - r[:, 1] - 0.5), torch.floor(m[:, 1] + r[:, 1] - 0.5)
    inside = (px0 <= width - 1) & (px1 >= 0) & (py0 <= height - 1) & (py1 >= 0)
    visible, px0, px1, py0, py1 = (t[inside] for t in (visible, px0, px1, py0, py1))
    x0 = px0.clamp(0, width - 1).long() // TILE_SIZE
    x1 = px1.clamp(0, width - 1).long() // TILE_SIZE
    y0 = py0.clamp(0, height - 1).long() // TILE_SIZE
    y1 = py1.clamp(0, height - 1).long() // TILE_SIZE
    nx, ny = x1 - x0 + 1, y1 - y0 + 1
    counts = nx * ny
    owner = torch.repeat_interleave(torch.arange(len(visible), device=device), counts)
    first = torch.cumsum(counts, 0) - counts
    local = torch.arange(len(owner), device=device) - first[owner]
    tile = (y0[owner] + local // nx[owner]) * tiles_x + x0[owner] + local % nx[owner]
    order = torch.argsort(tile, stable=True)
    tile_counts = torch.bincount(tile, minlength=num_tiles)
    tile_starts = torch.cumsum(tile_counts, 0) - tile_counts
    return visible[owner[order]], tile_starts, tile_counts


def rasterize(
    means2d: Tensor,
    conics: Tensor,
    feats: Tensor,
    opacities: Tensor,
    depths: Tensor,
    radii: Tensor,
    width: int,
    height: int,
    absgrad_sink: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Composite splats front to back into ``C`` images.

    Args:
        means2d: ``[C, N, 2]``; conics: ``[C, N, 3]``; feats: ``[C, N, D]``
            features to blend (colours, and depth as a last channel);
        opacities: ``[N]``, or ``[C, N]`` per camera; depths: ``[C, N]`` sort keys;
        radii: ``[C, N, 2]``.
        absgrad_sink: optional ``[C, N, 2]`` buffer that the backward pass fills
            with the sum over pixels of |d loss / d means2d|.

    Returns:
        Features ``[C, H, W, D]`` and alpha ``[C, H, W, 1]``.
    """
    num_cams, _, dim = feats.shape
    images = []
    alphas = []
    for cam in range(num_cams):
        sink = None if absgrad_sink is None else absgrad_sink[cam]
        opacity = opacities[cam] if opacities.dim() == 2 else opacities
        image, alpha = _rasterize_camera(
            means2d[cam], conics[cam], feats[cam], opacity, depths[cam], radii[cam],
            width, height, sink,
        )  # fmt: skip
        images.append(image.reshape(height, width, dim))
        alphas.append(alpha.reshape(height, width, 1))
    return torch.stack(images), torch.stack(alphas)


def _rasterize_camera(
    means2d: Tensor,
    conics: Tensor,
    feats: Tensor,
    opacities: Tensor,
    depths: Tensor,
    radii: Tensor,
    width: int,
    height: int,
    absgrad_sink: Tensor | None,
) -> tuple[Tensor, Tensor]:
    device, dtype = feats.device, feats.dtype
    dim = feats.shape[-1]
    tiles_x = (width + TILE_SIZE - 1) // TILE_SIZE
    pair_splat, tile_starts, tile_counts = _bin_tiles(means2d, radii, depths, width, height)

    image = feats.new_zeros(height * width, dim)
    alpha_img = feats.new_zeros(height * width)
    busy = torch.nonzero(tile_counts > 0, as_tuple=True)[0]
    if len(busy) == 0 or len(pair_splat) == 0:
        # Keep both outputs in the graph: a loss on alpha alone must still backward().
        link = 0.0 * (feats.sum() + opacities.sum())
        return image + link, alpha_img + link
    busy = busy[torch.argsort(tile_counts[busy], descending=True, stable=True)]
    counts_host = tile_counts[busy].tolist()

    lane = torch.arange(_PIXELS, device=device)
    track = torch.is_grad_enabled() and any(
        t.requires_grad for t in (means2d, conics, feats, opacities)
    )
    pixel_ids, outs, accs = [], [], []
    start = 0
    while start < len(busy):
        kmax = counts_host[start]
        block_k = min(kmax, _MAX_BLOCK_SPLATS)
        group = max(1, _BLOCK_ELEMENTS // (block_k * _PIXELS))
        tiles = busy[start : start + group]
        start += len(tiles)

        tx, ty = tiles % tiles_x, tiles // tiles_x
        pxi = tx[:, None] * TILE_SIZE + lane % TILE_SIZE  # [T, P]
        pyi = ty[:, None] * TILE_SIZE + lane // TILE_SIZE
        pix_ok = (pxi < width) & (pyi < height)
        px = pxi.to(dtype) + 0.5
        py = pyi.to(dtype) + 0.5

        log_t = feats.new_zeros(len(tiles), _PIXELS)
        out = feats.new_zeros(len(tiles), _PIXELS, dim)
        acc = feats.new_zeros(len(tiles), _PIXELS)
        for k0 in range(0, kmax, block_k):
            slot = k0 + torch.arange(min(block_k, kmax - k0), device=device)
            pad_ok = slot[None, :] < tile_counts[tiles, None]  # [T, K]
            pos = (tile_starts[tiles, None] + slot[None, :]).clamp_max(len(pair_splat) - 1)
            ids = pair_splat[pos]
            args = (
                px, py, pix_ok, means2d[ids], conics[ids], opacities[ids], feats[ids],
                pad_ok, log_t, ids,
            )  # fmt: skip
            # The sink is bound, not passed: checkpoint would save it and then refuse to
            # recompute once an earlier block's backward has added into it.
            block = functools.partial(_composite_block, absgrad_sink=absgrad_sink)
            if track and pos.numel() * _PIXELS > _BLOCK_ELEMENTS // 4:
                o, a, log_t = checkpoint(block, *args, use_reentrant=False)
            else:
                o, a, log_t = block(*args)
            out = out + o
            acc = acc + a
            if not bool(((log_t.detach() >= _LOG_T_MIN) & pix_ok).any()):
                break
        keep = pix_ok.reshape(-1)
        pixel_ids.append((pyi * width + pxi).reshape(-1)[keep])
        outs.append(out.reshape(-1, dim)[keep])
        accs.append(acc.reshape(-1)[keep])

    ids = torch.cat(pixel_ids)
    image = image.index_copy(0, ids, torch.cat(outs))
    alpha_img = alpha_img.index_copy(0, ids, torch.cat(accs))
    return image, alpha_img
