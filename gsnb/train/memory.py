"""GPU memory preflight: warn before a training step would run out of memory."""

from __future__ import annotations

import warnings

import torch

from gsnb.memory import estimate_peak_memory


def check_gpu_memory(
    num_gaussians: int,
    width: int,
    height: int,
    sh_degree: int,
    device: torch.device,
    dataset_bytes: int = 0,
) -> float | None:
    """Warn when a step is expected to need more than 90% of the GPU's memory.

    Uses :func:`gsnb.memory.estimate_peak_memory` (bytes of one step, the training
    images kept on the GPU included); does nothing on the CPU. Returns the estimate
    in bytes, or None.

    Example:
        >>> import torch
        >>> check_gpu_memory(1000, 64, 64, 3, torch.device("cpu")) is None
        True
    """
    if device.type != "cuda":
        return None
    size = {
        "num_gaussians": num_gaussians,
        "width": width,
        "height": height,
        "sh_degree": sh_degree,
        "cameras": 1,
    }
    try:
        need = float(estimate_peak_memory(**size, dataset_bytes=dataset_bytes))
    except ValueError as err:
        warnings.warn(f"gsnb.estimate_peak_memory could not be used: {err}", stacklevel=2)
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    if need > 0.9 * total:
        warnings.warn(
            f"training {num_gaussians} Gaussians at {width}x{height} needs about "
            f"{need / 2**30:.1f} GiB of the GPU's {total / 2**30:.1f} GiB; raise the downscale "
            "or cap the Gaussians (MCMC cap_max, or a higher grow_grad2d)",
            ResourceWarning,
            stacklevel=3,
        )
    return need
