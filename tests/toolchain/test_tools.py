"""Version probes against fake nvcc, gcc, clang and ninja scripts."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gsnb.toolchain import rules, tools
from gsnb.toolchain.tools import (
    cxx_compiler,
    find_ninja,
    gcc_alternatives,
    nvcc_host_compiler,
    nvcc_version,
    probe_compiler,
)

UBUNTU_GCC = (
    "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\nCopyright (C) 2021 Free Software Foundation, Inc."
)
FEDORA_GCC16 = (
    "gcc (GCC) 16.1.1 20260501 (Red Hat 16.1.1-1)\n"
    "Copyright (C) 2026 Free Software Foundation, Inc."
)
CLANG = "Ubuntu clang version 21.1.0 (1ubuntu1)\nTarget: x86_64-pc-linux-gnu\nThread model: posix"


@pytest.mark.parametrize(
    ("banner", "expected"),
    [("12.6", (12, 6, 77)), ("13.1", (13, 1, 77)), ("11.8", (11, 8, 77))],
)
def test_nvcc_version_from_its_banner(fakes, tmp_path, host_factory, banner, expected):
    nvcc = fakes.exe(tmp_path / "bin", "nvcc", fakes.banner(banner))
    assert nvcc_version(nvcc, host_factory()) == expected


def test_nvcc_that_prints_nothing_useful(fakes, tmp_path, host_factory):
    nvcc = fakes.exe(tmp_path / "bin", "nvcc", "Segmentation fault", code=139)
    assert nvcc_version(nvcc, host_factory()) is None


@pytest.mark.parametrize(
    ("banner", "kind", "version"),
    [
        (UBUNTU_GCC, "gcc", (11, 4, 0)),
        (FEDORA_GCC16, "gcc", (16, 1, 1)),
        (CLANG, "clang", (21, 1, 0)),
    ],
)
def test_compiler_kind_and_version(fakes, tmp_path, host_factory, banner, kind, version):
    compiler = probe_compiler(fakes.exe(tmp_path, "cc", banner), host_factory(), "PATH")
    assert (compiler.kind, compiler.version) == (kind, version)


def test_nvcc_host_compiler_prefers_nvcc_ccbin_then_cc_then_gcc(fakes, tmp_path, host_factory):
    bin_dir = tmp_path / "bin"
    fakes.exe(bin_dir, "gcc", UBUNTU_GCC)
    fakes.exe(bin_dir, "gcc-16", FEDORA_GCC16)
    fakes.exe(bin_dir, "clang", CLANG)
    path = {"PATH": str(bin_dir)}
    assert nvcc_host_compiler(host_factory(path)).version == (11, 4, 0)
    chosen = nvcc_host_compiler(host_factory({**path, "CC": "gcc-16"}))
    assert (chosen.found_by, chosen.version) == ("CC", (16, 1, 1))
    chosen = nvcc_host_compiler(host_factory({**path, "CC": "gcc-16", "NVCC_CCBIN": "clang"}))
    assert (chosen.found_by, chosen.kind) == ("NVCC_CCBIN", "clang")


def test_no_host_compiler_is_a_failure(host_factory):
    host = host_factory()
    assert nvcc_host_compiler(host) is None and cxx_compiler(host) is None
    check = rules.check_host_compiler(None, (), "", (13, 0, 88))
    assert check.status == "fail" and check.diagnosis.entry.id == "host-compiler-missing"


def test_too_new_gcc_with_a_supported_gcc_n_beside_it(fakes, tmp_path, host_factory):
    bin_dir = tmp_path / "bin"
    fakes.exe(bin_dir, "gcc", FEDORA_GCC16)
    fakes.exe(bin_dir, "gcc-13", "gcc-13 (GCC) 13.3.0")
    fakes.exe(bin_dir, "g++-13", "g++-13 (GCC) 13.3.0")
    fakes.exe(bin_dir, "gcc-12", "gcc-12 (GCC) 12.4.0")  # no g++-12: not usable
    host = host_factory({"PATH": str(bin_dir)})
    compiler = nvcc_host_compiler(host)
    alternatives = gcc_alternatives(host)
    assert [c.version[0] for c in alternatives] == [13]
    failing = rules.check_host_compiler(compiler.kind, compiler.version, str(compiler), (13, 0, 88))
    assert failing.status == "fail" and failing.diagnosis.entry.id == "host-compiler-unsupported"
    assert "gcc 15 or older" in failing.diagnosis.cause
    rescued = rules.check_host_compiler(
        compiler.kind,
        compiler.version,
        str(compiler),
        (13, 0, 88),
        alternative=str(alternatives[0]),
    )
    assert rescued.status == "warn" and "gcc-13" in rescued.diagnosis.fix


def test_ninja_on_path_in_the_scripts_folder_or_missing(fakes, tmp_path, host_factory):
    scripts = tmp_path / "venv-bin"
    fakes.exe(scripts, "ninja", "1.13.2")
    found = find_ninja(host_factory(scripts_dir=scripts))
    assert (found.version, found.on_path) == ("1.13.2", False)
    on_path = fakes.exe(tmp_path / "bin", "ninja", "1.11.1")
    found = find_ninja(host_factory({"PATH": str(on_path.parent)}, scripts_dir=scripts))
    assert (found.version, found.on_path) == ("1.11.1", True)
    missing = find_ninja(host_factory())
    assert missing is None
    check = rules.check_ninja(None, False)
    assert check.status == "fail" and check.diagnosis.entry.id == "ninja-missing"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_the_real_cxx_compiler_is_identified(host_factory):
    host = host_factory({"PATH": str(Path(shutil.which("g++")).parent)})
    compiler = cxx_compiler(host) or probe_compiler(Path(shutil.which("g++")), host, "PATH")
    assert compiler.kind in ("gcc", "clang") and compiler.version[0] >= 5


def _gxx(folder: Path, shared: bool, static: bool = True) -> Path:
    """A g++ that answers -print-file-name as a toolchain with (or without) libstdc++.so."""
    lib = folder / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libstdc++.a").write_text("")
    if shared:
        (lib / "libstdc++.so").write_text("")
    archive = lib / "libstdc++.a" if static else "libstdc++.a"
    script = folder / "g++"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  -print-file-name=libstdc++.so) [ -e {lib}/libstdc++.so ] && echo {lib}/libstdc++.so"
        " || echo libstdc++.so ;;\n"
        f"  -print-file-name=libstdc++.a) echo {archive} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return script


def _process_with_runtime(host_factory, tmp_path: Path) -> tuple[object, Path]:
    runtime = tmp_path / "usr-lib" / "libstdc++.so.6.0.33"
    runtime.parent.mkdir()
    runtime.write_text("")
    maps = tmp_path / "proc" / "self" / "maps"
    maps.parent.mkdir(parents=True)
    maps.write_text(
        f"7f00-7f10 r-xp 00000000 08:01 1 {runtime}\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /lib/libc.so.6\n"
    )
    return host_factory(proc=tmp_path / "proc"), runtime


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script stands in for g++")
def test_a_gxx_with_only_a_static_runtime_links_the_process_runtime(host_factory, tmp_path):
    host, runtime = _process_with_runtime(host_factory, tmp_path)
    assert tools.shared_cxx_runtime(host, _gxx(tmp_path / "static", shared=False)) == runtime


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script stands in for g++")
def test_a_gxx_with_a_shared_runtime_is_left_alone(host_factory, tmp_path):
    host, _ = _process_with_runtime(host_factory, tmp_path)
    assert tools.shared_cxx_runtime(host, _gxx(tmp_path / "shared", shared=True)) is None
    no_runtime = _gxx(tmp_path / "none", shared=False, static=False)
    assert tools.shared_cxx_runtime(host, no_runtime) is None


def test_the_process_runtime_comes_from_its_memory_map(tmp_path):
    assert tools.loaded_libstdcxx(tmp_path / "missing") is None
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 00000000 08:01 1 /lib/libc.so.6\n")
    assert tools.loaded_libstdcxx(maps) is None
