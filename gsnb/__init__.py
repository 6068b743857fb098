"""gsnb: 3D Gaussian Splatting from a Jupyter notebook.

``%load_ext gsnb`` registers the notebook magics (``%gs_build``, ``%gs_doctor``, ...).
:func:`build` builds the CUDA rasterizer for this machine's GPU (``gsnb.toolchain``).
:func:`render` renders Gaussians with the CUDA rasterizer or the PyTorch reference;
:func:`render_splats` renders them as 3DGS stores them (log-scales, opacity logits, sh0/shN).
"""

from __future__ import annotations

from typing import Any

from gsnb.memory import estimate_peak_memory
from gsnb.raster import RenderMeta, RenderResult, render, render_splats
from gsnb.toolchain import build
from gsnb.version import __version__

__all__ = [
    "RenderMeta",
    "RenderResult",
    "__version__",
    "build",
    "estimate_peak_memory",
    "load_ipython_extension",
    "render",
    "render_splats",
]


def load_ipython_extension(ipython: Any) -> None:
    """Register gsnb's magics: ``%load_ext gsnb``."""
    from gsnb.notebook.magics import register_magics

    register_magics(ipython)
