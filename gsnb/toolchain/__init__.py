"""Build the CUDA rasterizer for this machine, or say in one sentence why it cannot be built.

:func:`build` discovers the GPU, driver, torch, CUDA toolkit, host compiler and ninja,
checks the compatibility rules, compiles ``csrc/`` for the GPU's architecture into a
cache keyed by sources, flags, architecture, torch, CUDA and compiler versions, loads
the module and smoke-tests it on the GPU. :func:`load_cached` only loads a finished
build. A cache hit starts no process and, once the smoke test has passed on this GPU,
does not run it again. ``%gs_build`` / ``%gs_doctor`` and ``gsnb build`` / ``gsnb
doctor`` drive them. :func:`loaded_module` is the module either gave this process
(:mod:`gsnb.kernels` calls it).
"""

from __future__ import annotations

import sys
import threading
import time
import types
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gsnb.toolchain.cache import (
    compatible_builds,
    default_cache_dir,
    default_sources_dir,
    fingerprint,
)
from gsnb.toolchain.catalogue import CATALOGUE, Diagnosis, recognise
from gsnb.toolchain.plan import PREFIX, flags_payload
from gsnb.toolchain.result import BuildError, BuildResult

if TYPE_CHECKING:
    from gsnb.toolchain.environment import Environment, discover

__all__ = [
    "CATALOGUE",
    "BuildError",
    "BuildResult",
    "Diagnosis",
    "Environment",
    "build",
    "discover",
    "load_cached",
    "loaded_module",
    "recognise",
    "use_module",
]


def __getattr__(name: str) -> Any:
    # Discovery loads torch: imported on first use, so ``gsnb build``'s warm check never does.
    if name in ("Environment", "discover"):
        from gsnb.toolchain import environment

        return getattr(environment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The module of this process: set by build() and load_cached(), read by gsnb.kernels.
_lock = threading.RLock()  # re-entrant: loaded_module() loads through load_cached()
_module: types.ModuleType | None = None
_looked = False


def use_module(module: types.ModuleType | None) -> None:
    """Make ``module`` (a built ``csrc/`` extension) this process's module; ``None`` forgets it,
    so the next :func:`loaded_module` looks for a cached build again.

    Example:
        >>> import gsnb.toolchain
        >>> module = gsnb.toolchain.loaded_module()
        >>> gsnb.toolchain.use_module(module)  # the same module again: nothing changes
    """
    global _module, _looked
    with _lock:
        _module = module
        _looked = module is not None


def loaded_module() -> types.ModuleType | None:
    """The module built or loaded in this process; the first call loads a cached build for this
    environment (never compiles). ``None`` when there is none.

    Example:
        >>> import gsnb.toolchain
        >>> module = gsnb.toolchain.loaded_module()  # None until a build exists for this GPU
        >>> gsnb.toolchain.loaded_module() is module  # looked up once per process
        True
    """
    global _looked
    module = _module
    if module is not None:  # every kernel call asks: no lock once a module is in use
        return module
    with _lock:
        if _module is None and not _looked:
            _looked = True
            load_cached()
        return _module


def build(
    arch: str | list[str] | None = None,
    *,
    force: bool = False,
    clean: bool = False,
    verify: bool = False,
    verbose: bool = False,
    jobs: int | None = None,
    progress: bool = True,
    cache_dir: str | Path | None = None,
    sources_dir: str | Path | None = None,
) -> BuildResult:
    """Build (or reuse) the CUDA rasterizer, load it, and smoke-test it on the GPU.

    A passed smoke test is recorded in the build's manifest for this GPU, driver and
    torch; a later cache hit in the same situation does not run it again (its first
    CUDA use costs seconds) unless ``verify`` asks for it.

    Args:
        arch: target compute capabilities, e.g. ``"9.0"``, ``"8.0,9.0"`` or
            ``"8.6+PTX"``; default: those of the GPUs this process sees.
        force: rebuild even when a cached build matches.
        clean: remove every cached build first, then build.
        verify: run the smoke test even when it passed before on this GPU.
        verbose: echo the compiler's output while it runs.
        jobs: parallel compile jobs (default: CPUs, capped by free memory; ``MAX_JOBS``).
        progress: show a progress bar (step count, elapsed time).
        cache_dir: cache root (default ``$GSNB_CACHE_DIR`` or ``~/.cache/gsnb/extensions``).
        sources_dir: sources to build (default: gsnb's ``csrc``).

    Returns:
        A :class:`BuildResult`: the module, its cache folder and log, whether it was
        a cache hit, the smoke test's result (skipped without a GPU; read from the
        record when it passed before) and the seconds of each phase.

    Raises:
        BuildError: names the cause and the fix (``str(err)``); ``err.log`` is the
            full compiler log.

    Example:
        >>> import gsnb
        >>> result = gsnb.build(arch="9.0", progress=False)  # doctest: +SKIP
        >>> result.cached, result.smoke.status  # doctest: +SKIP
        (True, 'passed')
    """
    from gsnb.toolchain.builder import build_extension

    start = time.perf_counter()
    result = build_extension(
        Path(sources_dir) if sources_dir is not None else default_sources_dir(),
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
        arch=arch,
        prefix=PREFIX,
        force=force,
        clean=clean,
        verbose=verbose,
        jobs=jobs,
        progress=progress,
    )
    use_module(result.module)
    from gsnb.toolchain.smoke_records import gpu_identity, smoke_checked

    smoke_start = time.perf_counter()
    result.smoke, result.manifest = smoke_checked(
        result.folder, result.manifest, result.archs, gpu_identity(), verify=verify
    )
    result.timings["smoke"] = time.perf_counter() - smoke_start
    result.seconds = time.perf_counter() - start
    if not result.smoke.ok:
        use_module(None)
        diagnoses = [result.smoke.diagnosis] if result.smoke.diagnosis else []
        error = BuildError(
            f"the module was built but failed its smoke test ({result.smoke.message})", diagnoses
        )
        error.log = result.log
        raise error
    return result


_warned = False


def load_cached() -> types.ModuleType | None:
    """The module of a finished cached build for this environment, or None; never compiles.

    It matches the current sources, flags, torch, CUDA and the architecture of every
    visible GPU. Without a GPU, or without such a build, it returns None; a build
    that is found but cannot be imported gives a warning (run ``gsnb doctor``) and None.

    Example:
        >>> import gsnb.toolchain, torch
        >>> gsnb.toolchain.load_cached() is None or torch.cuda.is_available()
        True
    """
    global _warned
    try:
        import torch

        from gsnb.toolchain.flags import BuildFlags
        from gsnb.toolchain.gpus import torch_gpus
        from gsnb.toolchain.loader import dll_directories, load_module

        gpus = torch_gpus()
        if not gpus:
            return None
        flags = BuildFlags.for_archs([], msvc=sys.platform == "win32")
        fp = fingerprint(
            default_sources_dir(), flags_payload(flags), torch.__version__, torch.version.cuda
        )
        builds = compatible_builds(default_cache_dir(), PREFIX, fp, [g.capability for g in gpus])
        if not builds:
            return None
        dlls = dll_directories(builds[0].manifest.get("toolkit"))
        module = load_module(builds[0].name, builds[0].library, dlls)
    except Exception as err:  # a broken cache must never break rendering
        if not _warned:
            _warned = True
            found = recognise(str(err))
            why = str(found[0]) if found else f"{type(err).__name__}: {err}"
            warnings.warn(
                f"gsnb: the cached CUDA rasterizer could not be loaded: {why}", stacklevel=2
            )
        return None
    use_module(module)
    return module
