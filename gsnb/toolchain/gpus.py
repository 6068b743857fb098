"""The GPUs this process can use, their compute capability, and the NVIDIA driver."""

from __future__ import annotations

import ctypes
import re
import sys
from dataclasses import dataclass

from gsnb.toolchain.host import Host

_DRIVER = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class GPU:
    """One GPU.

    Attributes:
        index: its index in this process (torch) or in ``nvidia-smi``.
        name: e.g. ``"NVIDIA H200"``.
        capability: compute capability ``(major, minor)``, e.g. ``(9, 0)``.
        memory: total memory in bytes (0 when unknown).
        seen_by: ``"torch"`` or ``"nvidia-smi"``.

    Example:
        >>> GPU(0, "NVIDIA H200", (9, 0), 0, "torch").arch
        '9.0'
    """

    index: int
    name: str
    capability: tuple[int, int]
    memory: int
    seen_by: str

    @property
    def arch(self) -> str:
        """``"9.0"``."""
        return f"{self.capability[0]}.{self.capability[1]}"


def torch_gpus() -> list[GPU]:
    """The GPUs torch sees in this process (honours ``CUDA_VISIBLE_DEVICES``).

    Example:
        >>> isinstance(torch_gpus(), list)
        True
    """
    import torch

    if torch.version.cuda is None or not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(GPU(index, props.name, (props.major, props.minor), props.total_memory, "torch"))
    return gpus


def smi_gpus(host: Host) -> tuple[list[GPU], str | None]:
    """GPUs and driver version from ``nvidia-smi`` (``([], None)`` without it)."""
    smi = host.which("nvidia-smi")
    if smi is None:
        return [], None
    query = "index,name,compute_cap,memory.total,driver_version"
    answer = host.run([str(smi), f"--query-gpu={query}", "--format=csv,noheader,nounits"])
    if answer is None or answer[0] != 0:
        return [], None
    gpus, driver = [], None
    for line in answer[1].splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not re.fullmatch(r"\d+\.\d+", parts[2]):
            continue
        major, minor = (int(x) for x in parts[2].split("."))
        memory = int(float(parts[3]) * 2**20) if re.fullmatch(r"[\d.]+", parts[3]) else 0
        gpus.append(GPU(int(parts[0]), parts[1], (major, minor), memory, "nvidia-smi"))
        driver = parts[4]
    return gpus, driver


def driver_version(host: Host) -> str | None:
    """The NVIDIA driver version (``"580.65.06"``) from ``/proc`` or ``nvidia-smi``."""
    text = host.read_text(host.proc / "driver" / "nvidia" / "version", 4096)
    if text:
        match = _DRIVER.search(text)
        if match:
            return match.group(1)
    return smi_gpus(host)[1]


def cuda_driver_api() -> int | None:
    """The CUDA version the installed driver supports (``13000`` for 13.0), or None.

    Asks the driver library itself (``cuDriverGetVersion``: no process, no GPU context).

    Example:
        >>> version = cuda_driver_api()
        >>> version is None or version >= 1000
        True
    """
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.dylib")
    for name in names:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if library.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return version.value
    return None
