"""Build (or reuse) an extension from a sources folder: cache, checks, lock, compile, load."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from gsnb.toolchain.cache import (
    CachedBuild,
    build_lock,
    complete_build,
    default_cache_dir,
    fingerprint,
    library_suffix,
    source_files,
    write_manifest,
)
from gsnb.toolchain.catalogue import diagnose, recognise
from gsnb.toolchain.compilers import Toolchain, find_toolchain
from gsnb.toolchain.environment import Environment, discover
from gsnb.toolchain.gpus import torch_gpus
from gsnb.toolchain.host import Host
from gsnb.toolchain.jit import JitRequest, compile_module
from gsnb.toolchain.loader import add_dll_directories, dll_directories, load_module
from gsnb.toolchain.ninja_log import step_seconds
from gsnb.toolchain.plan import (
    PREFIX,
    Plan,
    find_cached,
    flags_payload,
    plan_for,
    toolchain_change,
)
from gsnb.toolchain.probes import PROBES_FILE, ProbeMemo
from gsnb.toolchain.progress import BuildProgress
from gsnb.toolchain.result import BuildError, BuildResult
from gsnb.toolchain.toolkit import Toolkit
from gsnb.toolchain.tools import shared_cxx_runtime

GIB = 1 << 30


def default_jobs(host: Host) -> int:
    """``MAX_JOBS`` when set, else one job per CPU, capped at one per 1.5 GiB of free memory.

    Example:
        >>> default_jobs(Host(system="Linux", env={"MAX_JOBS": "3"}))
        3
    """
    value = host.env.get("MAX_JOBS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    jobs = host.cpu_count()
    memory = host.memory_available()
    if memory is not None:
        jobs = min(jobs, max(1, int(memory / (1.5 * GIB))))
    return jobs


def plan_build(
    sources_dir: Path,
    cache_dir: Path,
    arch: str | list[str] | None,
    prefix: str,
    host: Host,
    toolchain: Toolchain,
) -> Plan:
    """Compute the cache key and folder of a build (hashes files; starts no process)."""
    return plan_for(
        sources_dir,
        cache_dir,
        arch,
        prefix,
        host,
        toolchain,
        torch_gpus(),
        torch.__version__,
        torch.version.cuda,
    )


def _cudart_link_dir(toolkit: Toolkit, cache_dir: Path) -> Path | None:
    """A folder with ``libcudart.so`` linked to the versioned one (pip wheels lack it)."""
    versioned = sorted(toolkit.lib_dir.glob("libcudart.so.*"))
    if not versioned:
        return None
    folder = (
        cache_dir / ".cudart-link" / hashlib.sha256(str(toolkit.lib_dir).encode()).hexdigest()[:12]
    )
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "libcudart.so"
    if not link.exists():
        link.symlink_to(versioned[-1])
    return folder


def _request(
    env: Environment, plan: Plan, sources_dir: Path, jobs: int, notes: list[str]
) -> JitRequest:
    toolkit = env.choice.toolkit
    assert toolkit is not None
    build_env = {"MAX_JOBS": str(jobs)}
    if env.ninja is not None and not env.ninja.on_path:
        build_env["PATH"] = f"{env.ninja.path.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if env.alternative is not None:
        gcc = env.alternative.path
        build_env["CC"] = str(gcc)
        build_env["CXX"] = str(gcc.with_name(gcc.name.replace("gcc", "g++", 1)))
        notes.append(
            f"built with {env.alternative} because {env.nvcc_compiler} is too new for nvcc"
        )
    include_dirs = [sources_dir]
    if toolkit.include_dir != toolkit.root / "include":
        include_dirs.append(toolkit.include_dir)
    ldflags = []
    if toolkit.lib_dir not in (toolkit.root / "lib64", toolkit.root / "lib"):
        ldflags.append(f"-L{toolkit.lib_dir}")
    if not env.host.windows and not toolkit.unversioned_cudart():
        link = _cudart_link_dir(toolkit, env.cache_dir)
        if link is not None:
            ldflags.append(f"-L{link}")
    linker = Path(build_env["CXX"]) if "CXX" in build_env else env.cxx.path if env.cxx else None
    runtime = shared_cxx_runtime(env.host, linker) if linker is not None else None
    if runtime is not None:
        ldflags.append(str(runtime))
        notes.append(
            f"linked to this process's C++ runtime {runtime}: {linker} has only a static one, "
            "whose second copy would crash the process on any error message"
        )
    return JitRequest(
        name=plan.name,
        sources=source_files(sources_dir),
        build_dir=plan.folder,
        cuda_home=toolkit.root,
        nvcc_flags=list(plan.flags.nvcc),
        host_flags=list(plan.flags.host),
        include_dirs=include_dirs,
        ldflags=ldflags,
        env=build_env,
    )


def _context(env: Environment, log: Path | None, jobs: int) -> dict[str, Any]:
    torch_major = env.torch_cuda.split(".")[0] if env.torch_cuda else None
    toolkit = env.choice.toolkit
    return {
        "torch": env.torch_version,
        "torch_cuda": env.torch_cuda,
        "torch_major": torch_major,
        "nvcc": ".".join(map(str, env.nvcc[:2])) if env.nvcc else None,
        "nvcc_major": env.nvcc[0] if env.nvcc else None,
        "root": toolkit.root if toolkit else None,
        "log": log,
        "jobs": jobs,
        "fewer": max(1, jobs // 2),
        "py": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cache_dir": env.cache_dir,
        "built": ", ".join(str(a) for a in env.archs),
    }


def _load_cached(hit: CachedBuild, notes: list[str]) -> Any:
    try:
        return load_module(hit.name, hit.library, dll_directories(hit.manifest.get("toolkit")))
    except ImportError as err:
        found = recognise(str(err))
        cause = str(found[0]) if found else str(err)
        notes.append(f"the cached build {hit.folder} could not be loaded ({cause}); it was rebuilt")
        shutil.rmtree(hit.folder, ignore_errors=True)
        return None


def clean_cache(cache_dir: Path, prefix: str) -> int:
    """Remove every cached build of ``prefix``; returns how many were removed."""
    removed = 0
    if cache_dir.is_dir():
        for folder in cache_dir.glob(f"{prefix}_*"):
            if folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed


def build_extension(
    sources_dir: Path,
    *,
    cache_dir: Path | None = None,
    arch: str | list[str] | None = None,
    prefix: str = PREFIX,
    force: bool = False,
    clean: bool = False,
    verbose: bool = False,
    jobs: int | None = None,
    progress: bool = True,
    host: Host | None = None,
) -> BuildResult:
    """Build the ``*.cu``/``*.cpp`` files of ``sources_dir`` into a cached module and import it.

    A complete cached build with the same key is imported without starting any
    process. Otherwise the environment is discovered and checked, the build lock
    taken (recovering from a killed holder), a half-finished folder removed, and
    ninja run with a progress bar; its whole output goes to ``build.log``.

    Args:
        sources_dir: folder of sources (``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)``).
        cache_dir: cache root (default :func:`~gsnb.toolchain.cache.default_cache_dir`).
        arch: target architectures (``"9.0"``, ``"8.0,9.0+PTX"``); default: the visible GPUs'.
        prefix: module name prefix; the name is ``<prefix>_<12 hex of the key>``.
        force: rebuild even when cached. clean: first remove every cached build of ``prefix``.
        verbose: echo compiler output. jobs: parallel compile jobs (default :func:`default_jobs`).
        progress: show a progress bar.
        host: the machine to discover (default: this one).

    Raises:
        BuildError: a rule failed before compiling, or compiling/loading failed; it
            names the cause and the fix.

    Example:
        >>> import tempfile, pathlib
        >>> try:
        ...     build_extension(pathlib.Path(tempfile.mkdtemp()), arch="9.0", progress=False)
        ... except BuildError as err:
        ...     print(err.diagnoses[-1].entry.id)
        sources-missing
    """
    start = time.perf_counter()
    clock = _Laps()
    host = host or Host.current()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(host.env)
    notes: list[str] = []
    if clean:
        removed = clean_cache(cache_dir, prefix)
        notes.append(f"removed {removed} cached build(s) from {cache_dir}")
    # Tools' answers are reused while their files are unchanged: no process on a cache hit.
    probes = ProbeMemo(cache_dir / PROBES_FILE)
    host = dataclasses.replace(host, probes=probes)
    toolchain = find_toolchain(host, torch.version.cuda)
    plan = plan_build(sources_dir, cache_dir, arch, prefix, host, toolchain)
    clock.lap("plan")
    if not force and source_files(sources_dir):
        hit = find_cached(plan, cache_dir, prefix)
        module = _load_cached(hit, notes) if hit is not None else None
        clock.lap("load")
        if hit is not None and module is not None:
            probes.save()
            if not toolchain.known:
                notes.append(f"reused {hit.name}: no complete toolchain was found ({toolchain})")
            return _result(module, hit, True, start, notes, clock.laps)

    probes.refresh = True  # a build sees the tools as they are now
    env = discover(arch, cache_dir=cache_dir, sources_dir=sources_dir, host=host)
    probes.save()
    plan = plan.with_toolchain(env.toolchain())
    clock.lap("discover")
    failures = env.failures()
    if failures:
        diagnoses = [c.diagnosis for c in failures if c.diagnosis is not None]
        extra = [f"{c.name}: {c.note}" for c in failures if c.diagnosis is None]
        diagnoses += [diagnose("compile-error", line=e) for e in extra if not diagnoses]
        if env.cpu_only:  # no GPU here at all: the CPU renderer needs no build
            raise BuildError(
                "nothing to build for this machine, which has no NVIDIA GPU (gsnb trains and "
                "renders on the CPU with its PyTorch renderer)",
                diagnoses,
            )
        raise BuildError("cannot build", diagnoses)
    jobs = jobs or default_jobs(host)
    request = _request(env, plan, sources_dir, jobs, notes)

    def waiting(holder: str) -> None:
        print(
            f"gsnb: waiting for another build of {plan.name} ({holder}) to finish", file=sys.stderr
        )

    with build_lock(cache_dir, plan.name, on_wait=waiting) as lock:
        if lock.stale_pid is not None:
            notes.append(str(diagnose("stale-lock", pid=lock.stale_pid)))
        done = None if force else complete_build(plan.folder, plan.key)
        module = _load_cached(done, notes) if done is not None else None
        if done is not None and module is not None:
            return _result(module, done, True, start, notes, clock.laps)
        if plan.folder.exists():
            if not force:
                notes.append(str(diagnose("half-built", build_dir=plan.folder)))
            shutil.rmtree(plan.folder)
        elif not force:
            change = toolchain_change(plan, cache_dir, prefix)
            notes += [change] if change else []
        module = _compile(request, env, plan, jobs, verbose, progress)
        after = fingerprint(
            sources_dir, flags_payload(plan.flags), torch.__version__, torch.version.cuda
        )
        if after != plan.fingerprint:
            raise BuildError(
                "the build is not cached", [diagnose("sources-changed", sources=sources_dir)]
            )
        clock.lap("compile")
        manifest = _manifest(env, plan, request, jobs, time.perf_counter() - start)
        write_manifest(plan.folder, manifest)
    sys.modules[plan.name] = module
    return _result(module, CachedBuild(plan.folder, manifest), False, start, notes, clock.laps)


class _Laps:
    """Seconds spent in each named phase, measured from the previous lap."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now


def _compile(
    request: JitRequest, env: Environment, plan: Plan, jobs: int, verbose: bool, progress: bool
) -> Any:
    log_path = plan.folder / "build.log"
    try:
        plan.folder.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w", encoding="utf-8") as log:
            shown = BuildProgress(log, show=progress, verbose=verbose, jobs=jobs)
            try:
                add_dll_directories(dll_directories(request.cuda_home))
                module = compile_module(request, shown.feed)
            except BaseException:
                shown.close(success=False)
                raise
            shown.close(success=True)
        return module
    except (RuntimeError, ImportError, OSError) as err:
        text = _read(log_path) + "\n" + str(err)
        found = recognise(text, **_context(env, log_path, jobs))
        headline = (
            "the module was built but could not be loaded"
            if isinstance(err, ImportError)
            else "the build failed"
        )
        raise BuildError(headline, found, log_path if log_path.exists() else None) from err


def _read(path: Path, limit: int = 4 << 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return ""


def _manifest(
    env: Environment, plan: Plan, request: JitRequest, jobs: int, seconds: float
) -> dict[str, Any]:
    library = f"{plan.name}{library_suffix()}"
    toolkit = env.choice.toolkit
    return {
        "format": 1,
        "key": plan.key,
        "fingerprint": plan.fingerprint,
        "name": plan.name,
        "library": library,
        "library_size": (plan.folder / library).stat().st_size,
        "archs": [str(a) for a in plan.archs],
        "created": time.time(),
        "seconds": round(seconds, 2),
        "jobs": jobs,
        "torch": env.torch_version,
        "torch_cuda": env.torch_cuda,
        "toolkit": str(toolkit.root) if toolkit else None,
        "nvcc": ".".join(map(str, env.nvcc)) if env.nvcc else None,
        "host_compiler": str(env.nvcc_compiler) if env.nvcc_compiler else None,
        "toolchain": plan.toolchain.key(),
        "flags": {"nvcc": request.nvcc_flags, "host": request.host_flags, "ld": request.ldflags},
        "sources": [p.name for p in request.sources],
        "step_seconds": step_seconds(plan.folder),
        "smoke": [],
    }


def _result(
    module: Any,
    build: CachedBuild,
    cached: bool,
    start: float,
    notes: list[str],
    timings: dict[str, float],
) -> BuildResult:
    seconds = time.perf_counter() - start
    return BuildResult.of_build(build, module, cached, seconds, notes=notes, timings=dict(timings))
