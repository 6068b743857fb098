"""The rules' data tables and verdicts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gsnb.toolchain import rules
from gsnb.toolchain.host import Host
from gsnb.toolchain.toolkit import find_toolkits


@pytest.mark.parametrize(
    ("arch", "nvcc", "expected"),
    [
        ((12, 0), (12, 6), "sm_120 needs nvcc 12.8 or newer"),
        ((12, 0), (12, 8), None),
        ((10, 0), (12, 4), "sm_100 needs nvcc 12.8 or newer"),
        ((9, 0), (11, 8), None),
        ((8, 9), (11, 7), "sm_89 needs nvcc 11.8 or newer"),
        ((6, 1), (13, 0), "nvcc 13.0 dropped sm_61 (the last nvcc for it is 12.x)"),
        ((7, 5), (13, 0), None),
        ((3, 5), (12, 0), "nvcc 12.0 dropped sm_35 (the last nvcc for it is 11.x)"),
        ((9, 9), (13, 0), "sm_99 is not a known NVIDIA architecture"),
    ],
)
def test_arch_support_table(arch, nvcc, expected):
    assert rules.arch_support(arch, nvcc) == expected


def test_unsupported_arch_names_the_fix():
    check = rules.check_archs([(12, 0)], (12, 6, 85), [(12, 0)])
    assert check.status == "fail" and check.diagnosis.entry.id == "arch-unsupported"
    assert "sm_120" in check.diagnosis.cause and "CUDA 12.8 or newer" in check.diagnosis.fix
    dropped = rules.check_archs([(6, 1)], (13, 0, 88), [(6, 1)])
    assert "CUDA 12.x" in dropped.diagnosis.fix


def test_targets_that_miss_the_gpu_warn_of_no_kernel_image():
    check = rules.check_archs([(8, 0)], (13, 0, 88), [(9, 0)])
    assert check.status == "warn" and check.diagnosis.entry.id == "no-kernel-image"
    assert rules.check_archs([(8, 0)], (13, 0, 88), [(8, 6)]).status == "ok"  # sm_80 runs on 8.6
    assert rules.check_archs([], (13, 0, 88), []).status == "fail"


def test_nvcc_major_must_match_torch():
    check = rules.check_nvcc((12, 6, 85), "13.0", "/opt/cuda-12.6/bin/nvcc")
    assert check.status == "fail" and check.diagnosis.entry.id == "cuda-major-mismatch"
    assert "nvcc 12.6.85 and torch's CUDA 13.0" in check.diagnosis.cause
    assert "cuda-nvcc=13.0" in check.diagnosis.fix
    assert rules.check_nvcc((13, 1, 80), "13.0", "nvcc").status == "ok"


def test_host_limits_by_nvcc_version():
    assert rules.host_limits((12, 6, 85)).max_gcc == 13
    assert rules.host_limits((12, 8)).max_gcc == 14
    assert rules.host_limits((13, 0, 88)).max_gcc == 15
    assert rules.host_limits((13, 2)).max_clang == 20


def test_gcc_too_new_and_just_right():
    too_new = rules.check_host_compiler("gcc", (14, 2, 0), "gcc 14.2.0", (12, 6, 85))
    assert too_new.status == "fail" and "gcc 13 or older" in too_new.diagnosis.cause
    assert rules.check_host_compiler("gcc", (13, 3, 0), "gcc 13.3.0", (12, 6, 85)).status == "ok"
    clang = rules.check_host_compiler("clang", (21, 1, 0), "clang 21.1.0", (13, 0, 88))
    assert clang.status == "fail"


def _real_host_config() -> Path | None:
    if shutil.which("nvcc") is None:
        return None
    found = find_toolkits(Host.current()).toolkits
    return found[0].include_dir / "crt" / "host_config.h" if found else None


@pytest.mark.skipif(_real_host_config() is None, reason="no CUDA toolkit on this machine")
def test_the_table_agrees_with_the_installed_toolkit():
    toolkit = find_toolkits(Host.current()).toolkits[0]
    header = toolkit.include_dir / "crt" / "host_config.h"
    gcc, clang = rules.limits_from_host_config(header.read_text(errors="replace"))
    row = rules.host_limits(toolkit.version)
    assert (gcc, clang) == (row.max_gcc, row.max_clang)


def test_cache_and_sources_verdicts():
    assert rules.check_cache("/c", None, 100 << 30).status == "ok"
    low = rules.check_cache("/c", None, 1 << 20)
    assert low.status == "warn" and low.diagnosis.entry.id == "disk-full"
    denied = rules.check_cache("/c", "PermissionError: Permission denied", None)
    assert denied.status == "fail" and denied.diagnosis.entry.id == "cache-not-writable"
    missing = rules.check_sources("/x/csrc", 0)
    assert missing.status == "fail" and missing.diagnosis.entry.id == "sources-missing"


def test_torch_without_cuda():
    check = rules.check_torch("2.5.1+cpu", None)
    assert check.diagnosis.entry.id == "torch-cpu-only" and "2.5.1+cpu" in check.diagnosis.cause
