"""The warm check of ``gsnb build``: a hit only when the full build would hit, without torch.

One tiny extension is built once (real nvcc) and smoke-recorded for a GPU given as a
:class:`GpuView` (this machine has none); each test changes one thing the hit depends on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gsnb.toolchain import commands, warm
from gsnb.toolchain.builder import build_extension
from gsnb.toolchain.cache import MANIFEST, complete_build
from gsnb.toolchain.gpus import GPU, NvmlDevice, cuda_visible
from gsnb.toolchain.smoke_records import recorded_message, store_smoke_result

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"),
    reason="no CUDA toolkit on this machine",
)

ARCH = "8.0"
PREFIX = "gsnb_csrc"
DRIVER = "580.159.04"
VIEW = warm.GpuView([GPU(0, "NVIDIA A100-SXM4-80GB", (8, 0), 0, "nvml")], DRIVER)
EXT_CPP = """
#include <pybind11/pybind11.h>
int add_one(int x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""
KERNEL_CU = "int add_one(int x) { return x + 1; }\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny build whose smoke test is recorded as passed on ``VIEW``'s GPU: (sources, cache)."""
    root = tmp_path_factory.mktemp("warm")
    sources = root / "src"
    sources.mkdir()
    (sources / "ext.cpp").write_text(EXT_CPP)
    (sources / "kernel.cu").write_text(KERNEL_CU)
    cache = root / "cache"
    result = build_extension(sources, cache_dir=cache, arch=ARCH, prefix=PREFIX, progress=False)
    assert store_smoke_result(result.folder, result.manifest, identity(), True, 2e-7)
    return sources, cache


def identity(**change: str) -> dict[str, str]:
    version, cuda = warm.installed_torch()
    first = VIEW.gpus[0]
    base = {"gpu": first.name, "capability": first.arch, "driver": DRIVER}
    return {**base, "torch": version, "torch_cuda": cuda, **change}


def hit(sources: Path, cache: Path, arch: str | None = ARCH, view: warm.GpuView = VIEW):
    return warm.warm_hit(arch, cache, sources_dir=sources, prefix=PREFIX, view=view)


def test_a_matching_build_is_a_hit_that_reads_as_a_cache_hit(built):
    import torch

    sources, cache = built
    assert warm.installed_torch() == (torch.__version__, torch.version.cuda)
    found = hit(sources, cache)
    assert found is not None and found.cached and found.module is None
    record = found.manifest["smoke"][-1]
    lines = str(found).splitlines()
    assert lines[0].startswith(f"gsnb rasterizer ready: {found.name} for sm_80, cache hit in ")
    assert lines[1] == recorded_message(record) and "NVIDIA A100" in lines[1]
    assert found.smoke.recorded == record["when"]
    # Architectures from the GPUs (no --arch) find the same build.
    assert hit(sources, cache, arch=None).folder == found.folder


def test_changed_sources_fall_through(built, tmp_path):
    sources, cache = built
    changed = shutil.copytree(sources, tmp_path / "src")
    assert hit(changed, cache) is not None  # same contents: same key
    (changed / "kernel.cu").write_text(KERNEL_CU + "// edited\n")
    assert hit(changed, cache) is None


def test_another_torch_falls_through(built, monkeypatch):
    sources, cache = built
    version, cuda = warm.installed_torch()
    monkeypatch.setattr(warm, "installed_torch", lambda: (version + ".post1", cuda))
    assert hit(sources, cache) is None


def test_another_arch_gpu_or_driver_falls_through(built):
    sources, cache = built
    assert hit(sources, cache, arch="9.0") is None
    h200 = warm.GpuView([GPU(0, "NVIDIA H200", (9, 0), 0, "nvml")], DRIVER)
    assert hit(sources, cache, arch=None, view=h200) is None
    other = warm.GpuView([GPU(0, "NVIDIA A100-PCIE-40GB", (8, 0), 0, "nvml")], DRIVER)
    assert hit(sources, cache, view=other) is None
    assert hit(sources, cache, view=warm.GpuView(VIEW.gpus, "590.10")) is None


def test_a_missing_or_corrupt_record_falls_through(built, tmp_path):
    sources, cache = built
    copy = shutil.copytree(cache, tmp_path / "cache")
    (folder,) = [p for p in copy.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "smoke": []}))
    assert hit(sources, copy) is None
    (folder / MANIFEST).write_text(json.dumps({**manifest, "smoke": "passed"}))
    assert hit(sources, copy) is None
    (folder / MANIFEST).write_text(json.dumps(manifest)[:-20])
    assert hit(sources, copy) is None
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert complete_build(folder) is not None and hit(sources, copy) is not None


def test_a_tool_never_asked_is_not_run_and_falls_through(built, tmp_path):
    sources, cache = built
    copy = shutil.copytree(cache, tmp_path / "cache")
    (copy / ".gsnb-probes.json").unlink()
    started: list[str] = []
    sys.addaudithook(lambda e, a: e == "subprocess.Popen" and started.append(str(a[1][0])))
    assert hit(sources, copy) is None and started == []


def test_cuda_visible_devices_by_index_or_uuid():
    a, b = NvmlDevice("A", (8, 0), "GPU-a1"), NvmlDevice("B", (9, 0), "GPU-b2")
    same = [a, NvmlDevice("A", (8, 0), "GPU-a2")]
    assert cuda_visible([a, b], {}) is None  # CUDA's fastest-first order is unknown
    assert cuda_visible([a, b], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == [a, b]
    pci = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,0"}
    assert cuda_visible([a, b], pci) == [b, a]
    assert cuda_visible(same, {"CUDA_VISIBLE_DEVICES": "1"}) == [same[1]]
    assert cuda_visible([a, b], {"CUDA_VISIBLE_DEVICES": "GPU-b2,GPU-a"}) == [b, a]
    for bad in ("", "2", "0,0", "GPU-", "MIG-a1", "-1", "GPU-c"):
        assert cuda_visible(same, {"CUDA_VISIBLE_DEVICES": bad}) is None, bad


@pytest.mark.parametrize("flag", ["force", "clean", "verify"])
def test_force_clean_and_verify_skip_the_warm_check(flag, monkeypatch, capsys):
    asked: list[object] = []
    monkeypatch.setattr(warm, "warm_hit", lambda *a, **k: asked.append(a))
    monkeypatch.setattr(commands, "build_from_args", lambda args: "full build")
    options = {"force": False, "clean": False, "verify": False, flag: True}
    args = argparse.Namespace(arch=ARCH, cache_dir=None, **options)
    assert commands.build(args) == 0 and asked == []
    assert capsys.readouterr().out == "full build\n"
    args = argparse.Namespace(arch=ARCH, cache_dir=None, force=False, clean=False, verify=False)
    assert commands.build(args) == 0 and asked == [(ARCH, None)]


def test_warm_cli_never_imports_torch(built):
    sources, cache = built
    gpu = VIEW.gpus[0]
    code = (
        "import sys, pathlib\n"
        "import gsnb.toolchain.warm as w\n"
        "from gsnb.toolchain.gpus import GPU\n"
        f"w.default_sources_dir = lambda: pathlib.Path({str(sources)!r})\n"
        f"view = w.GpuView([GPU(0, {gpu.name!r}, {gpu.capability!r}, 0, 'nvml')], {DRIVER!r})\n"
        "w.gpu_view = lambda host: view\n"
        "from gsnb import cli\n"
        f"sys.exit(cli.main(['build', '--arch', {ARCH!r}, '--cache-dir', {str(cache)!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cache hit in" in done.stdout and "smoke test passed on NVIDIA A100" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "gsnb.toolchain.warm" in imported and "torch" not in imported
