"""gsnb: 3D Gaussian Splatting from a Jupyter notebook.

``%load_ext gsnb`` registers the notebook magics (``%gs_build``, ``%gs_doctor``, ...).
:func:`build` builds the CUDA rasterizer for this machine's GPU (``gsnb.toolchain``).
:func:`render` renders Gaussians with the CUDA rasterizer or the PyTorch reference;
:func:`render_splats` renders them as 3DGS stores them (log-scales, opacity logits, sh0/shN).
"""

from __future__ import annotations

from typing import Any

# First: gsnb.cpu sets OMP_WAIT_POLICY before the imports below load torch and OpenMP.
from gsnb import cpu as _cpu  # noqa: F401
from gsnb._version import __version__
from gsnb.memory import estimate_peak_memory
from gsnb.raster import RenderMeta, RenderResult, render, render_splats
from gsnb.toolchain import build

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
