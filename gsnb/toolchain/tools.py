"""Ask the build tools for their versions: nvcc, the host C++ compilers, ninja."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gsnb.toolchain.host import Host

_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)(?:, V(\d+)\.(\d+)\.(\d+))?")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def nvcc_version(nvcc: Path, host: Host) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from ``nvcc --version``, or None when it cannot say.

    Example:
        >>> nvcc_version(Path("/nonexistent/nvcc"), Host.current()) is None
        True
    """
    answer = host.probe([str(nvcc), "--version"])
    if answer is None:
        return None
    match = _NVCC_RELEASE.search(answer[1])
    if match is None:
        return None
    if match.group(3):
        return int(match.group(3)), int(match.group(4)), int(match.group(5))
    return int(match.group(1)), int(match.group(2)), 0


@dataclass(frozen=True)
class Compiler:
    """A host C/C++ compiler.

    Attributes:
        path: the executable.
        kind: ``"gcc"``, ``"clang"``, ``"msvc"`` or ``"unknown"``.
        version: ``(major, minor, patch)``; ``(0, 0, 0)`` when unknown.
        found_by: where it came from (``"CC"``, ``"PATH"``, ...).
        banner: the first line it printed about itself.
    """

    path: Path
    kind: str
    version: tuple[int, int, int]
    found_by: str
    banner: str = ""

    @property
    def version_text(self) -> str:
        """``"12.2.0"``."""
        return ".".join(map(str, self.version))

    def __str__(self) -> str:
        return f"{self.kind} {self.version_text} ({self.path})"


def probe_compiler(path: Path, host: Host, found_by: str) -> Compiler | None:
    """Identify the compiler at ``path`` from its ``--version`` banner.

    Example:
        >>> probe_compiler(Path("/nonexistent/gcc"), Host.current(), "PATH") is None
        True
    """
    answer = host.probe([str(path), "--version"])
    if answer is None or not answer[1].strip():
        return None
    text = answer[1]
    first = text.strip().splitlines()[0]
    lowered = text.lower()
    if "clang" in lowered:
        kind = "clang"
    elif "free software foundation" in lowered or re.search(r"\b(gcc|g\+\+)\b", first.lower()):
        kind = "gcc"
    else:
        kind = "unknown"
    numbers = _VERSION.findall(first if kind == "gcc" else text)
    chosen = numbers[-1] if kind == "gcc" and numbers else (numbers[0] if numbers else None)
    version = (0, 0, 0) if chosen is None else tuple(int(n or 0) for n in chosen)
    return Compiler(path, kind, version, found_by, first)  # type: ignore[arg-type]


def _resolve(name: str, host: Host) -> Path | None:
    parts = name.split()
    return host.which(parts[0]) if parts else None


_MSVC = re.compile(r"Compiler Version (\d+)\.(\d+)\.(\d+)(?:\.\d+)? for (\w+)")


def probe_msvc(path: Path, host: Host, found_by: str) -> Compiler | None:
    """Identify ``cl.exe`` from the banner it prints when run without arguments.

    ``kind`` is ``"msvc"`` for the x64 compiler and ``"msvc-x86"`` (or the target
    named) for a compiler that builds other targets.
    """
    answer = host.probe([str(path)])
    match = _MSVC.search(answer[1]) if answer else None
    if match is None:
        return None
    target = match.group(4).lower()
    kind = "msvc" if target == "x64" else f"msvc-{target}"
    version = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
    return Compiler(path, kind, version, found_by, match.group(0))


def vswhere_cl(host: Host) -> Path | None:
    """The newest x64 ``cl.exe`` of a Visual Studio installation found by ``vswhere.exe``."""
    for program_files in host.program_files():
        vswhere = program_files / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
        if not vswhere.is_file():
            continue
        answer = host.run(
            [str(vswhere), "-latest", "-products", "*", "-requires",
             "Microsoft.VisualStudio.Component.VC.Tools.x86.x64", "-property", "installationPath"]
        )  # fmt: skip
        if answer is None or answer[0] != 0 or not answer[1].strip():
            continue
        install = Path(answer[1].strip().splitlines()[0].strip())
        tools = sorted((install / "VC" / "Tools" / "MSVC").glob("*"), key=lambda p: p.name)
        for folder in reversed(tools):
            cl = folder / "bin" / "Hostx64" / "x64" / "cl.exe"
            if cl.is_file():
                return cl
    return None


def msvc_compiler(host: Host) -> Compiler | None:
    """``cl.exe`` from ``PATH`` (a Developer Command Prompt), else found through vswhere."""
    on_path = host.which("cl")
    if on_path is not None:
        return probe_msvc(on_path, host, "PATH")
    found = vswhere_cl(host)
    return None if found is None else probe_msvc(found, host, "vswhere")


def nvcc_host_compiler(host: Host) -> Compiler | None:
    """The host compiler nvcc will call: ``cl.exe`` on Windows; elsewhere ``NVCC_CCBIN``,
    else ``CC`` (torch passes it as ``-ccbin``), else ``gcc`` from ``PATH``."""
    if host.windows:
        return msvc_compiler(host)
    for var in ("NVCC_CCBIN", "CC"):
        value = host.env.get(var)
        if value:
            path = _resolve(value, host) or (Path(value) if Path(value).is_file() else None)
            if path is not None:
                return probe_compiler(path, host, var)
    path = host.which("gcc")
    return None if path is None else probe_compiler(path, host, "PATH")


def cxx_compiler(host: Host) -> Compiler | None:
    """The compiler torch uses for ``.cpp`` files: ``CXX``, else ``c++`` (``cl.exe`` on Windows)."""
    if host.windows:
        return msvc_compiler(host)
    name = host.env.get("CXX") or "c++"
    path = _resolve(name, host)
    return (
        None
        if path is None
        else probe_compiler(path, host, "CXX" if host.env.get("CXX") else "PATH")
    )


def gcc_alternatives(host: Host) -> list[Compiler]:
    """Versioned ``gcc-N`` on ``PATH`` that have a matching ``g++-N``, newest first."""
    found: dict[int, Compiler] = {}
    for folder in host.path_dirs():
        for gcc in folder.glob("gcc-[0-9]*"):
            if (
                not re.fullmatch(r"gcc-\d+", gcc.name)
                or not (folder / f"g++-{gcc.name[4:]}").is_file()
            ):
                continue
            compiler = probe_compiler(gcc, host, "PATH")
            if compiler is not None and compiler.kind == "gcc":
                found.setdefault(compiler.version[0], compiler)
    return [found[k] for k in sorted(found, reverse=True)]


@dataclass(frozen=True)
class Ninja:
    """The ninja build tool.

    Attributes:
        path: the executable.
        version: its ``--version`` output.
        on_path: False when found only in this Python's scripts folder, where the
            ``ninja`` package puts it (gsnb then adds that folder to ``PATH`` for the build).
    """

    path: Path
    version: str
    on_path: bool


def find_ninja(host: Host) -> Ninja | None:
    """ninja from ``PATH``, else from this Python's scripts folder (``pip install ninja``)."""
    candidates: list[tuple[Path, bool]] = []
    on_path = host.which("ninja")
    if on_path is not None:
        candidates.append((on_path, True))
    if host.scripts_dir is not None:
        candidates.append((host.scripts_dir / host.exe("ninja"), False))
    for path, is_on_path in candidates:
        answer = host.probe([str(path), "--version"]) if path.is_file() else None
        if answer is not None and answer[0] == 0:
            return Ninja(
                path, answer[1].strip().splitlines()[0] if answer[1].strip() else "?", is_on_path
            )
    return None


def shared_cxx_runtime(host: Host, compiler: Path) -> Path | None:
    """The shared ``libstdc++.so.6`` to link against when ``compiler`` would link its C++
    runtime statically, else None.

    A g++ whose own folders hold only ``libstdc++.a`` (some prebuilt toolchains) links a
    private copy of the C++ runtime into the extension. That copy then runs beside the
    ``libstdc++`` this Python process has loaded, and formatting an error message (a C++
    ``ostream``) crashes the process instead of raising. Linking the process's own shared
    runtime (a newer one accepts code built by an older g++) avoids the second copy.

    Example:
        >>> shared_cxx_runtime(Host.current(), Path("/nonexistent/g++")) is None
        True
    """
    if host.windows:
        return None
    answer = host.probe([str(compiler), "-print-file-name=libstdc++.so"])
    if answer is None or answer[0] != 0:
        return None
    found = answer[1].strip()
    if os.path.isabs(found) and os.path.exists(found):
        return None  # g++ links the shared runtime by itself
    static = host.probe([str(compiler), "-print-file-name=libstdc++.a"])
    if static is None or not os.path.isabs(static[1].strip()):
        return None  # no C++ runtime of its own at all: nothing to correct
    return loaded_libstdcxx(host.proc / "self" / "maps")


def loaded_libstdcxx(maps: Path = Path("/proc/self/maps")) -> Path | None:
    """The ``libstdc++.so`` this process has loaded (torch loads one), from ``/proc/self/maps``.

    Example:
        >>> path = loaded_libstdcxx()
        >>> path is None or "libstdc++" in path.name
        True
    """
    try:
        text = maps.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name = line.split()[-1] if line.split() else ""
        if "/libstdc++.so" in name and os.path.exists(name):
            return Path(name)
    return None
