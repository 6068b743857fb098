"""GPU and driver discovery: nvidia-smi output, /proc, and a process that sees no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gsnb.toolchain import rules
from gsnb.toolchain.gpus import cuda_driver_api, driver_version, smi_gpus

SMI = "0, NVIDIA GeForce RTX 5090, 12.0, 32607, 575.57.08\n1, NVIDIA H200, 9.0, 143771, 575.57.08"
PROC = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:29 UTC 2025\n"


def test_nvidia_smi_fallback_lists_gpus_and_driver(fakes, tmp_path, host_factory):
    smi = fakes.exe(tmp_path / "bin", "nvidia-smi", SMI)
    gpus, driver = smi_gpus(host_factory({"PATH": str(smi.parent)}))
    assert [(g.name, g.capability) for g in gpus] == [
        ("NVIDIA GeForce RTX 5090", (12, 0)),
        ("NVIDIA H200", (9, 0)),
    ]
    assert driver == "575.57.08" and gpus[1].memory == 143771 * 2**20


def test_nvidia_smi_that_cannot_reach_the_driver(fakes, tmp_path, host_factory):
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    smi = fakes.exe(tmp_path / "bin", "nvidia-smi", message, code=9)
    assert smi_gpus(host_factory({"PATH": str(smi.parent)})) == ([], None)


def test_driver_version_from_proc_first(fakes, tmp_path, host_factory):
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(PROC)
    smi = fakes.exe(tmp_path / "bin", "nvidia-smi", SMI)
    assert driver_version(host_factory({"PATH": str(smi.parent)})) == "580.65.06"
    (tmp_path / "proc" / "driver" / "nvidia" / "version").unlink()
    assert driver_version(host_factory({"PATH": str(smi.parent)})) == "575.57.08"
    assert driver_version(host_factory()) is None


def test_the_driver_library_reports_a_cuda_version_or_nothing():
    version = cuda_driver_api()  # None on a machine without the NVIDIA driver
    assert version is None or (version >= 10000 and version % 10 == 0)


def test_driver_too_old_for_the_cuda_major():
    check = rules.check_driver("560.35.03", "13.0", windows=False, have_gpu=True)
    assert check.status == "fail" and check.diagnosis.entry.id == "driver-too-old"
    assert "580.65.06" in check.diagnosis.cause
    assert rules.check_driver("580.65.06", "13.0", windows=False, have_gpu=True).status == "ok"
    assert rules.check_driver("575.57.08", "12.8", windows=False, have_gpu=True).status == "ok"


def test_a_process_with_its_gpus_hidden_sees_none():
    code = (
        "import json; from gsnb.toolchain.environment import discover;"
        "env = discover(cache_dir=__import__('pathlib').Path(__import__('tempfile').mkdtemp()));"
        "gpu = next(c for c in env.checks() if c.name == 'GPU');"
        "d = gpu.diagnosis;"
        "print(json.dumps([len(env.gpus), gpu.status, d.entry.id, d.cause]))"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    count, status, entry, cause = json.loads(out.stdout.strip().splitlines()[-1])
    assert (count, status, entry) == (0, "fail", "no-gpu")
    assert "CUDA_VISIBLE_DEVICES=''" in cause
