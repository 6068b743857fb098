"""Notebook layer: IPython magics, the training panel and plotly figures.

``TrainingPanel`` is imported on first use, so ``%load_ext gsnb`` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainingPanel"]


def __getattr__(name: str) -> Any:
    if name == "TrainingPanel":
        from gsnb.notebook.panel import TrainingPanel

        return TrainingPanel
    raise AttributeError(f"module 'gsnb.notebook' has no attribute {name!r}")
