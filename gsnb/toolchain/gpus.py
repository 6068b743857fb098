"""The GPUs this process can use, their compute capability, and the NVIDIA driver."""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Mapping
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


def proc_driver_version(host: Host) -> str | None:
    """The NVIDIA driver version (``"580.65.06"``) from ``/proc/driver/nvidia/version``."""
    text = host.read_text(host.proc / "driver" / "nvidia" / "version", 4096)
    match = _DRIVER.search(text) if text else None
    return match.group(1) if match else None


def driver_version(host: Host) -> str | None:
    """The NVIDIA driver version (``"580.65.06"``) from ``/proc`` or ``nvidia-smi``."""
    return proc_driver_version(host) or smi_gpus(host)[1]


@dataclass(frozen=True)
class NvmlDevice:
    """One GPU as the driver's management library (NVML) lists it, in PCI bus order.

    Attributes:
        name: e.g. ``"NVIDIA H200"``; capability: ``(9, 0)``; uuid: ``"GPU-8f2c..."``.
    """

    name: str
    capability: tuple[int, int]
    uuid: str


def nvml_devices() -> list[NvmlDevice] | None:
    """Every GPU of the machine from NVML (``libnvidia-ml.so.1``, no process, no CUDA context);
    None when the library or an answer is missing.

    Example:
        >>> found = nvml_devices()
        >>> found is None or all(d.capability[0] >= 3 for d in found)
        True
    """
    name = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"
    try:
        nvml = ctypes.CDLL(name)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        found = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            text, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            answers = (
                nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
                nvml.nvmlDeviceGetName(handle, text, 96),
                nvml.nvmlDeviceGetUUID(handle, uuid, 96),
                nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)
                ),
            )
            if any(answers):
                return None
            found.append(
                NvmlDevice(text.value.decode(), (major.value, minor.value), uuid.value.decode())
            )
        return found
    finally:
        nvml.nvmlShutdown()


def cuda_visible(devices: list[NvmlDevice], env: Mapping[str, str]) -> list[NvmlDevice] | None:
    """The devices CUDA shows this process, in CUDA's order, or None when that cannot be told
    from NVML's list alone.

    ``CUDA_VISIBLE_DEVICES`` may list indices or ``GPU-`` UUID prefixes. Indices count in
    CUDA's order, which is NVML's PCI order only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    (default: fastest first), so with different GPUs and no such order the answer is
    None; so it is for MIG instances, an unknown, repeated or malformed entry, or no GPU.

    Example:
        >>> a, b = NvmlDevice("A", (8, 0), "GPU-a1"), NvmlDevice("B", (9, 0), "GPU-b2")
        >>> [d.name for d in cuda_visible([a, b], {"CUDA_VISIBLE_DEVICES": "GPU-b"})]
        ['B']
        >>> cuda_visible([a, b], {"CUDA_VISIBLE_DEVICES": "1"}) is None
        True
    """
    alike = len({(d.name, d.capability) for d in devices}) == 1
    in_pci_order = env.get("CUDA_DEVICE_ORDER", "").upper() == "PCI_BUS_ID"
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        chosen = list(devices)
    else:
        chosen = []
        for entry in (e.strip() for e in listed.split(",")):
            if entry.isdigit() and int(entry) < len(devices) and (alike or in_pci_order):
                chosen.append(devices[int(entry)])
            elif entry.startswith("GPU-"):
                matches = [d for d in devices if d.uuid.startswith(entry)]
                if len(matches) != 1:
                    return None
                chosen.append(matches[0])
            else:
                return None
        if len({d.uuid for d in chosen}) != len(chosen):
            return None
    if not chosen or (listed is None and not alike and not in_pci_order):
        return None
    return chosen


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
