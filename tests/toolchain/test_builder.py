"""Real builds of a tiny extension: cold, cached, recovered, forced, failing."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gsnb.toolchain.builder import build_extension, find_cached, plan_build
from gsnb.toolchain.cache import MANIFEST
from gsnb.toolchain.catalogue import recognise
from gsnb.toolchain.compilers import find_toolchain
from gsnb.toolchain.host import Host
from gsnb.toolchain.jit import JitRequest, compile_module
from gsnb.toolchain.probes import file_identity
from gsnb.toolchain.result import BuildError
from gsnb.toolchain.toolkit import find_toolkits, torch_guess

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"),
    reason="no CUDA toolkit on this machine",
)

EXT_CPP = """
#include <pybind11/pybind11.h>
int add_one(int x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""
KERNEL_CU = """
__global__ void add_one_kernel(int* x) { *x += 1; }
int add_one(int x) { return x + 1; }
"""
ARCH = "8.0"


def tiny_sources(folder: Path, kernel: str = KERNEL_CU, with_cpp: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.cu").write_text(kernel)
    if with_cpp:
        (folder / "ext.cpp").write_text(EXT_CPP)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One cold build of the tiny extension: (sources, cache, result)."""
    root = tmp_path_factory.mktemp("tiny")
    sources = tiny_sources(root / "src")
    result = build_extension(
        sources, cache_dir=root / "cache", arch=ARCH, prefix="gsnb_tiny", progress=False
    )
    return sources, root / "cache", result


def test_cold_build_compiles_links_loads_and_logs(tiny):
    _, cache_dir, result = tiny
    assert not result.cached
    assert result.module.add_one(41) == 42
    assert result.folder.parent == cache_dir and result.name.startswith("gsnb_tiny_")
    log = result.log.read_text()
    assert "[1/3]" in log and "[3/3]" in log and "-gencode=arch=compute_80,code=sm_80" in log
    manifest = json.loads((result.folder / MANIFEST).read_text())
    assert manifest["archs"] == [ARCH] and manifest["key"] == result.key
    assert manifest["toolchain"] == find_toolchain(Host.current(), torch.version.cuda).key()
    assert manifest["toolchain"]["nvcc"] and manifest["smoke"] == []
    steps = manifest["step_seconds"]
    assert set(steps) == {"kernel.cuda.o", "ext.o", f"{result.name}.so"}
    assert all(seconds > 0 for seconds in steps.values())
    assert set(result.timings) == {"plan", "load", "discover", "compile"}


def test_second_call_is_a_cache_hit_in_well_under_a_second(tiny):
    sources, cache_dir, first = tiny
    start = time.perf_counter()
    again = build_extension(
        sources, cache_dir=cache_dir, arch=ARCH, prefix="gsnb_tiny", progress=False
    )
    assert again.cached and again.folder == first.folder
    assert time.perf_counter() - start < 1.0


def test_cache_hit_in_a_fresh_process_starts_no_tool(tiny):
    sources, cache_dir, _ = tiny
    code = (
        "import sys, time, json, pathlib; from gsnb.toolchain.builder import build_extension;"
        "started = [];"
        "sys.addaudithook(lambda e, a: e == 'subprocess.Popen' and started.append(a[1][0]));"
        "t = time.perf_counter();"
        f"r = build_extension(pathlib.Path({str(sources)!r}),"
        f" cache_dir=pathlib.Path({str(cache_dir)!r}),"
        f" arch={ARCH!r}, prefix='gsnb_tiny', progress=False);"
        "print(json.dumps([r.cached, time.perf_counter() - t, r.module.add_one(1), started]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cached, seconds, value, started = json.loads(out.stdout.strip().splitlines()[-1])
    assert cached and value == 2 and seconds < 1.0
    # Native tools answered from the probes file; only scripts or launchers may run again.
    assert [tool for tool in started if file_identity(tool) is not None] == []


def test_a_new_compiler_version_misses_the_cache(tiny):
    sources, cache_dir, first = tiny
    toolchain = find_toolchain(Host.current(), torch.version.cuda)
    plan = plan_build(sources, cache_dir, ARCH, "gsnb_tiny", Host.current(), toolchain)
    assert find_cached(plan, cache_dir, "gsnb_tiny").folder == first.folder
    assert find_cached(dataclasses.replace(plan, given=False), cache_dir, "gsnb_tiny") is not None
    for change in ({"nvcc": "13.9.99"}, {"host_compiler": "gcc 99.1.0"}, {"cxx": "clang 99.1"}):
        other = plan.with_toolchain(dataclasses.replace(toolchain, **change))
        assert other.key != plan.key and other.name.startswith("gsnb_tiny_")
        assert find_cached(other, cache_dir, "gsnb_tiny") is None
        assert find_cached(dataclasses.replace(other, given=False), cache_dir, "gsnb_tiny") is None


def test_without_compilers_a_matching_build_is_still_used(tiny, tmp_path):
    sources, cache_dir, first = tiny
    bare = Host(
        system="Linux",
        env={"PATH": str(tmp_path)},
        usr_local=tmp_path,
        site_packages=(),
        scripts_dir=None,
    )
    result = build_extension(
        sources, cache_dir=cache_dir, arch=ARCH, prefix="gsnb_tiny", progress=False, host=bare
    )
    assert result.cached and result.folder == first.folder
    assert "no complete toolchain was found (nvcc ?" in "\n".join(result.notes)


def test_stale_lock_and_half_built_cache_are_recovered(tiny, tmp_path):
    sources, cache_dir, first = tiny
    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    folder = copy / first.folder.name
    (folder / MANIFEST).unlink()  # killed before the manifest was written
    (folder / "lock").write_text("")  # torch's own lock file, left behind
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (copy / f"{first.name}.owner.json").write_text(json.dumps({"pid": int(dead.stdout)}))
    result = build_extension(sources, cache_dir=copy, arch=ARCH, prefix="gsnb_tiny", progress=False)
    assert not result.cached and result.module.add_one(1) == 2
    notes = "\n".join(result.notes)
    assert f"pid {int(dead.stdout)}" in notes and "half-finished build" in notes
    assert (folder / MANIFEST).is_file()


def test_force_rebuilds_a_complete_build(tiny, tmp_path):
    sources, cache_dir, _ = tiny
    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    result = build_extension(
        sources, cache_dir=copy, arch=ARCH, prefix="gsnb_tiny", force=True, progress=False
    )
    assert not result.cached and result.notes == []


def test_compile_error_names_file_line_and_log(tmp_path):
    sources = tiny_sources(tmp_path / "src", kernel="int broken( { return }\n", with_cpp=False)
    with pytest.raises(BuildError) as caught:
        build_extension(
            sources, cache_dir=tmp_path / "cache", arch=ARCH, prefix="gsnb_tiny", progress=False
        )
    err = caught.value
    assert err.headline == "the build failed"
    assert err.diagnoses[0].entry.id == "compile-error" and "kernel.cu" in err.diagnoses[0].cause
    assert err.log is not None and "error" in err.log_text()
    assert str(err.log) in str(err)


def test_unsupported_arch_stops_before_compiling(tmp_path):
    toolkit = find_toolkits(Host.current()).toolkits[0]
    if toolkit.version is None or toolkit.version[0] < 13:
        pytest.skip("needs CUDA 13, which dropped sm_50")
    sources = tiny_sources(tmp_path / "src")
    with pytest.raises(BuildError) as caught:
        build_extension(
            sources, cache_dir=tmp_path / "cache", arch="5.0", prefix="gsnb_tiny", progress=False
        )
    assert caught.value.diagnoses[0].entry.id == "arch-unsupported"
    assert not any((tmp_path / "cache").glob("gsnb_tiny_*"))


def test_unwritable_cache_and_missing_sources(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BuildError) as caught:
        build_extension(
            tiny_sources(tmp_path / "src"), cache_dir=blocker / "cache", arch=ARCH, progress=False
        )
    assert "cache-not-writable" in [d.entry.id for d in caught.value.diagnoses]
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError) as caught:
        build_extension(tmp_path / "empty", cache_dir=tmp_path / "c", arch=ARCH, progress=False)
    assert [d.entry.id for d in caught.value.diagnoses] == ["sources-missing"]


def test_ninja_missing_stops_before_compiling(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nvcc", "gcc", "g++", "c++"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    host = Host(system="Linux", env={**os.environ, "PATH": str(bin_dir)}, scripts_dir=None)
    with pytest.raises(BuildError) as caught:
        build_extension(
            tiny_sources(tmp_path / "src"),
            cache_dir=tmp_path / "c",
            arch=ARCH,
            progress=False,
            host=host,
        )
    assert [d.entry.id for d in caught.value.diagnoses] == ["ninja-missing"]


def test_no_gpu_and_no_arch_asks_for_one(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(BuildError) as caught:
        build_extension(tiny_sources(tmp_path / "src"), cache_dir=tmp_path / "c", progress=False)
    assert (
        caught.value.diagnoses[0].entry.id == "no-gpu" and "--arch" in caught.value.diagnoses[0].fix
    )


def test_torch_guessing_the_wrapper_root_fails_to_link(tmp_path):
    host = Host.current()
    guess = torch_guess(host)
    if guess is None or (guess / "lib64" / "libcudart.so").exists():
        pytest.skip("torch's own guess of the toolkit root works on this machine")
    toolkit = find_toolkits(host).toolkits[0]
    sources = tiny_sources(tmp_path / "src", with_cpp=False)
    lines: list[str] = []
    request = JitRequest(
        name="gsnb_wrong_root",
        sources=[sources / "kernel.cu"],
        build_dir=tmp_path / "build",
        cuda_home=guess,
        nvcc_flags=["-gencode=arch=compute_80,code=sm_80"],
        host_flags=[],
        env={"PATH": f"{toolkit.nvcc.parent}{os.pathsep}{os.environ['PATH']}"},
    )
    (tmp_path / "build").mkdir()
    with pytest.raises(RuntimeError):
        compile_module(request, lines.append)
    found = recognise("\n".join(lines))
    assert found[0].entry.id == "toolkit-root-wrong", lines[-5:]


def test_sources_edited_during_the_build_are_not_cached(tmp_path):
    import threading

    sources = tiny_sources(tmp_path / "src")
    lines: list[str] = []

    def edit_when_compiling() -> None:
        while not any((tmp_path / "cache").glob("gsnb_tiny_*/build.ninja")):
            time.sleep(0.05)
        (sources / "kernel.cu").write_text(KERNEL_CU + "// edited\n")
        lines.append("edited")

    editor = threading.Thread(target=edit_when_compiling, daemon=True)
    editor.start()
    with pytest.raises(BuildError) as caught:
        build_extension(
            sources, cache_dir=tmp_path / "cache", arch=ARCH, prefix="gsnb_tiny", progress=False
        )
    editor.join(timeout=5)
    assert lines == ["edited"]
    assert caught.value.diagnoses[0].entry.id == "sources-changed"
    assert not any((tmp_path / "cache").glob(f"gsnb_tiny_*/{MANIFEST}"))
