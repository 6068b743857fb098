"""The build cache: where builds live, their keys, their manifests and their locks.

Each build lives in ``<cache>/<name>/`` where ``name`` ends in the first 12 hex digits
of a SHA-256 key over the sources, flags, architectures, torch and CUDA versions and
the versions of nvcc and the host compilers. A
build is complete only once its manifest (``gsnb-build.json``, written atomically and
last) names a library file of the recorded size; anything else in the folder is a
half-finished build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gsnb.utils.atomic import atomic_write
from gsnb.utils.lock import LockHeld, OwnedLock

MANIFEST = "gsnb-build.json"
MANIFEST_LIMIT = 1 << 20
FORMAT = 1
SOURCE_SUFFIXES = (".cu", ".cpp")
HEADER_SUFFIXES = (".cuh", ".h")


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$GSNB_CACHE_DIR``, else ``$XDG_CACHE_HOME/gsnb/extensions`` (``~/.cache/...``),
    or ``%LOCALAPPDATA%\\gsnb\\extensions`` on Windows.

    Example:
        >>> default_cache_dir({"GSNB_CACHE_DIR": "/tmp/gs"}).as_posix()
        '/tmp/gs'
    """
    env = os.environ if env is None else env
    if env.get("GSNB_CACHE_DIR"):
        return Path(env["GSNB_CACHE_DIR"]).expanduser()
    if sys.platform == "win32" and env.get("LOCALAPPDATA"):
        return Path(env["LOCALAPPDATA"]) / "gsnb" / "extensions"
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "gsnb" / "extensions"


def default_sources_dir() -> Path:
    """``gsnb/csrc`` inside an installed wheel, else the checkout's top-level ``csrc/``."""
    package = Path(__file__).resolve().parents[1]
    inside = package / "csrc"
    return inside if inside.is_dir() else package.parent / "csrc"


def source_files(folder: Path) -> list[Path]:
    """The ``*.cu`` and ``*.cpp`` files of ``folder`` (top level, sorted)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file())


def hashed_files(folder: Path) -> list[Path]:
    """Sources and headers (``*.cuh``, ``*.h``) of ``folder``: everything the key covers."""
    if not folder.is_dir():
        return []
    suffixes = SOURCE_SUFFIXES + HEADER_SUFFIXES
    return sorted(p for p in folder.iterdir() if p.suffix in suffixes and p.is_file())


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def fingerprint(
    sources: Path, flags: Mapping[str, Any], torch_version: str, torch_cuda: str | None
) -> str:
    """Hash of everything except the architectures: file contents, flags, torch, CUDA, Python.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "a.cu").write_text("x")
        >>> a = fingerprint(d, {"nvcc": ["-O3"]}, "2.5", "12.4")
        >>> _ = (d / "a.cu").write_text("y")
        >>> a != fingerprint(d, {"nvcc": ["-O3"]}, "2.5", "12.4")
        True
    """
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in hashed_files(sources)}
    python = f"{sys.implementation.cache_tag}-{sys.platform}-{getattr(sys, 'abiflags', '')}"
    return _digest(
        {
            "format": FORMAT,
            "files": files,
            "flags": dict(flags),
            "torch": torch_version,
            "cuda": torch_cuda,
            "python": python,
        }
    )


def build_key(
    fingerprint_hex: str, archs: list[str], toolchain: Mapping[str, Any] | None = None
) -> str:
    """The cache key: the fingerprint plus the target architectures and the compilers' versions.

    Example:
        >>> a = build_key("f", ["9.0"], {"nvcc": "13.0.88"})
        >>> a != build_key("f", ["9.0"], {"nvcc": "13.1.80"}) and a != build_key("f", ["8.0"])
        True
    """
    return _digest(
        {"fingerprint": fingerprint_hex, "archs": sorted(archs), "toolchain": dict(toolchain or {})}
    )


def module_name(prefix: str, key: str) -> str:
    """``gsnb_csrc_<first 12 hex of key>``."""
    return f"{prefix}_{key[:12]}"


def library_suffix() -> str:
    """``.pyd`` on Windows, else ``.so`` (what torch's builder writes)."""
    return ".pyd" if sys.platform == "win32" else ".so"


@dataclass(frozen=True)
class CachedBuild:
    """A complete build found in the cache.

    Attributes:
        folder: its build folder.
        manifest: the parsed manifest.
    """

    folder: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        """The module name."""
        return str(self.manifest["name"])

    @property
    def library(self) -> Path:
        """The compiled module file."""
        return self.folder / str(self.manifest["library"])

    @property
    def archs(self) -> list[str]:
        """Architectures it holds code for, e.g. ``["8.0", "9.0+PTX"]``."""
        return [str(a) for a in self.manifest.get("archs", [])]


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of ``folder``, or None when absent, oversized or malformed."""
    path = folder / MANIFEST
    try:
        if path.stat().st_size > MANIFEST_LIMIT:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    needed = ("format", "key", "name", "library", "library_size", "archs", "fingerprint")
    if not isinstance(data, dict) or any(k not in data for k in needed) or data["format"] != FORMAT:
        return None
    return data


def complete_build(folder: Path, key: str | None = None) -> CachedBuild | None:
    """The build in ``folder`` if complete (and of ``key`` when given), else None."""
    manifest = read_manifest(folder)
    if manifest is None or (key is not None and manifest["key"] != key):
        return None
    library = folder / str(manifest["library"])
    try:
        if library.stat().st_size != manifest["library_size"]:
            return None
    except OSError:
        return None
    return CachedBuild(folder, manifest)


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``folder``'s manifest atomically: the build counts as complete from here on."""
    with atomic_write(folder / MANIFEST, "w") as handle:
        json.dump(dict(manifest), handle, indent=1, sort_keys=True)


def compatible_builds(
    cache_dir: Path, prefix: str, fingerprint_hex: str, gpu_archs: list[tuple[int, int]]
) -> list[CachedBuild]:
    """Complete builds of ``fingerprint_hex`` that run on every GPU of ``gpu_archs``, newest first.

    SASS for ``X.y`` runs on ``X.z`` with ``z >= y``; PTX for ``X.y`` on anything newer.
    """
    found = []
    try:
        folders = [p for p in cache_dir.iterdir() if p.name.startswith(prefix + "_") and p.is_dir()]
    except OSError:
        return []
    for folder in folders:
        build = complete_build(folder)
        if build is None or build.manifest["fingerprint"] != fingerprint_hex:
            continue
        if all(runs_on(build.archs, gpu) for gpu in gpu_archs):
            found.append(build)
    return sorted(found, key=lambda b: float(b.manifest.get("created", 0)), reverse=True)


def runs_on(archs: list[str], gpu: tuple[int, int]) -> bool:
    """True when code for ``archs`` (``"8.0"``, ``"9.0+PTX"``) runs on a GPU of capability ``gpu``.

    Example:
        >>> runs_on(["8.0"], (8, 6)), runs_on(["8.6"], (8, 0)), runs_on(["8.0+PTX"], (9, 0))
        (True, False, True)
    """
    for arch in archs:
        ptx = arch.endswith("+PTX")
        major, minor = (int(x) for x in arch.removesuffix("+PTX").split("."))
        if (major == gpu[0] and minor <= gpu[1]) or (ptx and (major, minor) <= gpu):
            return True
    return False


@dataclass
class LockState:
    """What happened while taking a build lock.

    Attributes:
        stale_pid: pid of a holder that died without releasing (recovered), or None.
        waited: seconds spent waiting for another live build.
    """

    stale_pid: int | None = None
    waited: float = 0.0


@contextlib.contextmanager
def build_lock(
    cache_dir: Path, name: str, timeout: float = 3600.0, on_wait: Any = None
) -> Iterator[LockState]:
    """Hold the lock of build ``name``; recover from a holder that was killed.

    The lock is an operating-system file lock (released by the kernel when its
    holder dies); beside it an owner file names the holder. An owner file found
    after taking the lock means its writer was killed mid-build: that is reported
    as ``stale_pid`` and the build folder is treated as half-built.

    Example:
        >>> import tempfile, pathlib
        >>> with build_lock(pathlib.Path(tempfile.mkdtemp()), "demo") as state:
        ...     state.stale_pid is None
        True
    """
    lock = OwnedLock(cache_dir / f"{name}.lock", cache_dir / f"{name}.owner.json")
    try:
        lock.acquire(timeout=max(timeout, 1e-3), on_wait=on_wait)
    except LockHeld as err:
        raise TimeoutError(
            f"another build of {name} ({lock.describe_holder()}) has held its lock for "
            f"{timeout:.0f} s; if no build is running, delete {lock.owner_path} and "
            f"{lock.lock_path}"
        ) from err
    try:
        yield LockState(stale_pid=lock.stale_pid, waited=lock.waited)
    finally:
        lock.release()
