"""The package version, in a module of its own so that subpackages can read it.

Example:
    >>> from gsnb._version import __version__
    >>> __version__.count(".")
    2
"""

__version__ = "0.1.0"
