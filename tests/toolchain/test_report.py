"""The doctor's table in text and HTML, and the environment behind it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gsnb.toolchain.catalogue import diagnose
from gsnb.toolchain.environment import discover, resolve_archs
from gsnb.toolchain.gpus import GPU
from gsnb.toolchain.report import DoctorReport, html_table, text_table, verdict
from gsnb.toolchain.rules import Check

CHECKS = [
    Check("ninja", "1.11.1", "ok"),
    Check(
        "nvcc",
        "12.6.85",
        "fail",
        "torch is CUDA 13.0",
        diagnose("cuda-major-mismatch", nvcc="12.6"),
    ),
]


def test_text_and_html_tables_show_cause_and_fix():
    text = text_table(CHECKS)
    assert "FAIL  nvcc" in text and "-> nvcc 12.6 and torch's CUDA" in text
    assert text.splitlines()[-1] == "cannot build: 1 problem (nvcc)"
    html = html_table(CHECKS)
    assert "<table>" in html and "<b>Fix:</b>" in html and "cannot build" in html
    assert verdict(CHECKS[:1]) == "ready to build"


def test_resolve_archs_from_gpus_or_given():
    gpus = [
        GPU(0, "A", (9, 0), 0, "torch"),
        GPU(1, "B", (8, 6), 0, "torch"),
        GPU(2, "C", (9, 0), 0, "torch"),
    ]
    archs, given = resolve_archs(None, gpus)
    assert [str(a) for a in archs] == ["8.6", "9.0"] and not given
    archs, given = resolve_archs(["8.0", "9.0+PTX"], gpus)
    assert [str(a) for a in archs] == ["8.0", "9.0+PTX"] and given


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a real gcc")
def test_a_too_new_default_gcc_is_replaced_by_a_supported_gcc_n(fakes, tmp_path):
    import os

    from gsnb.toolchain.host import Host

    bin_dir = tmp_path / "bin"
    fakes.exe(
        bin_dir,
        "gcc",
        "gcc (GCC) 16.1.1 20260501\nCopyright (C) 2026 Free Software Foundation, Inc.",
    )
    (bin_dir / "gcc-12").symlink_to(shutil.which("gcc"))
    (bin_dir / "g++-12").symlink_to(shutil.which("g++") or shutil.which("gcc"))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    environment = discover("9.0", cache_dir=tmp_path / "c", host=Host(system="Linux", env=env))
    if environment.nvcc is None:
        pytest.skip("no nvcc")
    row = next(c for c in environment.checks() if c.name == "host compiler (nvcc)")
    assert environment.alternative is not None and environment.alternative.path.name == "gcc-12"
    assert row.status == "warn" and "gcc-12" in row.diagnosis.fix


def test_report_of_this_machine(tmp_path):
    report = DoctorReport(discover("9.0", cache_dir=tmp_path))
    text = str(report)
    assert "build cache" in text and str(tmp_path) in text
    assert report.ready == (not any(c.status == "fail" for c in report.checks))
    assert "<table>" in report._repr_html_()
    data = report.environment.to_json()
    assert Path(data["cache_dir"]) == tmp_path
