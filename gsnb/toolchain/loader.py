"""Import a compiled extension module from its file, by the name it was built with."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterable
from pathlib import Path


def dll_directories(toolkit_root: str | Path | None) -> list[Path]:
    """Folders Windows must search for the module's DLLs: torch's ``lib`` and the toolkit's
    ``bin`` (and ``bin\\x64``, where CUDA 13 keeps them).

    Example:
        >>> dll_directories(None)[0].name
        'lib'
    """
    import torch

    folders = [Path(torch.__file__).parent / "lib"]
    if toolkit_root:
        root = Path(toolkit_root)
        folders += [root / "bin", root / "bin" / "x64"]
    return [f for f in folders if f.is_dir()] or folders[:1]


def add_dll_directories(folders: Iterable[Path]) -> None:
    """``os.add_dll_directory`` for each folder (Windows only; nothing elsewhere)."""
    if hasattr(os, "add_dll_directory"):
        for folder in folders:
            with contextlib.suppress(OSError):
                os.add_dll_directory(str(folder))


def load_module(name: str, library: Path, dll_dirs: Iterable[Path] = ()) -> types.ModuleType:
    """Import the extension ``name`` from ``library`` (once per process; later calls reuse it).

    torch is imported first so the libraries the module links against are loaded.
    On Windows, ``dll_dirs`` are added with ``os.add_dll_directory`` first: since
    Python 3.8 ``PATH`` is not searched, and an older CUDA on ``PATH`` would win.

    Raises:
        ImportError: the loader's own message (``undefined symbol: ...``,
            ``cannot open shared object file``, ...), for
            :func:`~gsnb.toolchain.catalogue.recognise`.

    Example:
        >>> load_module("math", __import__("pathlib").Path("unused")).__name__
        'math'
    """
    if name in sys.modules:
        return sys.modules[name]
    import torch  # noqa: F401  (loads libc10, libtorch and the CUDA runtime first)

    add_dll_directories(dll_dirs)
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}: not an extension module file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
