"""Where a build lives and whether the cache holds it, decided without torch or any process.

:func:`plan_for` computes a build's cache key from the sources, flags, architectures,
torch and CUDA versions and the toolchain; :func:`find_cached` finds the cached build
that key (or, for GPU-derived targets, a compatible one) names. Both take torch's
versions and the GPUs as arguments, so the same decision is made by a full build
(:mod:`gsnb.toolchain.builder`, from torch) and by the warm check of ``gsnb build``
(:mod:`gsnb.toolchain.warm`, from the installed files and NVML).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from gsnb.toolchain.cache import (
    CachedBuild,
    build_key,
    compatible_builds,
    complete_build,
    fingerprint,
    module_name,
)
from gsnb.toolchain.compilers import Toolchain
from gsnb.toolchain.flags import Arch, BuildFlags, parse_arch_list
from gsnb.toolchain.gpus import GPU
from gsnb.toolchain.host import Host

PREFIX = "gsnb_csrc"


def resolve_archs(arch: str | list[str] | None, gpus: list[GPU]) -> tuple[list[Arch], bool]:
    """Target architectures: ``arch`` when given (``"8.0,9.0"``), else those of ``gpus``.

    Returns the architectures and whether they were given explicitly.

    Example:
        >>> [str(a) for a in resolve_archs("9.0+PTX", [])[0]]
        ['9.0+PTX']
    """
    if arch is None or (isinstance(arch, str) and not arch.strip()):
        caps = sorted({gpu.capability for gpu in gpus})
        return [Arch(major, minor) for major, minor in caps], False
    text = arch if isinstance(arch, str) else ",".join(arch)
    return parse_arch_list(text), True


def flags_payload(flags: BuildFlags) -> dict[str, list[str]]:
    """The flags as hashed into the fingerprint (``-gencode`` flags are keyed separately)."""
    return {
        "nvcc": [f for f in flags.nvcc if not f.startswith("-gencode")],
        "host": list(flags.host),
    }


@dataclass(frozen=True)
class Plan:
    """Where a build of given sources and architectures lives, found without compiling.

    Attributes:
        archs: target architectures; given: whether they came from ``arch``.
        flags: every compiler flag; fingerprint: hash of all but the architectures
            and the toolchain.
        toolchain: the compilers' versions.
        key: the cache key; name: the module name; folder: the build folder.
    """

    archs: list[Arch]
    given: bool
    flags: BuildFlags
    fingerprint: str
    toolchain: Toolchain
    key: str
    name: str
    folder: Path

    def with_toolchain(self, toolchain: Toolchain) -> Plan:
        """The same build made with ``toolchain`` (another key, name and folder)."""
        key = build_key(self.fingerprint, [str(a) for a in self.archs], toolchain.key())
        name = module_name(self.name.rsplit("_", 1)[0], key)
        return dataclasses.replace(
            self, toolchain=toolchain, key=key, name=name, folder=self.folder.parent / name
        )


def plan_for(
    sources_dir: Path,
    cache_dir: Path,
    arch: str | list[str] | None,
    prefix: str,
    host: Host,
    toolchain: Toolchain,
    gpus: list[GPU],
    torch_version: str,
    torch_cuda: str | None,
) -> Plan:
    """The cache key and folder of a build for ``gpus`` with this torch (hashes files only).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> tc = Toolchain("13.0.88", "gcc 13.3.0", "gcc 13.3.0")
        >>> p = plan_for(d, d, "9.0", "gsnb_csrc", Host.current(), tc, [], "2.11.0", "13.0")
        >>> p.name.startswith("gsnb_csrc_"), [str(a) for a in p.archs], p.given
        (True, ['9.0'], True)
    """
    archs, given = resolve_archs(arch, gpus)
    flags = BuildFlags.for_archs(archs, msvc=host.windows)
    fp = fingerprint(sources_dir, flags_payload(flags), torch_version, torch_cuda)
    key = build_key(fp, [str(a) for a in archs], toolchain.key())
    name = module_name(prefix, key)
    return Plan(archs, given, flags, fp, toolchain, key, name, cache_dir / name)


def find_cached(plan: Plan, cache_dir: Path, prefix: str) -> CachedBuild | None:
    """The cached build of ``plan``: its exact key; for GPU-derived targets, any build of
    the same sources, flags and toolchain that runs on the GPUs.

    Without a complete toolchain (no nvcc here: nothing could be built anyway) the
    toolchain is not compared: any build of the same sources, flags and torch is used.
    """
    if plan.toolchain.known:
        exact = complete_build(plan.folder, plan.key)
        if exact is not None or plan.given:
            return exact
    caps = [(a.major, a.minor) for a in plan.archs]
    if not caps:
        return None
    wanted = sorted(str(a) for a in plan.archs)
    for found in compatible_builds(cache_dir, prefix, plan.fingerprint, caps):
        if plan.given and sorted(found.archs) != wanted:
            continue
        if plan.toolchain.known and found.manifest.get("toolchain") != plan.toolchain.key():
            continue
        return found
    return None


def toolchain_change(plan: Plan, cache_dir: Path, prefix: str) -> str | None:
    """A note when a build of the same sources exists for other compiler versions."""
    caps = [(a.major, a.minor) for a in plan.archs]
    for found in compatible_builds(cache_dir, prefix, plan.fingerprint, caps) if caps else []:
        old = found.manifest.get("toolchain")
        if isinstance(old, dict) and old != plan.toolchain.key():
            was = ", ".join(f"{k} {v}" for k, v in sorted(old.items()))
            now = ", ".join(f"{k} {v}" for k, v in sorted(plan.toolchain.key().items()))
            return f"the compilers changed since the cached build {found.name} ({was} -> {now})"
    return None
