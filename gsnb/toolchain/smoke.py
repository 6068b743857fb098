"""The smoke test: render a tiny random scene with the new module and with the reference.

The renderer sits above the toolchain, so it hands its check in
(:func:`set_render_check`, done by :mod:`gsnb.raster`); this module judges the outcome.

A module compiled for the wrong GPU imports fine and fails only at its first kernel
launch ("no kernel image is available for execution on the device"); running one
render right after the build moves that failure from mid-training to build time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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


RenderCheck = Callable[[], tuple[float, bool]]
"""Renders a tiny scene on the GPU with the module in use and with the reference; returns
their largest difference and whether the backward pass gave a finite gradient."""

_render_check: RenderCheck | None = None


def set_render_check(check: RenderCheck | None) -> None:
    """Make ``check`` the test :func:`smoke_test` runs; :mod:`gsnb.raster` sets its own on
    import (the toolchain builds the renderer, so it does not import it).

    Example:
        >>> set_render_check(render_check())  # the same check again: nothing changes
    """
    global _render_check
    _render_check = check


def render_check() -> RenderCheck | None:
    """The check :func:`smoke_test` runs (:func:`gsnb.raster.smoke.compare_backends`)."""
    return _render_check


def smoke_test(built_for: str = "") -> SmokeResult:
    """Run the render check (:func:`set_render_check`) on the GPU and judge its outcome.

    The module must already be this process's (:func:`gsnb.toolchain.use_module`).
    Without a GPU, or without a check, the test is skipped with a message saying so.
    """
    import torch  # here, not at the top: the warm check of ``gsnb build`` never loads torch

    if not torch.cuda.is_available():
        return SmokeResult(
            "skipped",
            "smoke test skipped: no GPU is visible to this process, so the module was compiled "
            "and loaded but not run",
        )
    if _render_check is None:
        return SmokeResult("skipped", "smoke test skipped: no render check is set (import gsnb)")
    try:
        error, finite_grad = _render_check()
    except Exception as err:  # any failure of the new module is the finding
        gpu = torch.cuda.get_device_capability()
        found = recognise(str(err), gpu_sm=f" (sm_{gpu[0]}{gpu[1]})", built=built_for or None)
        diagnosis = found[0] if found else None
        message = str(diagnosis) if diagnosis else f"smoke test failed: {type(err).__name__}: {err}"
        return SmokeResult("failed", message, None, diagnosis)
    if not finite_grad:
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
