"""gsnb: 3D Gaussian Splatting from a Jupyter notebook.

``%load_ext gsnb`` registers the notebook magics (``%gs_build``, ``%gs_doctor``, ...).
:func:`build` builds the CUDA rasterizer for this machine's GPU (``gsnb.toolchain``).
:func:`render` renders Gaussians with the CUDA rasterizer or the PyTorch reference;
:func:`render_splats` renders them as 3DGS stores them (log-scales, opacity logits, sh0/shN).

The names load on first use, so ``import gsnb`` (and ``gsnb build`` when the build is
already cached) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# First: gsnb.cpu sets OMP_WAIT_POLICY before anything loads torch and OpenMP.
from gsnb import cpu as _cpu  # noqa: F401
from gsnb._version import __version__
from gsnb.toolchain.smoke import set_render_check

if TYPE_CHECKING:
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

# name -> the module that defines it
_LAZY = {
    "RenderMeta": "gsnb.raster",
    "RenderResult": "gsnb.raster",
    "render": "gsnb.raster",
    "render_splats": "gsnb.raster",
    "estimate_peak_memory": "gsnb.memory",
    "build": "gsnb.toolchain",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'gsnb' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)  # what tab-completion offers: the public names, loaded or not


def _render_check() -> tuple[float, bool]:
    # The toolchain smoke-tests every build with the renderer it builds; the renderer (and
    # torch) load only when a test runs. Importing gsnb.raster hands its own check over.
    from gsnb.raster.smoke import compare_backends

    return compare_backends()


set_render_check(_render_check)


def load_ipython_extension(ipython: Any) -> None:
    """Register gsnb's magics: ``%load_ext gsnb``."""
    from gsnb.notebook.magics import register_magics

    register_magics(ipython)
