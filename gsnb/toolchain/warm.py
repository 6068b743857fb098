"""The warm check of ``gsnb build``: find a cached, smoke-tested build without torch.

A new ``gsnb build`` process whose build is cached spent most of its time importing torch
(seconds) to learn three things: torch's version and CUDA version, the visible GPUs and
their compute capability. :func:`warm_hit` reads them without torch: the versions from
the installed ``torch/version.py`` (parsed, not run), the GPUs from the driver's NVML
library with ``CUDA_VISIBLE_DEVICES`` applied, the driver from ``/proc``. It then makes
the cache decision with the same code as a build (:func:`~gsnb.toolchain.plan.plan_for`,
:func:`~gsnb.toolchain.plan.find_cached`, the toolchain from
:func:`~gsnb.toolchain.compilers.find_toolchain` and the smoke record of
:func:`~gsnb.toolchain.smoke_records.recorded_pass`) and starts no process: tools answer
from the probes file (a wrapper script: its last answer, while it and the files it names
are unchanged). Whatever it cannot decide this way (no NVML, GPUs whose CUDA order is
unknown, a tool never asked, no smoke record for this GPU, driver and torch, Windows) it
leaves to the full build, which decides as it always has.
"""

from __future__ import annotations

import ast
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from gsnb.toolchain.cache import default_cache_dir, default_sources_dir, source_files
from gsnb.toolchain.compilers import find_toolchain
from gsnb.toolchain.flags import torch_folder
from gsnb.toolchain.gpus import GPU, cuda_visible, nvml_devices, proc_driver_version
from gsnb.toolchain.host import Host
from gsnb.toolchain.plan import PREFIX, find_cached, plan_for
from gsnb.toolchain.probes import PROBES_FILE, ProbeMemo
from gsnb.toolchain.result import BuildResult
from gsnb.toolchain.smoke_records import recorded_pass, recorded_result


def installed_torch(folder: Path | None = None) -> tuple[str, str | None] | None:
    """``(torch.__version__, torch.version.cuda)`` of the installed torch, read from its
    ``version.py`` without importing torch; None when it cannot be read.

    Example:
        >>> import torch
        >>> installed_torch() == (torch.__version__, torch.version.cuda)
        True
    """
    folder = folder or torch_folder()
    if folder is None:
        return None
    try:
        tree = ast.parse((folder / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    values: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    version, cuda = values.get("__version__"), values.get("cuda", False)
    if not isinstance(version, str) or not (cuda is None or isinstance(cuda, str)):
        return None
    return version, cuda


@dataclass(frozen=True)
class GpuView:
    """The GPUs a CUDA process would see, found without CUDA.

    Attributes:
        gpus: the visible GPUs in CUDA's order; the first is the one a new process uses.
        driver: the NVIDIA driver version (``"580.65.06"``).
    """

    gpus: list[GPU]
    driver: str


def gpu_view(host: Host) -> GpuView | None:
    """The visible GPUs from NVML and the driver from ``/proc``; None when either is unknown."""
    devices = nvml_devices()
    visible = cuda_visible(devices, host.env) if devices else None
    driver = proc_driver_version(host)
    if not visible or driver is None:
        return None
    gpus = [GPU(i, d.name, d.capability, 0, "nvml") for i, d in enumerate(visible)]
    return GpuView(gpus, driver)


class _Undecided(Exception):
    """The warm check would have to start a process to decide."""


@dataclass(frozen=True)
class _NoProcessHost(Host):
    """This machine, read without starting any process."""

    def run(self, command: list[str], timeout: float = 20.0) -> tuple[int, str] | None:
        raise _Undecided(f"{command[0] if command else 'a tool'} would have to run")


def warm_hit(
    arch: str | list[str] | None = None,
    cache_dir: str | Path | None = None,
    *,
    sources_dir: Path | None = None,
    prefix: str = PREFIX,
    view: GpuView | None = None,
    host: Host | None = None,
) -> BuildResult | None:
    """The cache hit :func:`gsnb.toolchain.build` would report, found without torch or any
    process, or None when that cannot be decided so (the full build then decides).

    The result's ``module`` is None: nothing is loaded. Its text is a cache hit's:
    the build, its architectures, its folder and the smoke test that passed before.

    Args:
        arch: target architectures as ``build`` takes them (default: the visible GPUs').
        cache_dir: cache root (default ``$GSNB_CACHE_DIR`` or ``~/.cache/gsnb/extensions``).
        sources_dir: sources (default: gsnb's ``csrc``); prefix: module name prefix.
        view: the GPUs and driver (default: :func:`gpu_view`).
        host: the machine (default: this one).

    Example:
        >>> hit = warm_hit("9.0")  # None without a smoke-tested build for this GPU
        >>> hit is None or hit.cached
        True
    """
    start = time.perf_counter()
    try:
        base = host or Host.current()
        quiet = _NoProcessHost(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Host)})
        return _hit(arch, cache_dir, sources_dir, prefix, view, quiet, start)
    except (_Undecided, ValueError, OSError):
        return None


def _hit(
    arch: str | list[str] | None,
    cache_dir: str | Path | None,
    sources_dir: Path | None,
    prefix: str,
    view: GpuView | None,
    host: Host,
    start: float,
) -> BuildResult | None:
    if host.windows:  # DLL folders and MSVC discovery: the full build decides there
        return None
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(host.env)
    sources = sources_dir or default_sources_dir()
    versions = installed_torch()
    if not source_files(sources) or versions is None or versions[1] is None:
        return None
    view = view or gpu_view(host)
    if view is None:
        return None
    probes = ProbeMemo(cache / PROBES_FILE, trust_scripts=True)
    toolchain = find_toolchain(dataclasses.replace(host, probes=probes), versions[1])
    if not toolchain.known:
        return None
    plan = plan_for(sources, cache, arch, prefix, host, toolchain, view.gpus, *versions)
    hit = find_cached(plan, cache, prefix)
    if hit is None:
        return None
    first = view.gpus[0]
    identity = {
        "gpu": first.name,
        "capability": first.arch,
        "driver": view.driver,
        "torch": versions[0],
        "torch_cuda": versions[1],
    }
    record = recorded_pass(hit.manifest, identity)
    if record is None:
        return None
    seconds = time.perf_counter() - start
    return BuildResult.of_build(
        hit, None, True, seconds, smoke=recorded_result(record), timings={"check": seconds}
    )
