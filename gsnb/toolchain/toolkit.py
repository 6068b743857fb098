"""Find the CUDA toolkit: a root that really holds ``nvcc``, ``cuda_runtime.h`` and ``libcudart``.

The search follows symbolic links and small wrapper scripts (``exec /opt/cuda/bin/nvcc
"$@"``) to the real compiler, so a wrapper in ``/usr/local/bin`` does not make the root
``/usr/local``. Every place is looked at in order; when several toolkits are found, the
one whose major version equals torch's CUDA major wins, and the others are named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gsnb.toolchain.host import Host

_WRAPPER_TARGET = re.compile(
    r"""(?:^|[\s"'=])((?:/|[A-Za-z]:[\\/])[^\s"'`;|&<>]*?[\\/]nvcc(?:\.exe)?)(?=["'\s;]|$)"""
)
_CUDART_VERSION = re.compile(r"#define\s+CUDART_VERSION\s+(\d+)")


@dataclass(frozen=True)
class Toolkit:
    """A usable CUDA toolkit.

    Attributes:
        root: the folder handed to torch as ``CUDA_HOME``.
        nvcc: the real ``nvcc`` executable (wrappers and links followed).
        include_dir: the folder holding ``cuda_runtime.h``.
        lib_dir: the folder holding ``libcudart`` (``cudart.lib`` on Windows).
        version: ``(major, minor)`` read from ``cuda_runtime_api.h``, or None.
        found_by: how it was found (``"CUDA_HOME"``, ``"nvcc on PATH"``, ...).

    Example:
        >>> from gsnb.toolchain.host import Host
        >>> tk = find_toolkits(Host.current()).toolkits
        >>> all(t.nvcc.name.startswith("nvcc") for t in tk)
        True
    """

    root: Path
    nvcc: Path
    include_dir: Path
    lib_dir: Path
    version: tuple[int, int] | None
    found_by: str

    @property
    def version_text(self) -> str:
        """``"13.0"``, or ``"unknown"``."""
        return "unknown" if self.version is None else f"{self.version[0]}.{self.version[1]}"

    def unversioned_cudart(self) -> bool:
        """True when ``-lcudart`` can link (``libcudart.so`` or ``cudart.lib`` exists)."""
        return (self.lib_dir / "libcudart.so").exists() or (self.lib_dir / "cudart.lib").exists()


@dataclass
class ToolkitSearch:
    """Everything the search saw.

    Attributes:
        toolkits: usable toolkits in search order (duplicates removed).
        rejected: ``(how found, folder, why not usable)`` for places that looked like
            a toolkit but are not one.
        searched: the places looked at, in order, for messages.
    """

    toolkits: list[Toolkit] = field(default_factory=list)
    rejected: list[tuple[str, Path, str]] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolkitChoice:
    """The toolkit to build with and why.

    Attributes:
        toolkit: the chosen toolkit, or None when none is usable.
        reason: one sentence saying why this one.
        others: the other usable toolkits found.
    """

    toolkit: Toolkit | None
    reason: str
    others: tuple[Toolkit, ...] = ()


def follow_nvcc(path: Path, host: Host, depth: int = 0) -> Path:
    """The real ``nvcc`` behind ``path``: symbolic links resolved, wrapper scripts read.

    Example:
        >>> import tempfile, pathlib, os
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / "real").mkdir(); (d / "real" / "nvcc").write_text("")
        0
        >>> _ = (d / "nvcc").write_text(f'#!/bin/sh\\nexec {d}/real/nvcc "$@"\\n')
        >>> follow_nvcc(d / "nvcc", Host.current()) == (d / "real" / "nvcc").resolve()
        True
    """
    try:
        real = path.resolve()
    except OSError:
        return path
    if depth >= 4:
        return real
    try:
        with open(real, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return real
    if not head.startswith(b"#!") and real.suffix.lower() not in (".bat", ".cmd"):
        return real
    text = head.decode(errors="replace")
    for match in _WRAPPER_TARGET.finditer(text):
        target = Path(match.group(1))
        if target.is_file() and target.resolve() != real:
            return follow_nvcc(target, host, depth + 1)
    return real


def _first_with(folders: list[Path], names: tuple[str, ...]) -> Path | None:
    for folder in folders:
        for name in names:
            if any(folder.glob(name)):
                return folder
    return None


def _targets(root: Path, leaf: str) -> list[Path]:
    return sorted((root / "targets").glob(f"*/{leaf}")) if (root / "targets").is_dir() else []


def inspect_root(root: Path, host: Host, found_by: str, nvcc: Path | None = None) -> Toolkit | str:
    """A :class:`Toolkit` for ``root``, or a sentence saying what it lacks.

    ``nvcc`` overrides ``root/bin/nvcc`` (pip wheels keep the compiler apart).
    """
    if not root.is_dir():
        return f"{root} does not exist"
    nvcc = nvcc or root / "bin" / host.exe("nvcc")
    if not nvcc.is_file():
        return f"{root} has no bin/{host.exe('nvcc')}"
    includes = [root / "include", *_targets(root, "include")]
    include_dir = _first_with(includes, ("cuda_runtime.h",))
    if include_dir is None:
        return f"{root} has no include/cuda_runtime.h"
    if host.windows:
        libs, names = [root / "lib" / "x64", root / "lib"], ("cudart.lib",)
    else:
        libs = [root / "lib64", root / "lib", *_targets(root, "lib")]
        names = ("libcudart.so*",)
    lib_dir = _first_with(libs, names)
    if lib_dir is None:
        where = "lib/x64/cudart.lib" if host.windows else "lib64/libcudart.so"
        return f"{root} has no {where}"
    return Toolkit(root, nvcc, include_dir, lib_dir, header_version(include_dir, host), found_by)


def header_version(include_dir: Path, host: Host) -> tuple[int, int] | None:
    """``(major, minor)`` from ``CUDART_VERSION`` in ``cuda_runtime_api.h`` (no process started)."""
    text = host.read_text(include_dir / "cuda_runtime_api.h", 400_000) or ""
    match = _CUDART_VERSION.search(text)
    if match is None:
        return None
    number = int(match.group(1))
    return number // 1000, (number % 1000) // 10


def _version_key(path: Path) -> tuple[int, ...]:
    digits = re.findall(r"\d+", path.name)
    return tuple(int(d) for d in digits) or (0,)


def _windows_roots(host: Host) -> list[tuple[str, Path, Path | None]]:
    """``CUDA_PATH_V<major>_<minor>`` variables and ``Program Files\\...\\CUDA\\v*`` folders."""
    found: list[tuple[str, Path, Path | None]] = []
    versioned = [k for k in host.env if re.fullmatch(r"CUDA_PATH_V\d+_\d+", k, flags=re.IGNORECASE)]
    for var in sorted(
        versioned, key=lambda k: _version_key(Path(k.replace("_", "."))), reverse=True
    ):
        found.append((var.upper(), Path(host.env[var]), None))
    for program_files in host.program_files():
        base = program_files / "NVIDIA GPU Computing Toolkit" / "CUDA"
        for root in sorted(base.glob("v*"), key=_version_key, reverse=True):
            found.append((str(root), root, None))
    return found


def off_by_one(root: Path, host: Host) -> Path | None:
    """The toolkit root next to ``root`` when ``root`` is one folder off (its parent or a child)."""
    for near in (root.parent, *sorted(root.glob("v*"), key=_version_key, reverse=True)):
        if near != root and isinstance(inspect_root(near, host, ""), Toolkit):
            return near
    return None


def _candidates(host: Host) -> list[tuple[str, Path, Path | None]]:
    """``(how found, root, nvcc or None)`` in search order."""
    found: list[tuple[str, Path, Path | None]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if host.env.get(var):
            found.append((var, Path(host.env[var]), None))
    if host.windows:
        found += _windows_roots(host)
    on_path = host.which("nvcc")
    if on_path is not None:
        real = follow_nvcc(on_path, host)
        how = "nvcc on PATH" if real == on_path.resolve() else f"nvcc on PATH ({on_path} -> {real})"
        found.append((how, real.parent.parent, real))
    if not host.windows:
        found.append(("/usr/local/cuda", host.usr_local / "cuda", None))
        versioned = sorted(host.usr_local.glob("cuda-*"), key=_version_key, reverse=True)
        found += [(str(p), p, None) for p in versioned]
    if host.env.get("CONDA_PREFIX"):
        prefix = Path(host.env["CONDA_PREFIX"])
        found.append(("conda environment", prefix / "Library" if host.windows else prefix, None))
    for site in host.site_packages:
        nvidia = site / "nvidia"
        for wheel in sorted(nvidia.glob("cu[0-9]*"), key=_version_key, reverse=True):
            found.append((f"pip wheel nvidia/{wheel.name}", wheel, None))
        nvcc = nvidia / "cuda_nvcc" / "bin" / host.exe("nvcc")
        if nvcc.is_file():
            found.append(("pip wheel nvidia-cuda-nvcc", nvidia / "cuda_runtime", nvcc))
    return found


def find_toolkits(host: Host) -> ToolkitSearch:
    """Look at every place a CUDA toolkit may live, in order.

    Order: ``CUDA_HOME`` / ``CUDA_PATH``; on Windows ``CUDA_PATH_V*_*`` and
    ``Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v*``; ``nvcc`` on ``PATH``
    (links and wrappers followed); ``/usr/local/cuda`` and ``/usr/local/cuda-*``; the
    active conda environment; the pip wheels ``nvidia-cuda-nvcc`` / ``nvidia-cuda-runtime``.

    Example:
        >>> search = find_toolkits(Host.current())
        >>> isinstance(search.searched, list)
        True
    """
    search = ToolkitSearch()
    seen: set[Path] = set()
    for how, root, nvcc in _candidates(host):
        search.searched.append(f"{how}: {root}")
        result = inspect_root(root, host, how, nvcc)
        if isinstance(result, str):
            if how.startswith(("CUDA_HOME", "CUDA_PATH")):
                near = off_by_one(root, host)
                if near is not None:
                    result = f"{root} is one folder off the toolkit root {near}"
            if how.startswith(("CUDA_HOME", "CUDA_PATH")) or root.exists():
                search.rejected.append((how, root, result))
            continue
        key = result.nvcc.resolve()
        if key not in seen:
            seen.add(key)
            search.toolkits.append(result)
    return search


def choose_toolkit(search: ToolkitSearch, torch_cuda: str | None) -> ToolkitChoice:
    """Pick the toolkit to build with: the first whose major equals torch's CUDA major.

    Example:
        >>> choose_toolkit(ToolkitSearch(), "13.0").toolkit is None
        True
    """
    if not search.toolkits:
        return ToolkitChoice(None, "no usable CUDA toolkit was found")
    first = search.toolkits[0]
    want = int(torch_cuda.split(".")[0]) if torch_cuda else None
    chosen = first
    if want is not None:
        matching = [t for t in search.toolkits if t.version and t.version[0] == want]
        if matching:
            chosen = matching[0]
    others = tuple(t for t in search.toolkits if t is not chosen)
    if want is None:
        reason = f"first toolkit found ({chosen.found_by}); torch has no CUDA version to match"
    elif chosen.version and chosen.version[0] == want:
        reason = f"its major version {want} matches torch's CUDA {torch_cuda}"
        if chosen is not first:
            reason += f" ({first.version_text} at {first.root} was found first but does not)"
    else:
        reason = f"no toolkit of major {want} (torch's CUDA {torch_cuda}) found; first found"
    if others:
        reason += "; also found: " + ", ".join(f"{t.version_text} at {t.root}" for t in others)
    return ToolkitChoice(chosen, reason, others)


def torch_guess(host: Host) -> Path | None:
    """The root torch's own search would pick (``CUDA_HOME``, ``nvcc``'s grandparent, ...).

    torch does not follow wrapper scripts, so ``/usr/local/bin/nvcc`` makes it guess
    ``/usr/local``.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if host.env.get(var):
            return Path(host.env[var])
    on_path = host.which("nvcc")
    if on_path is not None:
        return on_path.parent.parent
    if host.windows:
        for program_files in host.program_files()[:1]:
            roots = sorted((program_files / "NVIDIA GPU Computing Toolkit" / "CUDA").glob("v*.*"))
            return roots[0] if roots else None
        return None
    default = host.usr_local / "cuda"
    return default if default.exists() else None
