"""The compilers' versions that enter the cache key, found on fake and real machines."""

from __future__ import annotations

import torch

from gsnb.toolchain.cache import build_key
from gsnb.toolchain.compilers import Toolchain, find_toolchain
from gsnb.toolchain.environment import discover
from gsnb.toolchain.host import Host

UBUNTU_GCC = "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\nCopyright (C) Free Software Foundation"
UBUNTU_CXX = UBUNTU_GCC.replace("gcc", "c++", 1)
GCC16 = "gcc (GCC) 16.1.1 20260501\nCopyright (C) 2026 Free Software Foundation, Inc."


def _machine(tmp_path, fakes, host_factory, nvcc="12.6", gcc=UBUNTU_GCC, extra=()):
    root = fakes.toolkit(tmp_path / "cuda", nvcc)
    bin_dir = tmp_path / "bin"
    fakes.exe(bin_dir, "gcc", gcc)
    fakes.exe(bin_dir, "c++", UBUNTU_CXX)
    for name, banner in extra:
        fakes.exe(bin_dir, name, banner)
    return host_factory({"PATH": str(bin_dir), "CUDA_HOME": str(root)})


def test_versions_of_nvcc_and_both_host_compilers(tmp_path, fakes, host_factory):
    host = _machine(tmp_path, fakes, host_factory)
    found = find_toolchain(host, "12.6")
    assert found == Toolchain("12.6.77", "gcc 11.4.0", "gcc 11.4.0", tmp_path / "cuda")
    assert found.known and found.key() == {
        "nvcc": "12.6.77",
        "host_compiler": "gcc 11.4.0",
        "cxx": "gcc 11.4.0",
    }


def test_a_too_new_gcc_is_replaced_by_the_gcc_n_the_build_uses(tmp_path, fakes, host_factory):
    extra = [("gcc-13", "gcc-13 (GCC) 13.3.0"), ("g++-13", "g++-13 (GCC) 13.3.0")]
    host = _machine(tmp_path, fakes, host_factory, nvcc="13.0", gcc=GCC16, extra=extra)
    found = find_toolchain(host, "13.0")
    assert (found.host_compiler, found.cxx) == ("gcc 13.3.0", "gcc 13.3.0")


def test_without_a_toolkit_the_toolchain_is_unknown(host_factory):
    found = find_toolchain(host_factory(), "13.0")
    assert found.nvcc is None and not found.known and "nvcc ?" in str(found)


def test_a_new_compiler_version_changes_the_key(tmp_path, fakes, host_factory):
    keys = set()
    for nvcc, gcc in [("12.6", UBUNTU_GCC), ("12.8", UBUNTU_GCC), ("12.8", GCC16)]:
        host = _machine(tmp_path, fakes, host_factory, nvcc=nvcc, gcc=gcc)
        keys.add(build_key("fp", ["9.0"], find_toolchain(host, "12.6").key()))
    assert len(keys) == 3


def test_discovery_and_the_warm_path_agree(tmp_path, fakes, host_factory):
    """The key of a build (from discovery) must equal the key a cache hit looks for."""
    extra = [("gcc-13", "gcc-13 (GCC) 13.3.0"), ("g++-13", "g++-13 (GCC) 13.3.0")]
    fake = _machine(tmp_path, fakes, host_factory, nvcc="13.0", gcc=GCC16, extra=extra)
    for host in (fake, Host.current()):
        env = discover("9.0", cache_dir=tmp_path / "cache", host=host)
        assert env.toolchain() == find_toolchain(host, torch.version.cuda)
