"""Compatibility rules checked before compiling, with their data tables.

Each ``check_*`` function looks at a few discovered facts and returns a
:class:`Check`: one line of the doctor's table with a verdict, and the catalogue
:class:`~gsnb.toolchain.catalogue.Diagnosis` when the verdict is a failure or a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gsnb.toolchain.catalogue import Diagnosis, diagnose
from gsnb.toolchain.toolkit import Toolkit, ToolkitChoice

Status = Literal["ok", "warn", "fail", "info"]

# compute capability -> (first nvcc that compiles it, first nvcc that no longer does)
ARCH_SUPPORT: dict[tuple[int, int], tuple[tuple[int, int], tuple[int, int] | None]] = {
    (3, 5): ((5, 0), (12, 0)),
    (3, 7): ((6, 5), (12, 0)),
    (5, 0): ((6, 0), (13, 0)),
    (5, 2): ((6, 5), (13, 0)),
    (5, 3): ((7, 0), (13, 0)),
    (6, 0): ((8, 0), (13, 0)),
    (6, 1): ((8, 0), (13, 0)),
    (6, 2): ((8, 0), (13, 0)),
    (7, 0): ((9, 0), (13, 0)),
    (7, 2): ((10, 0), (13, 0)),
    (7, 5): ((10, 0), None),
    (8, 0): ((11, 0), None),
    (8, 6): ((11, 1), None),
    (8, 7): ((11, 4), None),
    (8, 9): ((11, 8), None),
    (9, 0): ((11, 8), None),
    (10, 0): ((12, 8), None),
    (10, 1): ((12, 8), (13, 0)),  # renamed sm_110 in CUDA 13.0
    (10, 3): ((12, 9), None),
    (11, 0): ((13, 0), None),
    (12, 0): ((12, 8), None),
    (12, 1): ((12, 9), None),
}


@dataclass(frozen=True)
class HostLimits:
    """Host compilers one range of nvcc versions accepts (from its ``crt/host_config.h``).

    Attributes:
        since: first nvcc ``(major, minor)`` these limits apply to.
        max_gcc: newest gcc major accepted.
        max_clang: newest clang major accepted.
        msvc: ``(lowest, first refused)`` ``_MSC_VER`` values.
    """

    since: tuple[int, int]
    max_gcc: int
    max_clang: int
    msvc: tuple[int, int]


HOST_LIMITS: tuple[HostLimits, ...] = (
    HostLimits((11, 0), 9, 9, (1910, 1930)),
    HostLimits((11, 1), 10, 10, (1910, 1930)),
    HostLimits((11, 4), 11, 12, (1910, 1940)),
    HostLimits((12, 0), 12, 14, (1910, 1940)),
    HostLimits((12, 1), 12, 15, (1910, 1940)),
    HostLimits((12, 3), 12, 16, (1910, 1940)),
    HostLimits((12, 4), 13, 17, (1910, 1950)),
    HostLimits((12, 8), 14, 19, (1910, 1950)),
    HostLimits((13, 0), 15, 20, (1920, 1950)),
)

# CUDA major -> oldest driver that runs its binaries (minor-version compatibility): Linux, Windows.
DRIVER_MINIMUM: dict[int, tuple[str, str]] = {
    11: ("450.80.02", "452.39"),
    12: ("525.60.13", "527.41"),
    13: ("580.65.06", "580.88"),
}


@dataclass(frozen=True)
class Check:
    """One line of the doctor's table.

    Attributes:
        name: what was checked (``"nvcc"``).
        value: what was found (``"13.0.88 at /usr/local/cuda-13.0/bin/nvcc"``).
        status: ``"ok"``, ``"warn"``, ``"fail"`` or ``"info"``.
        note: why this verdict, in a few words.
        diagnosis: the catalogue entry for a warning or a failure.

    Example:
        >>> check_torch("2.5.1+cpu", None).status
        'fail'
    """

    name: str
    value: str
    status: Status
    note: str = ""
    diagnosis: Diagnosis | None = None


def version_tuple(text: str | None) -> tuple[int, ...]:
    """``"580.65.06"`` -> ``(580, 65, 6)``; ``()`` for None or no digits.

    Example:
        >>> version_tuple("12.8")
        (12, 8)
    """
    return tuple(int(n) for n in re.findall(r"\d+", text or ""))


def host_limits(nvcc: tuple[int, ...]) -> HostLimits:
    """The :data:`HOST_LIMITS` row for nvcc ``(major, minor, ...)``."""
    rows = [row for row in HOST_LIMITS if row.since <= tuple(nvcc[:2])]
    return rows[-1] if rows else HOST_LIMITS[0]


def limits_from_host_config(text: str) -> tuple[int | None, int | None]:
    """``(newest gcc major, newest clang major)`` read from a toolkit's ``crt/host_config.h``.

    Example:
        >>> limits_from_host_config("#if __GNUC__ > 15\\n#if (__clang_major__ >= 21)")
        (15, 20)
    """
    gcc = re.search(r"#if\s+__GNUC__\s*>\s*(\d+)", text)
    clang = re.search(r"\(__clang_major__\s*>=\s*(\d+)\)", text)
    return (int(gcc.group(1)) if gcc else None, int(clang.group(1)) - 1 if clang else None)


def arch_support(arch: tuple[int, int], nvcc: tuple[int, ...]) -> str | None:
    """None when nvcc ``nvcc`` compiles for ``arch``, else the reason it does not.

    Example:
        >>> arch_support((12, 0), (12, 6))
        'sm_120 needs nvcc 12.8 or newer'
        >>> arch_support((6, 1), (13, 0))
        'nvcc 13.0 dropped sm_61 (the last nvcc for it is 12.x)'
    """
    sm = f"sm_{arch[0]}{arch[1]}"
    if arch not in ARCH_SUPPORT:
        return f"{sm} is not a known NVIDIA architecture"
    added, removed = ARCH_SUPPORT[arch]
    version = tuple(nvcc[:2])
    if version < added:
        return f"{sm} needs nvcc {added[0]}.{added[1]} or newer"
    if removed is not None and version >= removed:
        last = f"{removed[0] - 1}.x" if removed[1] == 0 else f"{removed[0]}.{removed[1] - 1}"
        return f"nvcc {removed[0]}.{removed[1]} dropped {sm} (the last nvcc for it is {last})"
    return None


def check_torch(torch_version: str, torch_cuda: str | None, machine_has_gpu: bool = True) -> Check:
    """torch must be a CUDA build, where the machine has an NVIDIA GPU to build for.

    Example:
        >>> check_torch("2.13.0+cpu", None, machine_has_gpu=False).status
        'info'
    """
    if torch_cuda is None and not machine_has_gpu:
        return Check(
            "torch", torch_version, "info", "CPU-only build: enough on a machine without GPU"
        )
    if torch_cuda is None:
        return Check(
            "torch",
            torch_version,
            "fail",
            "CPU-only build",
            diagnose("torch-cpu-only", torch=torch_version),
        )
    return Check("torch", f"{torch_version} (CUDA {torch_cuda})", "ok")


def check_gpus(gpus: list[str], smi: list[str], visible: str | None, archs_given: bool) -> Check:
    """At least one GPU visible to torch, or an explicit ``--arch`` to compile without one.

    ``gpus`` and ``smi`` are descriptions of the GPUs seen by torch and by ``nvidia-smi``.
    """
    if gpus:
        return Check("GPU", "; ".join(gpus), "ok")
    why = ""
    if smi:
        why = f" although nvidia-smi lists {'; '.join(smi)}"
    if visible is not None:
        why += f" (CUDA_VISIBLE_DEVICES={visible!r})"
    diagnosis = diagnose(
        "no-gpu", why=why, visible=repr(visible) if visible is not None else "unset"
    )
    if archs_given:
        return Check(
            "GPU",
            "none visible",
            "warn",
            "compiling for --arch; the smoke test is skipped",
            diagnosis,
        )
    return Check("GPU", "none visible", "fail", "give --arch to compile without a GPU", diagnosis)


def check_driver(
    driver: str | None, cuda: str | None, windows: bool, have_gpu: bool, wsl: bool = False
) -> Check:
    """The driver must be new enough for the CUDA major of torch (and of the toolkit)."""
    if driver is None and wsl:
        note = "WSL2: the Windows driver serves the GPU; nvidia-smi is optional (/usr/lib/wsl/lib)"
        return Check("NVIDIA driver", "Windows host driver", "info", note)
    if driver is None:
        status: Status = "warn" if have_gpu else "info"
        return Check(
            "NVIDIA driver", "not found", status, "no /proc/driver/nvidia/version or nvidia-smi"
        )
    major = version_tuple(cuda)[:1]
    if not major or major[0] not in DRIVER_MINIMUM:
        return Check("NVIDIA driver", driver, "ok")
    minimum = DRIVER_MINIMUM[major[0]][1 if windows else 0]
    if version_tuple(driver) < version_tuple(minimum):
        diagnosis = diagnose("driver-too-old", driver=driver, cuda=cuda, min_driver=minimum)
        return Check("NVIDIA driver", driver, "fail", f"CUDA {cuda} needs {minimum}+", diagnosis)
    return Check("NVIDIA driver", driver, "ok", f"CUDA {cuda} needs {minimum}+")


def check_nvcc(nvcc: tuple[int, ...] | None, torch_cuda: str | None, path: str) -> Check:
    """nvcc's major version must equal torch's CUDA major."""
    if nvcc is None:
        return Check(
            "nvcc",
            path or "not found",
            "fail",
            "could not run nvcc --version",
            diagnose("no-toolkit", torch_cuda=torch_cuda),
        )
    text = ".".join(map(str, nvcc))
    torch_major = version_tuple(torch_cuda)[:1]
    if torch_major and torch_major[0] != nvcc[0]:
        diagnosis = diagnose(
            "cuda-major-mismatch",
            nvcc=text,
            torch_cuda=torch_cuda,
            torch_major=torch_major[0],
            nvcc_major=nvcc[0],
        )
        return Check("nvcc", f"{text} ({path})", "fail", f"torch is CUDA {torch_cuda}", diagnosis)
    return Check("nvcc", f"{text} ({path})", "ok", f"same major as torch's CUDA {torch_cuda}")


def check_archs(
    archs: list[tuple[int, int]], nvcc: tuple[int, ...] | None, gpu_archs: list[tuple[int, int]]
) -> Check:
    """nvcc must compile for every target architecture, and the targets must cover the GPUs."""
    shown = ", ".join(f"sm_{a}{b}" for a, b in archs) or "none"
    if not archs:
        return Check("architectures", shown, "fail", "no GPU and no --arch")
    if nvcc is not None:
        for arch in archs:
            reason = arch_support(arch, nvcc)
            if reason is not None:
                sm = f"{arch[0]}{arch[1]}"
                remedy = _arch_remedy(arch)
                diagnosis = diagnose(
                    "arch-unsupported",
                    nvcc=".".join(map(str, nvcc[:2])),
                    sm=sm,
                    why=f": {reason}",
                    remedy=remedy,
                )
                return Check("architectures", shown, "fail", reason, diagnosis)
    uncovered = [g for g in gpu_archs if not any(a[0] == g[0] and a[1] <= g[1] for a in archs)]
    if uncovered:
        gpu_sm = ", ".join(f"{a}{b}" for a, b in uncovered)
        diagnosis = diagnose("no-kernel-image", gpu_sm=f" (sm_{gpu_sm})", built=shown)
        return Check(
            "architectures", shown, "warn", f"no code for this GPU (sm_{gpu_sm})", diagnosis
        )
    return Check(
        "architectures", shown, "ok", "from the GPU" if gpu_archs and not uncovered else ""
    )


def _arch_remedy(arch: tuple[int, int]) -> str:
    added, removed = ARCH_SUPPORT.get(arch, ((0, 0), None))
    if arch in ((12, 0), (12, 1)):
        return (
            f"RTX 50-series and other sm_{arch[0]}{arch[1]} GPUs need CUDA {added[0]}.{added[1]} "
            f"or newer: install that toolkit and a torch built for it (pip install torch "
            f"--index-url https://download.pytorch.org/whl/cu{added[0]}{added[1]} or cu130)"
        )
    if removed is not None:
        return (
            f"use CUDA {removed[0] - 1}.x (toolkit and torch of that major) for this GPU, "
            "or build for another architecture with --arch"
        )
    return (
        f"install CUDA {added[0]}.{added[1]} or newer together with a torch built for it "
        f"(e.g. pip install torch --index-url https://download.pytorch.org/whl/cu"
        f"{added[0]}{added[1]}), or build for another architecture with --arch"
    )


def check_host_compiler(
    kind: str | None,
    version: tuple[int, ...],
    description: str,
    nvcc: tuple[int, ...] | None,
    limits: tuple[int | None, int | None] = (None, None),
    alternative: str | None = None,
    windows: bool = False,
) -> Check:
    """nvcc's host compiler must be within the range nvcc accepts (the x64 cl.exe on Windows).

    ``limits`` (newest gcc, newest clang) read from the toolkit's ``host_config.h``
    override the table; ``alternative`` names a supported ``gcc-N`` found on ``PATH``.
    """
    name = "host compiler (nvcc)"
    if kind is None:
        entry = "cl-not-found" if windows else "host-compiler-missing"
        return Check(name, "not found", "fail", "", diagnose(entry, what=" for nvcc"))
    if kind.startswith("msvc"):
        return _check_msvc(name, kind, version, description, nvcc)
    if nvcc is None or kind not in ("gcc", "clang"):
        return Check(name, description, "ok" if kind != "unknown" else "warn")
    table = host_limits(nvcc)
    max_gcc = limits[0] or table.max_gcc
    max_clang = limits[1] or table.max_clang
    newest = max_gcc if kind == "gcc" else max_clang
    nvcc_text = ".".join(map(str, nvcc[:2]))
    if version[0] <= newest:
        return Check(name, description, "ok", f"nvcc {nvcc_text} accepts {kind} <= {newest}")
    remedy = (
        f"gsnb builds with {alternative} instead (found on PATH)"
        if alternative
        else f"install {kind} {newest} or older (e.g. sudo apt install g++-{max_gcc}) and export "
        f"CC=gcc-{max_gcc} CXX=g++-{max_gcc}"
    )
    diagnosis = diagnose(
        "host-compiler-unsupported",
        compiler=description,
        nvcc=nvcc_text,
        supported=f"{kind} {newest} or older",
        remedy=remedy,
    )
    status: Status = "warn" if alternative else "fail"
    return Check(
        name,
        description,
        status,
        f"too new: nvcc {nvcc_text} accepts {kind} <= {newest}",
        diagnosis,
    )


def _check_msvc(
    name: str, kind: str, version: tuple[int, ...], description: str, nvcc: tuple[int, ...] | None
) -> Check:
    if kind != "msvc":
        target = kind.removeprefix("msvc-")
        diagnosis = diagnose(
            "host-compiler-unsupported",
            compiler=description,
            nvcc=".".join(map(str, (nvcc or ())[:2])),
            supported=f"the x64 cl.exe, not the {target} one",
            remedy='start Jupyter from the "x64 Native Tools Command Prompt for VS 2022" '
            "(not the x86 one), or let gsnb find the x64 cl.exe through vswhere",
        )
        return Check(name, description, "fail", f"builds for {target}, not x64", diagnosis)
    if nvcc is None:
        return Check(name, description, "ok")
    low, refused = host_limits(nvcc).msvc
    msc_ver = version[0] * 100 + version[1]
    if low <= msc_ver < refused:
        return Check(name, description, "ok", f"_MSC_VER {msc_ver} in [{low}, {refused})")
    diagnosis = diagnose(
        "host-compiler-unsupported",
        compiler=description,
        nvcc=".".join(map(str, nvcc[:2])),
        supported=f"_MSC_VER {low} to {refused - 1}",
        remedy="install Visual Studio 2022 (Build Tools) beside it and start Jupyter from its "
        '"x64 Native Tools Command Prompt"',
    )
    note = f"_MSC_VER {msc_ver} not in [{low}, {refused})"
    return Check(name, description, "fail", note, diagnosis)


def check_cxx(kind: str | None, description: str, cxx20: bool, windows: bool = False) -> Check:
    """The compiler torch uses for ``.cpp`` files must exist (and speak C++20 where needed)."""
    name = "C++ compiler (torch)"
    if kind is None:
        entry = "cl-not-found" if windows else "host-compiler-missing"
        return Check(name, "not found", "fail", "", diagnose(entry, what=" (c++ / CXX)"))
    return Check(name, description, "ok", "C++20 needed by torch" if cxx20 else "")


def check_ninja(found: str | None, on_path: bool) -> Check:
    """ninja must exist; when only the Python package has it, gsnb puts it on PATH."""
    if found is None:
        return Check("ninja", "not found", "fail", "", diagnose("ninja-missing"))
    note = "" if on_path else "from the ninja package; gsnb adds its folder to PATH"
    return Check("ninja", found, "ok", note)


def check_cache(path: str, problem: str | None, free: int | None, needed: int = 1 << 30) -> Check:
    """The cache folder must be writable, with room for a build."""
    if problem is not None:
        return Check(
            "build cache",
            path,
            "fail",
            problem,
            diagnose("cache-not-writable", cache_dir=path, why=f" ({problem})"),
        )
    if free is not None and free < needed:
        gib = free / 2**30
        diagnosis = diagnose("disk-full", where=f" soon: {gib:.2f} GiB free under {path}")
        return Check("build cache", path, "warn", f"only {gib:.2f} GiB free", diagnosis)
    room = "" if free is None else f"{free / 2**30:.0f} GiB free"
    return Check("build cache", path, "ok", room)


def check_sources(folder: str, count: int) -> Check:
    """There must be sources to build."""
    if count == 0:
        return Check(
            "sources",
            folder,
            "fail",
            "no *.cu or *.cpp",
            diagnose("sources-missing", sources=folder),
        )
    return Check("sources", folder, "ok", f"{count} files")


def check_toolkit(
    choice: ToolkitChoice,
    rejected: list[tuple[str, Path, str]],
    guess: Path | None,
    torch_cuda: str | None,
) -> list[Check]:
    """The chosen toolkit, environment variables that point nowhere, and torch's own guess."""
    checks = []
    for how, root, why in rejected:
        if how.startswith(("CUDA_HOME", "CUDA_PATH")):
            if " is one folder off the toolkit root " in why:
                right = why.split(" is one folder off the toolkit root ", 1)[1]
                diagnosis = diagnose("toolkit-root-off-by-one", value=root, root=right)
            else:
                diagnosis = diagnose("cuda-home-invalid", var=how, value=root, problem=why)
            checks.append(Check(how, str(root), "warn", "not a toolkit: ignored", diagnosis))
    toolkit = choice.toolkit
    if toolkit is None:
        major = version_tuple(torch_cuda)[:1]
        diagnosis = diagnose(
            "no-toolkit", torch_cuda=torch_cuda, torch_major=major[0] if major else None
        )
        checks.append(Check("CUDA toolkit", "not found", "fail", "", diagnosis))
        return checks
    value = f"{toolkit.root} (CUDA {toolkit.version_text}, via {toolkit.found_by})"
    checks.append(Check("CUDA toolkit", value, "ok", choice.reason))
    if guess is not None and not _same(guess, toolkit.root):
        problem = _missing(guess, toolkit)
        if not problem:
            note = f"torch alone would use {guess}; gsnb passes {toolkit.root}"
            checks.append(Check("torch's toolkit guess", str(guess), "info", note))
        if problem:
            diagnosis = diagnose(
                "toolkit-root-wrong", guess=guess, missing=problem, root=toolkit.root
            )
            note = f"torch alone would use {guess} (no {problem}); gsnb passes {toolkit.root}"
            checks.append(Check("torch's toolkit guess", str(guess), "info", note, diagnosis))
    return checks


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _missing(guess: Path, toolkit: Toolkit) -> str:
    lib = "lib/x64/cudart.lib" if toolkit.lib_dir.name == "x64" else "lib64/libcudart.so"
    wanted = ["include/cuda_runtime.h", lib]
    return " or ".join(w for w in wanted if not (guess / w).exists())


WATCHED_VARIABLES = (
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CC", "CXX", "NVCC_CCBIN",
    "MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "GSNB_CACHE_DIR", "VSCMD_ARG_TGT_ARCH",
)  # fmt: skip


def check_environment(seen: Mapping[str, str], stored: Mapping[str, str] | None) -> list[Check]:
    """The build's variables as this process sees them, and a warning for each one that a
    new shell would see differently (Windows keeps them in the registry)."""
    upper = {k.upper(): v for k, v in seen.items()}
    shown = ", ".join(f"{k}={upper[k]}" for k in WATCHED_VARIABLES if k in upper) or "none set"
    checks = [Check("variables seen", shown, "info", "as this process sees them")]
    for name in WATCHED_VARIABLES if stored is not None else ():
        value = stored.get(name)  # type: ignore[union-attr]
        now = upper.get(name)
        if value is not None and now != value:
            diagnosis = diagnose("env-not-seen", var=name, stored=value, seen=now or "nothing")
            checks.append(Check(name, now or "unset", "warn", f"new shells get {value}", diagnosis))
    return checks


def check_shm(size: int | None, needed: int = 1 << 30) -> Check | None:
    """``/dev/shm`` should hold ``needed`` bytes for DataLoader workers (None without one)."""
    if size is None:
        return None
    mib = f"{size / 2**20:.0f} MiB"
    if size < needed:
        diagnosis = diagnose("shm-small", size=mib)
        return Check("shared memory", mib, "warn", "DataLoader workers need more", diagnosis)
    return Check("shared memory", mib, "ok")


def check_dll_path(
    path_dirs: list[Path], toolkit_bin: Path | None, torch_cuda: str | None
) -> Check:
    """On Windows no other CUDA major's ``cudart64_*.dll`` may come before the toolkit on PATH."""
    major = version_tuple(torch_cuda)[:1]
    for folder in path_dirs:
        if toolkit_bin is not None and _same(folder, toolkit_bin):
            break
        for dll in sorted(folder.glob("cudart64_*.dll")):
            found = version_tuple(dll.stem.removeprefix("cudart64_"))[:1]
            if major and found and found != major:
                detail = f" ({dll} comes first on PATH)"
                diagnosis = diagnose("dll-load-failed", detail=detail, bin=toolkit_bin or None)
                note = "another CUDA's runtime first on PATH"
                return Check("DLL search", str(dll), "warn", note, diagnosis)
    return Check("DLL search", "no other CUDA runtime ahead on PATH", "ok")
