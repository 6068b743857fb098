"""Everything the build depends on, discovered in one call, and the rules applied to it."""

from __future__ import annotations

import platform
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gsnb.toolchain import rules
from gsnb.toolchain.cache import (
    default_cache_dir,
    default_sources_dir,
    source_files,
)
from gsnb.toolchain.compilers import HostCompilers, Toolchain, host_compilers
from gsnb.toolchain.flags import Arch, cxx_standard
from gsnb.toolchain.gpus import GPU, driver_version, smi_gpus, torch_gpus
from gsnb.toolchain.host import Host
from gsnb.toolchain.plan import resolve_archs
from gsnb.toolchain.rules import Check
from gsnb.toolchain.toolkit import (
    ToolkitChoice,
    ToolkitSearch,
    choose_toolkit,
    find_toolkits,
    torch_guess,
)
from gsnb.toolchain.tools import Compiler, Ninja, cxx_compiler, find_ninja, nvcc_version
from gsnb.utils.atomic import writable_problem


def python_headers() -> Path:
    """Where ``Python.h`` should be."""
    scheme = "nt" if sys.platform == "win32" else "posix_prefix"
    return Path(sysconfig.get_path("include", scheme=scheme)) / "Python.h"


@dataclass
class Environment:
    """What discovery found. :meth:`checks` turns it into the doctor's table.

    Example:
        >>> env = discover(arch="9.0")
        >>> [c.name for c in env.checks()][:2]
        ['platform', 'torch']
    """

    host: Host
    torch_version: str
    torch_cuda: str | None
    gpus: list[GPU]
    smi_gpus: list[GPU]
    driver: str | None
    search: ToolkitSearch
    choice: ToolkitChoice
    guess: Path | None
    nvcc: tuple[int, int, int] | None
    nvcc_compiler: Compiler | None
    alternative: Compiler | None
    host_config_limits: tuple[int | None, int | None]
    cxx: Compiler | None
    ninja: Ninja | None
    archs: list[Arch]
    archs_given: bool
    cache_dir: Path
    cache_problem: str | None
    disk_free: int | None
    sources_dir: Path
    sources: list[Path]
    std: str
    extra: list[Check] = field(default_factory=list)

    def checks(self) -> list[Check]:
        """One :class:`~gsnb.toolchain.rules.Check` per line of the doctor's table, in order."""
        host = self.host
        toolkit = self.choice.toolkit
        nvcc_path = str(toolkit.nvcc) if toolkit else ""
        items = [
            Check(
                "platform",
                f"{host.system} {platform.machine()}, Python {platform.python_version()}",
                "info",
            ),
            rules.check_torch(self.torch_version, self.torch_cuda, not self.cpu_only),
            self._gpu_check()
            if not self.cpu_only
            else Check("GPU", "none", "info", "neither torch nor nvidia-smi sees an NVIDIA GPU"),
            rules.check_driver(
                self.driver, self.torch_cuda, host.windows, bool(self.gpus), host.wsl()
            ),
            *rules.check_toolkit(self.choice, self.search.rejected, self.guess, self.torch_cuda),
        ]
        if toolkit is not None:
            items.append(rules.check_nvcc(self.nvcc, self.torch_cuda, nvcc_path))
        if self.archs or self.gpus:
            items.append(
                rules.check_archs(
                    [(a.major, a.minor) for a in self.archs],
                    self.nvcc,
                    [g.capability for g in self.gpus],
                )
            )
        else:  # the GPU line already names this cause; one failure, not two
            items.append(
                Check("architectures", "none", "info", "none to build for without a GPU or --arch")
            )
        compiler = self.nvcc_compiler
        items.append(
            rules.check_host_compiler(
                compiler.kind if compiler else None,
                compiler.version if compiler else (),
                str(compiler) if compiler else "",
                self.nvcc,
                self.host_config_limits,
                str(self.alternative) if self.alternative else None,
                host.windows,
            )
        )
        cxx = self.cxx
        items.append(
            rules.check_cxx(
                cxx.kind if cxx else None,
                str(cxx) if cxx else "",
                self.std == "c++20",
                host.windows,
            )
        )
        items.append(
            rules.check_ninja(
                f"{self.ninja.version} ({self.ninja.path})" if self.ninja else None,
                bool(self.ninja and self.ninja.on_path),
            )
        )
        headers = python_headers()
        if headers.is_file():
            items.append(Check("Python headers", str(headers), "ok"))
        else:
            from gsnb.toolchain.catalogue import diagnose

            py = f"{sys.version_info.major}.{sys.version_info.minor}"
            items.append(
                Check(
                    "Python headers",
                    str(headers),
                    "fail",
                    "missing",
                    diagnose("python-headers-missing", py=py),
                )
            )
        items.append(rules.check_sources(str(self.sources_dir), len(self.sources)))
        items.append(rules.check_cache(str(self.cache_dir), self.cache_problem, self.disk_free))
        items += self._platform_checks()
        return items + self.extra

    def _platform_checks(self) -> list[Check]:
        """Variables as seen, WSL2, shared memory (Linux) and DLL search order (Windows)."""
        host = self.host
        items = rules.check_environment(host.env, host.persistent_env)
        if host.wsl():
            items.append(Check("WSL2", "yes", "info", "GPU through the Windows driver"))
        shm = rules.check_shm(host.shm_size())
        if shm is not None:
            items.append(shm)
        if host.windows:
            toolkit = self.choice.toolkit
            items.append(
                rules.check_dll_path(
                    host.path_dirs(), toolkit.nvcc.parent if toolkit else None, self.torch_cuda
                )
            )
        return items

    def toolchain(self) -> Toolchain:
        """The compiler versions this environment would build with (part of the cache key)."""
        compilers = HostCompilers(self.nvcc_compiler, self.alternative, self.host_config_limits)
        return Toolchain.of(self.nvcc, compilers, self.cxx, self.choice.toolkit)

    def _gpu_check(self) -> Check:
        return rules.check_gpus(
            [f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" for g in self.gpus],
            [f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" for g in self.smi_gpus],
            self.host.env.get("CUDA_VISIBLE_DEVICES"),
            self.archs_given,
        )

    @property
    def cpu_only(self) -> bool:
        """No NVIDIA GPU here at all (torch and nvidia-smi see none, none hidden by
        ``CUDA_VISIBLE_DEVICES``) and no ``--arch``.

        gsnb then renders and trains on the CPU with the PyTorch reference renderer;
        there is nothing to build.
        """
        hidden = self.host.env.get("CUDA_VISIBLE_DEVICES") is not None
        return not self.gpus and not self.smi_gpus and not hidden and not self.archs_given

    def failures(self) -> list[Check]:
        """The checks that stop a build (without a GPU: the GPU check, naming the fix)."""
        failed = [c for c in self.checks() if c.status == "fail"]
        return [self._gpu_check(), *failed] if self.cpu_only else failed

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary: verdict, checks, the chosen toolkit and why."""
        toolkit = self.choice.toolkit
        checks = self.checks()
        return {
            "ready": not self.failures(),
            "cpu_only": self.cpu_only,
            "checks": [
                {
                    "name": c.name,
                    "value": c.value,
                    "status": c.status,
                    "note": c.note,
                    "entry": c.diagnosis.entry.id if c.diagnosis else None,
                    "cause": c.diagnosis.cause if c.diagnosis else None,
                    "fix": c.diagnosis.fix if c.diagnosis else None,
                }
                for c in checks
            ],
            "toolkit": None
            if toolkit is None
            else {
                "root": str(toolkit.root),
                "version": toolkit.version_text,
                "nvcc": str(toolkit.nvcc),
                "found_by": toolkit.found_by,
                "reason": self.choice.reason,
                "others": [
                    {"root": str(t.root), "version": t.version_text} for t in self.choice.others
                ],
            },
            "torch": {"version": self.torch_version, "cuda": self.torch_cuda},
            "gpus": [
                {"name": g.name, "capability": g.arch, "seen_by": g.seen_by}
                for g in self.gpus or self.smi_gpus
            ],
            "driver": self.driver,
            "archs": [str(a) for a in self.archs],
            "cache_dir": str(self.cache_dir),
            "sources_dir": str(self.sources_dir),
        }


def discover(
    arch: str | list[str] | None = None,
    *,
    cache_dir: Path | None = None,
    sources_dir: Path | None = None,
    host: Host | None = None,
) -> Environment:
    """Look at GPUs, driver, torch, toolkit, compilers, ninja, sources and cache (about 0.1 s).

    Example:
        >>> env = discover(arch="9.0")
        >>> env.torch_version == __import__("torch").__version__
        True
    """
    host = host or Host.current()
    cache_dir = cache_dir or default_cache_dir(host.env)
    sources_dir = sources_dir or default_sources_dir()
    gpus = torch_gpus()
    smi, smi_driver = ([], None) if gpus else smi_gpus(host)
    driver = driver_version(host) or smi_driver
    archs, given = resolve_archs(arch, gpus)
    search = find_toolkits(host)
    choice = choose_toolkit(search, torch.version.cuda)
    toolkit = choice.toolkit
    nvcc = nvcc_version(toolkit.nvcc, host) if toolkit else None
    compilers = host_compilers(host, toolkit, nvcc)
    return Environment(
        host=host,
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
        gpus=gpus,
        smi_gpus=smi,
        driver=driver,
        search=search,
        choice=choice,
        guess=torch_guess(host),
        nvcc=nvcc,
        nvcc_compiler=compilers.default,
        alternative=compilers.alternative,
        host_config_limits=compilers.limits,
        cxx=cxx_compiler(host),
        ninja=find_ninja(host),
        archs=archs,
        archs_given=given,
        cache_dir=cache_dir,
        cache_problem=writable_problem(cache_dir),
        disk_free=host.disk_free(cache_dir),
        sources_dir=sources_dir,
        sources=source_files(sources_dir),
        std=cxx_standard(),
    )
