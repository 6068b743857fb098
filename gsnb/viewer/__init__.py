"""Live 3D viewer on viser: training cameras, renders at the browser's camera, knobs, splats.

``Viewer`` needs the ``viewer`` extra (``pip install gsnb[viewer]``); viser is
imported only when a viewer starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Viewer", "ViewerPortError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gsnb.viewer import server

        return getattr(server, name)
    raise AttributeError(f"module 'gsnb.viewer' has no attribute {name!r}")
