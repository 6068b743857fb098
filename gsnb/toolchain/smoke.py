"""The smoke test: render a tiny random scene with the new module and with the reference.

A module compiled for the wrong GPU imports fine and fails only at its first kernel
launch ("no kernel image is available for execution on the device"); running one
render right after the build moves that failure from mid-training to build time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from gsnb.toolchain.catalogue import Diagnosis, recognise

TOLERANCE = 1e-3


@dataclass(frozen=True)
class SmokeResult:
    """What the smoke test saw.

    Attributes:
        status: ``"passed"``, ``"skipped"`` (no GPU) or ``"failed"``.
        message: one sentence for the user.
        max_error: largest absolute difference from the reference (when it ran).
        diagnosis: the catalogue entry of a failure.
        recorded: when the test ran (seconds since the epoch) if this result was read
            from the build's record of an earlier run on the same GPU, else None.

    Example:
        >>> SmokeResult("skipped", "no GPU").ok
        True
    """

    status: Literal["passed", "skipped", "failed"]
    message: str
    max_error: float | None = None
    diagnosis: Diagnosis | None = None
    recorded: float | None = None

    @property
    def ok(self) -> bool:
        """True unless the test ran and failed."""
        return self.status != "failed"


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


def smoke_test(built_for: str = "") -> SmokeResult:
    """Render a tiny scene on the GPU with ``backend="cuda"`` and ``"reference"`` and compare.

    The module must already be registered with :func:`gsnb.raster.cuda.set_extension`.
    Without a GPU the test is skipped with a message saying so.
    """
    if not torch.cuda.is_available():
        return SmokeResult(
            "skipped",
            "smoke test skipped: no GPU is visible to this process, so the module was compiled "
            "and loaded but not run",
        )
    import gsnb

    try:
        scene = tiny_scene(torch.device("cuda"))
        means = scene["means"].clone().requires_grad_(True)  # type: ignore[union-attr]
        cuda_out = gsnb.render(**{**scene, "means": means}, backend="cuda")  # type: ignore[arg-type]
        (cuda_out.rgb.sum() + cuda_out.alpha.sum()).backward()
        torch.cuda.synchronize()
        ref_out = gsnb.render(**scene, backend="reference")  # type: ignore[arg-type]
    except Exception as err:  # any failure of the new module is the finding
        gpu = torch.cuda.get_device_capability()
        found = recognise(str(err), gpu_sm=f" (sm_{gpu[0]}{gpu[1]})", built=built_for or None)
        diagnosis = found[0] if found else None
        message = str(diagnosis) if diagnosis else f"smoke test failed: {type(err).__name__}: {err}"
        return SmokeResult("failed", message, None, diagnosis)
    error = max(
        (cuda_out.rgb - ref_out.rgb).abs().max().item(),
        (cuda_out.alpha - ref_out.alpha).abs().max().item(),
        (cuda_out.depth * cuda_out.alpha - ref_out.depth * ref_out.alpha).abs().max().item(),
    )
    grad = means.grad
    if grad is None or not torch.isfinite(grad).all():
        return SmokeResult(
            "failed", "smoke test failed: the backward pass gave no finite gradient", error
        )
    if not error < TOLERANCE:
        return SmokeResult(
            "failed",
            f"smoke test failed: CUDA and reference renders differ by {error:.2e} "
            f"(limit {TOLERANCE:g})",
            error,
        )
    name = torch.cuda.get_device_name()
    return SmokeResult("passed", f"smoke test passed on {name}: max difference {error:.1e}", error)
