"""Compiler flags of the rasterizer build, kept in one place (they are part of the cache key)."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

NVCC_FLAGS: tuple[str, ...] = ("-O3", "--use_fast_math", "--expt-relaxed-constexpr", "-lineinfo")
HOST_FLAGS_GCC: tuple[str, ...] = ("-O3",)
HOST_FLAGS_MSVC: tuple[str, ...] = ("/O2",)


@dataclass(frozen=True)
class Arch:
    """One target architecture: compute capability ``major.minor``, optionally with PTX.

    Example:
        >>> Arch.parse("9.0+PTX").gencode()
        ['-gencode=arch=compute_90,code=sm_90', '-gencode=arch=compute_90,code=compute_90']
    """

    major: int
    minor: int
    ptx: bool = False

    @property
    def sm(self) -> str:
        """``"90"`` for 9.0."""
        return f"{self.major}{self.minor}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + ("+PTX" if self.ptx else "")

    def gencode(self) -> list[str]:
        """nvcc ``-gencode`` flags: SASS for ``sm_XY``, and PTX ``compute_XY`` with ``+PTX``."""
        flags = [f"-gencode=arch=compute_{self.sm},code=sm_{self.sm}"]
        if self.ptx:
            flags.append(f"-gencode=arch=compute_{self.sm},code=compute_{self.sm}")
        return flags

    @classmethod
    def parse(cls, text: str) -> Arch:
        """Parse ``"9.0"``, ``"9.0+PTX"``, ``"sm_90"``, ``"compute_120"`` or ``"90"``."""
        value = text.strip()
        ptx = value.upper().endswith("+PTX")
        core = value[:-4] if ptx else value
        match = re.fullmatch(r"(\d+)\.(\d)", core) or re.fullmatch(
            r"(?:sm_|compute_)?(\d+?)(\d)", core
        )
        if match is None:
            raise ValueError(
                f"cannot read the GPU architecture {text!r}: write it as a compute "
                "capability like 9.0, 8.6+PTX or sm_120"
            )
        return cls(int(match.group(1)), int(match.group(2)), ptx)


def parse_arch_list(text: str) -> list[Arch]:
    """Parse ``"8.0,9.0"`` (commas, semicolons or spaces) into sorted, distinct :class:`Arch`.

    Example:
        >>> [str(a) for a in parse_arch_list("9.0; 8.0 9.0")]
        ['8.0', '9.0']
    """
    parts = [p for p in re.split(r"[,;\s]+", text.strip()) if p]
    if not parts:
        raise ValueError("empty architecture list: give one like --arch 9.0 or --arch 8.0,9.0")
    found: dict[tuple[int, int], Arch] = {}
    for part in parts:
        arch = Arch.parse(part)
        old = found.get((arch.major, arch.minor))
        found[(arch.major, arch.minor)] = Arch(
            arch.major, arch.minor, arch.ptx or bool(old and old.ptx)
        )
    return [found[k] for k in sorted(found)]


def torch_folder() -> Path | None:
    """The installed ``torch`` package's folder, found without importing torch (None without one).

    Example:
        >>> torch_folder().name
        'torch'
    """
    # find_spec of a top-level name locates the package without running its __init__.
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=4)
def cxx_standard(torch_include: Path | None = None) -> str:
    """The C++ standard to compile with: ``c++17``, or ``c++20`` where torch's headers demand it.

    torch 2.10 and later stop with ``#error C++20 or later compatible compiler is
    required`` under C++17, so the standard follows the installed torch.
    """
    if torch_include is None:
        folder = torch_folder()
        if folder is None:
            return "c++17"
        torch_include = folder / "include"
    header = torch_include / "ATen" / "ATen.h"
    try:
        text = header.read_text(errors="replace")[:4096]
    except OSError:
        return "c++17"
    return "c++20" if "202002L" in text else "c++17"


@dataclass(frozen=True)
class BuildFlags:
    """Every flag handed to the compilers, for ``archs`` on the host compiler family.

    Example:
        >>> f = BuildFlags.for_archs([Arch(9, 0)], msvc=False, std="c++17")
        >>> f.nvcc[-1], f.host
        ('-gencode=arch=compute_90,code=sm_90', ('-O3', '-std=c++17'))
    """

    nvcc: tuple[str, ...]
    host: tuple[str, ...]

    @classmethod
    def for_archs(cls, archs: list[Arch], *, msvc: bool, std: str | None = None) -> BuildFlags:
        std = std or cxx_standard()
        gencode = [flag for arch in archs for flag in arch.gencode()]
        nvcc = (*NVCC_FLAGS, f"-std={std}", *gencode)
        host = (*HOST_FLAGS_MSVC, f"/std:{std}") if msvc else (*HOST_FLAGS_GCC, f"-std={std}")
        return cls(nvcc=nvcc, host=host)
