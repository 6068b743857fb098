"""Differentiable Gaussian rasterization: :func:`render` and its backends."""

from gsnb.raster.api import RenderMeta, RenderResult, activate_splats, render, render_splats
from gsnb.raster.smoke import compare_backends
from gsnb.toolchain.smoke import set_render_check

# The toolchain smoke-tests each build with this check; it cannot import the renderer it builds.
set_render_check(compare_backends)

__all__ = ["RenderMeta", "RenderResult", "activate_splats", "render", "render_splats"]
