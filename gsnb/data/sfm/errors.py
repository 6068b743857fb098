"""The errors of ``gsnb process``: each message names the problem and what to do."""

from __future__ import annotations

from types import ModuleType

INSTALL_HINT = 'pip install "gsnb[sfm]"'


class ProcessError(Exception):
    """Input that structure from motion cannot turn into a dataset (the message says why).

    Example:
        >>> str(ProcessError("no images in photos/"))
        'no images in photos/'
    """


class MissingPycolmap(ProcessError):
    """pycolmap, the structure-from-motion library, is not installed."""


def require_pycolmap() -> ModuleType:
    """The ``pycolmap`` module, or ``MissingPycolmap`` naming the install command.

    Example:
        >>> require_pycolmap().__name__  # doctest: +SKIP
        'pycolmap'
    """
    try:
        import pycolmap
    except ImportError:
        raise MissingPycolmap(
            f"gsnb process needs pycolmap, which is not installed: {INSTALL_HINT}"
        ) from None
    return pycolmap
