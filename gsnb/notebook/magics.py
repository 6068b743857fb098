"""Registers gsnb's IPython magics (``%load_ext gsnb``).

Each feature keeps its magics in its own module of this package; this list
names them.
"""

from __future__ import annotations

import importlib
from typing import Any

# (module, Magics subclass) pairs registered by ``%load_ext gsnb``.
MAGICS: list[tuple[str, str]] = [
    ("gsnb.notebook.build_magics", "BuildMagics"),
    ("gsnb.notebook.export_magics", "ExportMagics"),
    ("gsnb.notebook.process_magics", "ProcessMagics"),
    ("gsnb.notebook.train_magics", "TrainMagics"),
]


def register_magics(ipython: Any) -> None:
    """Register every magics class of :data:`MAGICS` with ``ipython``."""
    for module, name in MAGICS:
        ipython.register_magics(getattr(importlib.import_module(module), name))
