"""Compile an extension with torch's JIT builder, under the toolchain gsnb discovered.

torch reads the toolkit root into the module global ``torch.utils.cpp_extension.CUDA_HOME``
when it is first imported (guessing ``/usr/local`` when ``nvcc`` on ``PATH`` is a wrapper
script), and the job count from ``MAX_JOBS``. :func:`torch_build_environment` sets both,
and ``PATH``/``CC``/``CXX`` where needed, for the length of one build and restores them.
ninja's output is read live from file descriptor 1 for the progress bar and the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path


def cpp_extension() -> types.ModuleType:
    """``torch.utils.cpp_extension``, imported without its misleading toolkit-guess warning."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import torch.utils.cpp_extension as module
    finally:
        logger.setLevel(level)
    return module


@contextlib.contextmanager
def torch_build_environment(cuda_home: Path, env: Mapping[str, str]) -> Iterator[types.ModuleType]:
    """Point torch's builder at ``cuda_home`` and set ``env`` in ``os.environ``; undo on exit.

    Example:
        >>> import os, pathlib
        >>> with torch_build_environment(pathlib.Path("/opt/cuda"), {"MAX_JOBS": "3"}) as ce:
        ...     ce.CUDA_HOME, os.environ["MAX_JOBS"]
        ('/opt/cuda', '3')
    """
    module = cpp_extension()
    saved_home = module.CUDA_HOME
    saved_env = {key: os.environ.get(key) for key in env}
    module.CUDA_HOME = str(cuda_home)
    os.environ.update(env)
    try:
        yield module
    finally:
        module.CUDA_HOME = saved_home
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def stdout_lines(on_line: Callable[[str], None]) -> Iterator[None]:
    """Send everything written to file descriptor 1 (child processes too) to ``on_line``."""
    sys.stdout.flush()
    read_fd, write_fd = os.pipe()
    saved = os.dup(1)
    os.dup2(write_fd, 1)
    os.close(write_fd)

    def pump() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                on_line(raw.decode(errors="replace").rstrip("\r\n"))

    reader = threading.Thread(target=pump, name="gsnb-build-output", daemon=True)
    reader.start()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        reader.join(timeout=30)


@dataclass
class JitRequest:
    """One compilation for torch's builder.

    Attributes:
        name: the module name (``TORCH_EXTENSION_NAME``).
        sources: ``.cu`` and ``.cpp`` files.
        build_dir: where ninja writes objects and the module.
        cuda_home: toolkit root handed to torch.
        nvcc_flags: flags for nvcc, ``-gencode`` included.
        host_flags: flags for the host compiler.
        include_dirs: extra ``-I`` folders.
        ldflags: extra linker flags.
        env: environment for the build (``MAX_JOBS``, ``PATH``, ``CC``, ...).
    """

    name: str
    sources: list[Path]
    build_dir: Path
    cuda_home: Path
    nvcc_flags: list[str]
    host_flags: list[str]
    include_dirs: list[Path] = field(default_factory=list)
    ldflags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def compile_module(request: JitRequest, on_line: Callable[[str], None]) -> types.ModuleType:
    """Build and import ``request``'s module; compiler output goes to ``on_line``.

    Raises:
        RuntimeError: the build failed (torch's message; the output went to ``on_line``).
    """
    with torch_build_environment(request.cuda_home, request.env) as module:
        # A name is built once per process in torch's bookkeeping; forget it to build again.
        module.JIT_EXTENSION_VERSIONER.entries.pop(request.name, None)
        with stdout_lines(on_line):
            return module.load(
                name=request.name,
                sources=[str(s) for s in request.sources],
                extra_cflags=list(request.host_flags),
                extra_cuda_cflags=list(request.nvcc_flags),
                extra_ldflags=list(request.ldflags),
                extra_include_paths=[str(p) for p in request.include_dirs],
                build_directory=str(request.build_dir),
                verbose=True,
                with_cuda=True,
            )
