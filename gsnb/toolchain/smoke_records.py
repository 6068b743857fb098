"""Which GPUs a cached build passed its smoke test on, kept in the build's manifest.

A passed smoke test is recorded under the manifest's ``"smoke"`` list with the GPU's
name and compute capability, the driver, torch and its CUDA version. A later cache
hit in the same situation skips the test (its first CUDA use costs seconds); any
change of GPU, driver or torch runs it again, and a failed test removes the record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gsnb.toolchain.cache import build_lock, complete_build, read_manifest, write_manifest
from gsnb.toolchain.gpus import cuda_driver_api, driver_version
from gsnb.toolchain.host import Host
from gsnb.toolchain.smoke import SmokeResult, smoke_test

MAX_RECORDS = 16
LOCK_TIMEOUT = 5.0


def gpu_identity(host: Host | None = None) -> dict[str, str] | None:
    """The current CUDA device as a smoke record names it; None without a GPU or a known driver.

    Example:
        >>> import torch
        >>> ident = gpu_identity()
        >>> ident is None or sorted(ident) == ["capability", "driver", "gpu", "torch", "torch_cuda"]
        True
    """
    import torch

    if torch.version.cuda is None or not torch.cuda.is_available():
        return None
    driver = driver_version(host or Host.current())
    if driver is None:  # the coarser CUDA version of the driver, straight from the library
        api = cuda_driver_api()
        driver = None if api is None else f"supports CUDA {api // 1000}.{api % 1000 // 10}"
    if driver is None:  # an unknown driver could hide a driver change: always test
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "gpu": str(props.name),
        "capability": f"{props.major}.{props.minor}",
        "driver": driver,
        "torch": str(torch.__version__),
        "torch_cuda": str(torch.version.cuda),
    }


def _records(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = manifest.get("smoke")
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _same_gpu(record: Mapping[str, Any], identity: Mapping[str, str]) -> bool:
    return all(record.get(name) == value for name, value in identity.items())


def recorded_pass(
    manifest: Mapping[str, Any], identity: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """The record of a passed smoke test of this build on ``identity``'s GPU, or None.

    Example:
        >>> ident = {"gpu": "NVIDIA H200", "capability": "9.0", "driver": "580.65.06",
        ...          "torch": "2.11.0+cu130", "torch_cuda": "13.0"}
        >>> m = {"smoke": [{**ident, "status": "passed", "max_error": 1e-6, "when": 0.0}]}
        >>> recorded_pass(m, ident)["max_error"]
        1e-06
        >>> recorded_pass(m, {**ident, "driver": "590.10"}) is None
        True
    """
    if not identity:
        return None
    for record in _records(manifest):
        if record.get("status") == "passed" and _same_gpu(record, identity):
            return record
    return None


def store_smoke_result(
    folder: Path,
    manifest: Mapping[str, Any],
    identity: Mapping[str, str],
    passed: bool,
    max_error: float | None,
    timeout: float = LOCK_TIMEOUT,
) -> bool:
    """Record a passed test (or forget this GPU's record after a failed one) in ``folder``'s
    manifest, under the build's lock; True when the manifest was written.

    Nothing is written when the folder no longer holds the same build (``key`` and
    ``created`` of ``manifest``), the lock stays busy for ``timeout`` seconds or the
    cache is read-only.

    Example:
        >>> import tempfile, pathlib
        >>> gone = pathlib.Path(tempfile.mkdtemp()) / "gone"
        >>> store_smoke_result(gone, {"name": "x"}, {}, True, 0.0)
        False
    """
    name = str(manifest.get("name", folder.name))
    try:
        with build_lock(folder.parent, name, timeout=timeout):
            current = complete_build(folder, str(manifest.get("key")))
            if current is None or current.manifest.get("created") != manifest.get("created"):
                return False
            kept = [r for r in _records(current.manifest) if not _same_gpu(r, identity)]
            if passed:
                record = {**identity, "status": "passed", "max_error": max_error}
                kept.append({**record, "when": time.time()})
            if not passed and len(kept) == len(_records(current.manifest)):
                return False  # nothing recorded for this GPU: nothing to forget
            write_manifest(folder, {**current.manifest, "smoke": kept[-MAX_RECORDS:]})
    except (OSError, TimeoutError):
        return False
    return True


def recorded_message(record: Mapping[str, Any]) -> str:
    """One sentence for a smoke test not run because it passed before.

    Example:
        >>> recorded_message({"gpu": "NVIDIA H200", "driver": "580.65.06", "max_error": 2e-7,
        ...                   "when": 0.0}).startswith("smoke test passed on NVIDIA H200")
        True
    """
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(record.get("when", 0.0))))
    error = record.get("max_error")
    diff = f": max difference {error:.1e}" if isinstance(error, (int, float)) else ""
    return (
        f"smoke test passed on {record.get('gpu')} (driver {record.get('driver')}) "
        f"on {when}{diff}; not run again (--verify / verify=True runs it)"
    )


def recorded_result(record: Mapping[str, Any]) -> SmokeResult:
    """The result of a smoke test not run again because ``record`` says it passed before.

    Example:
        >>> recorded_result({"gpu": "NVIDIA H200", "driver": "580.65.06", "max_error": 2e-7,
        ...                  "when": 0.0}).recorded
        0.0
    """
    error = record.get("max_error")
    return SmokeResult(
        "passed",
        recorded_message(record),
        float(error) if isinstance(error, (int, float)) else None,
        recorded=float(record.get("when", 0.0)),
    )


def smoke_checked(
    folder: Path,
    manifest: Mapping[str, Any],
    archs: list[str],
    identity: Mapping[str, str] | None,
    *,
    verify: bool = False,
) -> tuple[SmokeResult, dict[str, Any]]:
    """The smoke test's result for the build in ``folder`` on the GPU ``identity`` names.

    A passed test recorded for this GPU, driver and torch is reused unless ``verify``;
    otherwise the test runs (on the module of this process, gsnb.toolchain.use_module)
    and its outcome is recorded. Returns the result and the manifest as it is now.

    Example:
        >>> import pathlib
        >>> ident = {"gpu": "NVIDIA H200", "capability": "9.0", "driver": "580.65.06",
        ...          "torch": "2.11.0+cu130", "torch_cuda": "13.0"}
        >>> m = {"smoke": [{**ident, "status": "passed", "max_error": 1e-6, "when": 0.0}]}
        >>> smoke, _ = smoke_checked(pathlib.Path("unused"), m, ["9.0"], ident)
        >>> smoke.status, smoke.recorded
        ('passed', 0.0)
    """
    record = None if verify else recorded_pass(manifest, identity)
    if record is not None:
        return recorded_result(record), dict(manifest)
    smoke = smoke_test(built_for=", ".join(archs))
    if identity is None or smoke.status == "skipped":
        return smoke, dict(manifest)
    if store_smoke_result(folder, manifest, identity, smoke.status == "passed", smoke.max_error):
        manifest = read_manifest(folder) or manifest
    return smoke, dict(manifest)
