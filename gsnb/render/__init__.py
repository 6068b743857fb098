"""Differentiable Gaussian rasterization: :func:`render` and its backends."""

from gsnb.render.api import RenderMeta, RenderResult, render, render_splats

__all__ = ["RenderMeta", "RenderResult", "render", "render_splats"]
