"""Differentiable Gaussian rasterization: :func:`render` and its backends."""

from gsnb.render.api import RenderMeta, RenderResult, render

__all__ = ["RenderMeta", "RenderResult", "render"]
