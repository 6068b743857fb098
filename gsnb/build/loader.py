"""Import a compiled extension module from its file, by the name it was built with."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def load_module(name: str, library: Path) -> types.ModuleType:
    """Import the extension ``name`` from ``library`` (once per process; later calls reuse it).

    torch is imported first so the libraries the module links against are loaded.

    Raises:
        ImportError: the loader's own message (``undefined symbol: ...``,
            ``cannot open shared object file``, ...), for :func:`~gsnb.build.catalogue.recognise`.

    Example:
        >>> load_module("math", __import__("pathlib").Path("unused")).__name__
        'math'
    """
    if name in sys.modules:
        return sys.modules[name]
    import torch  # noqa: F401  (loads libc10, libtorch and the CUDA runtime first)

    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}: not an extension module file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
