"""The check a fresh build of the rasterizer must pass: both backends agree on a tiny scene.

:mod:`gsnb.toolchain` runs it right after a build (``gsnb.toolchain.smoke.smoke_test``);
it sits below the renderer, so :mod:`gsnb.raster` hands it this check on import.
"""

from __future__ import annotations

import torch

from gsnb.raster.api import render


def tiny_scene(device: torch.device, n: int = 64, seed: int = 0) -> dict[str, object]:
    """Keyword arguments of :func:`gsnb.render` for ``n`` random Gaussians before one camera.

    Example:
        >>> sorted(tiny_scene(torch.device("cpu")))[:3]
        ['Ks', 'colors', 'height']
    """
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g) * torch.tensor([0.6, 0.4, 0.3]) + torch.tensor(
        [0.0, 0.0, 3.0]
    )
    scene = {
        "means": means,
        "quats": torch.randn(n, 4, generator=g),
        "scales": torch.rand(n, 3, generator=g) * 0.15 + 0.03,
        "opacities": torch.rand(n, generator=g) * 0.8 + 0.1,
        "colors": torch.rand(n, 4, 3, generator=g) * 0.5,
        "viewmats": torch.eye(4)[None],
        "Ks": torch.tensor([[[40.0, 0.0, 25.0], [0.0, 40.0, 17.0], [0.0, 0.0, 1.0]]]),
    }
    moved: dict[str, object] = {k: v.to(device) for k, v in scene.items()}
    moved.update(width=50, height=35)
    return moved


def compare_backends() -> tuple[float, bool]:
    """Render :func:`tiny_scene` on the GPU with ``backend="cuda"`` and ``"reference"``.

    Returns the largest difference of rgb, alpha and alpha-weighted depth, and whether
    the CUDA backward pass gave a finite gradient of the means. Any error of the
    module (a kernel built for another GPU) propagates.

    Example:
        >>> error, finite_grad = compare_backends()  # doctest: +SKIP
        >>> error < 1e-3 and finite_grad  # doctest: +SKIP
        True
    """
    scene = tiny_scene(torch.device("cuda"))
    means = scene["means"].clone().requires_grad_(True)  # type: ignore[union-attr]
    cuda_out = render(**{**scene, "means": means}, backend="cuda")  # type: ignore[arg-type]
    (cuda_out.rgb.sum() + cuda_out.alpha.sum()).backward()
    torch.cuda.synchronize()
    ref_out = render(**scene, backend="reference")  # type: ignore[arg-type]
    error = max(
        (cuda_out.rgb - ref_out.rgb).abs().max().item(),
        (cuda_out.alpha - ref_out.alpha).abs().max().item(),
        (cuda_out.depth * cuda_out.alpha - ref_out.depth * ref_out.alpha).abs().max().item(),
    )
    grad = means.grad
    return error, grad is not None and bool(torch.isfinite(grad).all())
