"""gsnb's version, importable without the renderer or the toolchain (``gsnb --version``)."""

__version__ = "0.1.0"
