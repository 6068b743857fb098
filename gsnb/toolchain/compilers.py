"""The compilers a build is made with, as they enter the cache key: nvcc and the host compilers.

A new nvcc or host compiler makes a new build: the key holds their versions
(``nvcc 13.0.88``, ``gcc 12.2.0``), found the same way discovery finds them. With a
:class:`~gsnb.toolchain.probes.ProbeMemo` on the host, finding them again costs a few
file reads and no process while the tools are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gsnb.toolchain import rules
from gsnb.toolchain.host import Host
from gsnb.toolchain.toolkit import Toolkit, choose_toolkit, find_toolkits
from gsnb.toolchain.tools import (
    Compiler,
    cxx_compiler,
    gcc_alternatives,
    nvcc_host_compiler,
    nvcc_version,
)


@dataclass(frozen=True)
class HostCompilers:
    """The host compiler nvcc would call and, when that gcc is too new, the ``gcc-N`` used instead.

    Attributes:
        default: the compiler nvcc calls by default (``NVCC_CCBIN``, ``CC`` or ``gcc``).
        alternative: a supported ``gcc-N`` the build uses instead, or None.
        limits: newest gcc and clang majors from the toolkit's ``host_config.h``.

    Example:
        >>> HostCompilers(None, None, (None, None)).used is None
        True
    """

    default: Compiler | None
    alternative: Compiler | None
    limits: tuple[int | None, int | None]

    @property
    def used(self) -> Compiler | None:
        """The compiler the build hands to nvcc."""
        return self.alternative or self.default


def host_compilers(
    host: Host, toolkit: Toolkit | None, nvcc: tuple[int, int, int] | None
) -> HostCompilers:
    """Find nvcc's host compiler and, if it is a gcc newer than nvcc accepts, a ``gcc-N`` that fits.

    Example:
        >>> host_compilers(Host(system="Linux", env={"PATH": ""}), None, None).used is None
        True
    """
    limits: tuple[int | None, int | None] = (None, None)
    if toolkit is not None:
        text = host.read_text(toolkit.include_dir / "crt" / "host_config.h", 200_000)
        limits = rules.limits_from_host_config(text) if text else limits
    compiler = nvcc_host_compiler(host)
    alternative = None
    if compiler is not None and compiler.kind == "gcc" and nvcc is not None:
        newest = limits[0] or rules.host_limits(nvcc).max_gcc
        if compiler.version[0] > newest:
            alternative = next(
                (c for c in gcc_alternatives(host) if 9 <= c.version[0] <= newest), None
            )
    return HostCompilers(compiler, alternative, limits)


def _named(compiler: Compiler | None) -> str | None:
    return None if compiler is None else f"{compiler.kind} {compiler.version_text}"


@dataclass(frozen=True)
class Toolchain:
    """Versions of the compilers a build uses; part of its cache key.

    Attributes:
        nvcc: ``"13.0.88"``, or None when no toolkit or no answer was found.
        host_compiler: the compiler nvcc hands host code to, ``"gcc 12.2.0"``, or None.
        cxx: the compiler of the ``.cpp`` files, or None.
        toolkit: the toolkit root (recorded, not part of the key).

    Example:
        >>> Toolchain("13.0.88", "gcc 12.2.0", "gcc 12.2.0").known
        True
        >>> str(Toolchain(None, "gcc 12.2.0", None))
        'nvcc ?, host compiler gcc 12.2.0, C++ compiler ?'
    """

    nvcc: str | None
    host_compiler: str | None
    cxx: str | None
    toolkit: Path | None = None

    @classmethod
    def of(
        cls,
        nvcc: tuple[int, int, int] | None,
        compilers: HostCompilers,
        cxx: Compiler | None,
        toolkit: Toolkit | None = None,
    ) -> Toolchain:
        """The toolchain of discovered parts (the ``.cpp`` files follow a ``gcc-N`` alternative)."""
        used = compilers.used
        return cls(
            nvcc=".".join(map(str, nvcc)) if nvcc else None,
            host_compiler=_named(used),
            cxx=_named(used if compilers.alternative is not None else cxx),
            toolkit=toolkit.root if toolkit else None,
        )

    @property
    def known(self) -> bool:
        """True when every compiler was found and answered (a build could start)."""
        return None not in (self.nvcc, self.host_compiler, self.cxx)

    def key(self) -> dict[str, str | None]:
        """What the cache key hashes: the versions only (the same compilers elsewhere match)."""
        return {"nvcc": self.nvcc, "host_compiler": self.host_compiler, "cxx": self.cxx}

    def __str__(self) -> str:
        return (
            f"nvcc {self.nvcc or '?'}, host compiler {self.host_compiler or '?'}, "
            f"C++ compiler {self.cxx or '?'}"
        )


def find_toolchain(host: Host, torch_cuda: str | None) -> Toolchain:
    """The toolchain a build on ``host`` would use, found as discovery finds it (no rules checked).

    Example:
        >>> import torch
        >>> tc = find_toolchain(Host.current(), torch.version.cuda)
        >>> tc.nvcc is None or tc.nvcc.count(".") == 2
        True
    """
    toolkit = choose_toolkit(find_toolkits(host), torch_cuda).toolkit
    nvcc = nvcc_version(toolkit.nvcc, host) if toolkit else None
    return Toolchain.of(nvcc, host_compilers(host, toolkit, nvcc), cxx_compiler(host), toolkit)
