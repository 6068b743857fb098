"""Differentiable Gaussian rasterization: :func:`render` and its backends."""

from gsnb.raster.api import RenderMeta, RenderResult, activate_splats, render, render_splats

__all__ = ["RenderMeta", "RenderResult", "activate_splats", "render", "render_splats"]
