"""Helpers for the build tests: fake tools and toolkit trees in temporary folders."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from gsnb.toolchain.host import Host

REAL_NVCC = shutil.which("nvcc")


def fake_exe(folder: Path, name: str, output: str, code: int = 0) -> Path:
    """A shell script ``folder/name`` printing ``output`` and exiting with ``code``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    text = output.replace("'", "'\"'\"'")
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{text}'\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def nvcc_banner(version: str, build: str = "77") -> str:
    """What ``nvcc --version`` prints for ``version`` (``"12.6"``)."""
    return (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Copyright (c) 2005-2025 NVIDIA Corporation\n"
        f"Cuda compilation tools, release {version}, V{version}.{build}\n"
        f"Build cuda_{version}.r{version}/compiler.0_0"
    )


def fake_toolkit(
    root: Path,
    version: str = "13.0",
    *,
    lib: str = "lib64",
    include: str = "include",
    windows: bool = False,
    unversioned: bool = True,
) -> Path:
    """A toolkit tree: ``bin/nvcc`` printing ``version``, headers and a cudart library."""
    major, minor = (int(x) for x in version.split("."))
    nvcc = "nvcc.exe" if windows else "nvcc"
    fake_exe(root / "bin", nvcc, nvcc_banner(version))
    (root / include).mkdir(parents=True, exist_ok=True)
    (root / include / "cuda_runtime.h").write_text("// fake\n")
    (root / include / "cuda_runtime_api.h").write_text(
        f"#define CUDART_VERSION {major * 1000 + minor * 10}\n"
    )
    libdir = root / lib
    libdir.mkdir(parents=True, exist_ok=True)
    if windows:
        (libdir / "cudart.lib").write_text("")
    else:
        (libdir / f"libcudart.so.{major}").write_text("")
        if unversioned:
            (libdir / "libcudart.so").write_text("")
    return root


def make_host(tmp_path: Path, env: dict[str, str] | None = None, **kwargs: object) -> Host:
    """A Linux host whose fixed places all lie under ``tmp_path`` (nothing real leaks in)."""
    (tmp_path / "usr_local").mkdir(exist_ok=True)
    defaults: dict[str, object] = {
        "system": "Linux",
        "env": {"PATH": str(tmp_path / "empty-bin"), **(env or {})},
        "usr_local": tmp_path / "usr_local",
        "proc": tmp_path / "proc",
        "dev_shm": tmp_path / "shm",
        "site_packages": (),
        "scripts_dir": None,
    }
    defaults.update(kwargs)
    return Host(**defaults)  # type: ignore[arg-type]


@pytest.fixture
def host_factory(tmp_path: Path):
    """``host_factory(env=..., **fields)`` -> a :class:`Host` rooted in ``tmp_path``."""
    return lambda env=None, **kw: make_host(tmp_path, env, **kw)


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The helpers above as ``fakes.exe``, ``.toolkit``, ``.banner`` and ``.path_with``."""
    return SimpleNamespace(
        exe=fake_exe, toolkit=fake_toolkit, banner=nvcc_banner, path_with=path_with
    )


def path_with(*folders: Path) -> str:
    """A PATH value of ``folders`` followed by the real PATH."""
    return os.pathsep.join([*(str(f) for f in folders), os.environ.get("PATH", "")])
