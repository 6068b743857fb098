"""Memory preflight: the GPU memory a training step needs, before it runs, and host memory.

The estimate adds up what one step of 3DGS training holds at its peak with the
CUDA backend: the parameters with their gradients and Adam's two moments, the
render's per-Gaussian intermediates (projection, the depth sort and the
splat-tile intersections, their gradients), the per-pixel buffers of the
render, and the photometric loss (L1 + SSIM) with its backward pass. The two
empirical constants, bytes per Gaussian and per pixel of the transient work,
were fitted to peaks measured on an H200 (``benchmarks/bench_memory.py``,
``benchmarks/results/memory_h200.json``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from gsnb.raster.sh import num_sh_bases

# Fitted on an H200 (benchmarks/bench_memory.py, least squares on relative error): what a
# step holds at its peak beyond the parameters and Adam's state. The loss's per-pixel
# cost grows faster than linearly with the image (measured), hence the quadratic term.
TRANSIENT_BYTES_PER_GAUSSIAN = 129.5
BYTES_PER_PIXEL = 462.8
QUADRATIC_BYTES_PER_IMAGE = 1.941e8  # times (pixels / 1920x1080)^2
BASELINE_BYTES = 24.9e6
_FULL_HD = 1920 * 1080


def estimate_peak_memory(
    num_gaussians: int,
    width: int,
    height: int,
    sh_degree: int = 3,
    cameras: int = 1,
    *,
    dataset_bytes: int = 0,
) -> int:
    """Peak GPU bytes of one training step (CUDA backend, Adam, L1 + SSIM loss).

    Args:
        num_gaussians: ``N``.
        width, height: render size in pixels.
        sh_degree: SH degree of the colours (0..3).
        cameras: images rendered per step.
        dataset_bytes: training images kept on the GPU, if any.

    Returns:
        Bytes. Measured peaks lie within 10% of this across 100k to 5M Gaussians
        and 0.3 to 8 megapixels (``benchmarks/results/memory_h200.json``).

    Example:
        >>> round(estimate_peak_memory(1_000_000, 1920, 1080) / 2**30, 1)
        2.1
    """
    if num_gaussians < 0 or width <= 0 or height <= 0 or cameras <= 0:
        raise ValueError(
            f"need num_gaussians >= 0 and positive width, height, cameras; got "
            f"{num_gaussians}, {width}x{height}, {cameras}"
        )
    floats = 3 + 4 + 3 + 1 + 3 * num_sh_bases(sh_degree)  # means, quats, scales, opacity, SH
    state = 4 * floats * 4  # parameters, gradients, Adam's two moments
    per_gaussian = state + TRANSIENT_BYTES_PER_GAUSSIAN * cameras
    ratio = width * height / _FULL_HD
    per_image = BYTES_PER_PIXEL * width * height + QUADRATIC_BYTES_PER_IMAGE * ratio * ratio
    total = BASELINE_BYTES + num_gaussians * per_gaussian + cameras * per_image + dataset_bytes
    return int(total)


def image_bytes(sizes: Iterable[tuple[int, int]]) -> int:
    """Bytes of 8-bit RGB images of the given ``(width, height)`` sizes, as training stores them.

    Example:
        >>> image_bytes([(1920, 1080)] * 1000) / 2**30  # doctest: +ELLIPSIS
        5.79...
    """
    return sum(3 * int(w) * int(h) for w, h in sizes)


def available_host_memory() -> int | None:
    """Bytes of host memory available to new allocations now, or None where unknown.

    ``MemAvailable`` of ``/proc/meminfo`` (page cache that can be dropped
    counts), else free physical pages from ``os.sysconf``.

    Example:
        >>> available = available_host_memory()
        >>> available is None or available > 0
        True
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
