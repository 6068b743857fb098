"""Memory of a training run: where its images live, a warning before a step would run out of
GPU (or host) memory, and the peak GPU memory so far."""

from __future__ import annotations

import warnings

import torch

from gsnb.memory import available_host_memory, estimate_peak_memory, image_bytes

PEAK_EVERY = 20  # steps between reads of the peak GPU memory
GROWTH_TO_RECHECK = 1.1  # densification that grows the Gaussians by 10% checks again
# "auto" keeps the images on the GPU when they and a step fit in this share of its memory:
# densification commonly grows the Gaussians tenfold, so half stays free for it.
GPU_SHARE_FOR_IMAGES = 0.5
HOST_SHARE = 0.9  # host memory the images may take before a warning
IMAGES_ON = ("auto", "gpu", "cpu")


def peak_allocated(device: torch.device) -> int:
    """The peak GPU memory allocated on ``device`` so far, in bytes: what
    :func:`torch.cuda.max_memory_allocated` returns, read from the allocator's nested
    statistics. ``max_memory_allocated`` flattens them into one dictionary in Python first,
    through a recursive closure that leaves a reference cycle and a hundred tuples behind on
    every call: garbage that only a full collection frees (the first one of a fox run, near
    step 1,600, found 10,000 such objects).
    """
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    return int(stats.get("allocated_bytes", {}).get("all", {}).get("peak", 0))


def choose_images_on(
    images_on: str,
    device: torch.device,
    sizes: list[tuple[int, int]],
    num_gaussians: int,
    sh_degree: int,
) -> str:
    """Where the training images live: ``"gpu"`` (the training device) or ``"cpu"`` (host).

    ``"auto"`` keeps them on the GPU when a step with ``num_gaussians`` and the
    images (8-bit, ``sizes`` are ``(width, height)``) fit in half its memory, else
    on the host (always ``"gpu"``, meaning the device itself, on a CPU device).
    Warns (``ResourceWarning``) when host-resident images may not fit in the
    host memory available.

    Example:
        >>> import torch
        >>> choose_images_on("auto", torch.device("cpu"), [(64, 48)], 1000, 3)
        'gpu'
    """
    if images_on not in IMAGES_ON:
        raise ValueError(f"images_on must be one of {', '.join(IMAGES_ON)}, got {images_on!r}")
    nbytes = image_bytes(sizes)
    place = images_on
    if place == "auto":
        place = "gpu"
        if device.type == "cuda":
            width, height = max(w for w, _ in sizes), max(h for _, h in sizes)
            step = estimate_peak_memory(num_gaussians, width, height, sh_degree)
            total = torch.cuda.get_device_properties(device).total_memory
            place = "gpu" if step + nbytes <= GPU_SHARE_FOR_IMAGES * total else "cpu"
    if place == "cpu" or device.type != "cuda":
        check_host_memory(nbytes)
    return place


def check_host_memory(nbytes: int) -> int | None:
    """Warn (``ResourceWarning``) when ``nbytes`` of images exceed 90% of the free host memory.

    Returns the host memory available (bytes), or None where unknown.

    Example:
        >>> check_host_memory(1024) is None or True
        True
    """
    available = available_host_memory()
    if available is not None and nbytes > HOST_SHARE * available:
        warnings.warn(
            f"the training images take {nbytes / 2**30:.1f} GiB as 8-bit RGB but the host has "
            f"{available / 2**30:.1f} GiB available; raise the downscale or train on fewer views",
            ResourceWarning,
            stacklevel=3,
        )
    return available


def check_gpu_memory(
    num_gaussians: int,
    width: int,
    height: int,
    sh_degree: int,
    device: torch.device,
    dataset_bytes: int = 0,
) -> float | None:
    """Warn when a step is expected to need more than 90% of the GPU's memory.

    Uses :func:`gsnb.memory.estimate_peak_memory` (bytes of one step, the
    training images kept on the GPU included); does nothing on the CPU.
    Returns the estimate in bytes, or None on the CPU.

    Example:
        >>> import torch
        >>> check_gpu_memory(1000, 64, 64, 3, torch.device("cpu")) is None
        True
    """
    if device.type != "cuda":
        return None
    need = float(
        estimate_peak_memory(
            num_gaussians, width, height, sh_degree, cameras=1, dataset_bytes=dataset_bytes
        )
    )
    total = torch.cuda.get_device_properties(device).total_memory
    if need > 0.9 * total:
        warnings.warn(
            f"training {num_gaussians} Gaussians at {width}x{height} needs about "
            f"{need / 2**30:.1f} GiB of the GPU's {total / 2**30:.1f} GiB; raise the downscale "
            "or cap the Gaussians (--cap-max, the strategy's cap_max)",
            ResourceWarning,
            stacklevel=3,
        )
    return need


class MemoryWatch:
    """The memory preflight of one run, repeated as the Gaussians grow, and its peak memory.

    Args:
        device: the training device (nothing is checked or read on the CPU).
        width, height: the largest training image.
        dataset_bytes: bytes of the training images on ``device`` (all of them on the GPU,
            or the few copied ahead from the host).

    Example:
        >>> import torch
        >>> watch = MemoryWatch(torch.device("cpu"), 64, 64, dataset_bytes=0)
        >>> watch.check(1000, sh_degree=3)
        >>> watch.checked_at, watch.peak(step=1, changed=False)
        (1000, None)
    """

    def __init__(self, device: torch.device, width: int, height: int, dataset_bytes: int) -> None:
        self.device = device
        self.width = width
        self.height = height
        self.dataset_bytes = dataset_bytes
        self.checked_at = 0
        self._peak: int | None = None

    def check(self, num_gaussians: int, sh_degree: int) -> None:
        """Warn (``ResourceWarning``) if a step with ``num_gaussians`` may not fit on the GPU."""
        self.checked_at = num_gaussians
        check_gpu_memory(
            num_gaussians, self.width, self.height, sh_degree, self.device, self.dataset_bytes
        )

    def check_growth(self, num_gaussians: int, sh_degree: int) -> None:
        """:meth:`check` again once the Gaussians grew 10% past the last check."""
        if num_gaussians > GROWTH_TO_RECHECK * self.checked_at:
            self.check(num_gaussians, sh_degree)

    def peak(self, step: int, changed: bool) -> int | None:
        """Peak GPU memory allocated so far (bytes; None on CPU).

        Read at every ``PEAK_EVERY``-th step, when the model ``changed``
        (densification) and when unknown (first step, after :meth:`forget_peak`)
        with :func:`peak_allocated`.
        """
        if self.device.type != "cuda":
            return None
        if changed or self._peak is None or step % PEAK_EVERY == 0:
            self._peak = peak_allocated(self.device)
        return self._peak

    def forget_peak(self) -> None:
        """Read the peak afresh at the next :meth:`peak` (after a resume)."""
        self._peak = None
