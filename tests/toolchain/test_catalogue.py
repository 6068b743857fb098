"""Every catalogue entry recognised from the text that gives it away.

Messages are produced for real where this machine can produce them (a full disk,
a module with an undefined symbol or a missing library, nvcc refusing an
architecture); the others are recorded messages of the real tools.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from gsnb.toolchain.catalogue import CATALOGUE, diagnose, recognise, render
from gsnb.toolchain.loader import load_module

RECORDED = {
    "torch-cpu-only": "AssertionError: Torch not compiled with CUDA enabled",
    "no-gpu": "RuntimeError: No CUDA GPUs are available",
    "driver-too-old": "RuntimeError: The NVIDIA driver on your system is too old (found version "
    "11040).",
    "no-toolkit": "OSError: CUDA_HOME environment variable is not set. Please set it to your "
    "CUDA install root.",
    "toolkit-root-wrong": "/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
    "collect2: error: ld returned 1 exit status",
    "cuda-major-mismatch": "RuntimeError: \nThe detected CUDA version (12.6) mismatches the "
    "version "
    "that was used to compile\nPyTorch (13.0). Please make sure to use the same CUDA versions.",
    "arch-unsupported": "nvcc fatal   : Unsupported gpu architecture 'compute_120'",
    "host-compiler-unsupported": "/usr/local/cuda-12.6/include/crt/host_config.h:143:2: error: "
    "#error "
    "-- unsupported GNU version! gcc versions later than 13 are not supported! The nvcc flag "
    "'-allow-unsupported-compiler' can be used to override this version check",
    "host-compiler-missing": "FileNotFoundError: [Errno 2] No such file or directory: 'c++'",
    "ninja-missing": "RuntimeError: Ninja is required to load C++ extensions (pip install ninja "
    "to get it)",
    "python-headers-missing": "/src/ext.cpp:1:10: fatal error: Python.h: No such file or directory",
    "compiler-out-of-memory": "c++: fatal error: Killed signal terminated program cc1plus\n"
    "compilation terminated.",
    "disk-full": "/usr/bin/ld: final link failed: No space left on device",
    "cache-not-writable": "PermissionError: [Errno 13] Permission denied: "
    "'/home/u/.cache/gsnb/extensions'",
    "no-kernel-image": "torch.AcceleratorError: CUDA error: no kernel image is available for "
    "execution "
    "on the device\nCUDA kernel errors might be asynchronously reported at some other API call",
    "undefined-symbol": "ImportError: /c/gsnb_csrc_0123456789ab.so: undefined symbol: "
    "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs",
    "symbol-not-defined": "ImportError: /c/gsnb_csrc_a7394657c35c.so: undefined symbol: "
    "_ZN4gsnb15project_forwardERKN2at6TensorES3_S3_S3_S3_S3_S3_llddl",
    "library-missing": "ImportError: libcudart.so.12: cannot open shared object file: No such "
    "file or directory",
    "compile-error": '/src/rasterize.cu(42): error: identifier "foo" is undefined\n'
    "1 error detected",
}
# Entries found up front rather than in output; their tests create the condition elsewhere.
CONDITIONS = {
    "sources-changed": "tests/toolchain/test_builder.py",
    "cl-not-found": "tests/toolchain/test_windows.py",
    "toolkit-root-off-by-one": "tests/toolchain/test_windows.py",
    "msbuild-nvcc-failed": "tests/toolchain/test_windows.py",
    "dll-load-failed": "tests/toolchain/test_windows.py",
    "env-not-seen": "tests/toolchain/test_windows.py",
    "shm-small": "tests/toolchain/test_windows.py",
    "cuda-home-invalid": "tests/toolchain/test_toolkit.py",
    "sources-missing": "tests/toolchain/test_builder.py",
    "stale-lock": "tests/toolchain/test_builder.py",
    "half-built": "tests/toolchain/test_builder.py",
}


def test_every_entry_has_a_test():
    assert set(CATALOGUE) <= set(RECORDED) | set(CONDITIONS)


@pytest.mark.parametrize("entry_id", sorted(RECORDED))
def test_recorded_message_is_recognised_first(entry_id):
    found = recognise(RECORDED[entry_id])
    assert found and found[0].entry.id == entry_id
    assert found[0].evidence and found[0].evidence in RECORDED[entry_id]


@pytest.mark.parametrize("entry_id", sorted(CATALOGUE))
def test_templates_fill_from_their_defaults(entry_id):
    diagnosis = diagnose(entry_id)
    assert "{" not in diagnosis.cause + diagnosis.fix
    assert diagnosis.cause and diagnosis.fix


def test_groups_of_the_match_fill_the_message():
    (arch,) = recognise(RECORDED["arch-unsupported"], nvcc="12.6")
    assert arch.cause == "nvcc 12.6 cannot compile for sm_120"
    (mismatch,) = recognise(RECORDED["cuda-major-mismatch"], torch_major="13", nvcc_major="12")
    assert "nvcc 12.6 and torch's CUDA 13.0" in mismatch.cause
    (error,) = recognise(RECORDED["compile-error"], log="/c/build.log")
    assert (
        'rasterize.cu(42): error: identifier "foo"' in error.cause and "/c/build.log" in error.fix
    )


def test_generic_compile_error_only_when_nothing_specific_matched():
    found = recognise(
        RECORDED["host-compiler-unsupported"] + "\nninja: build stopped: subcommand failed."
    )
    assert [d.entry.id for d in found] == ["host-compiler-unsupported"]


def test_a_real_full_disk_is_recognised():
    try:
        with open("/dev/full", "w") as handle:
            handle.write("x" * 10)
            handle.flush()
    except OSError as err:
        assert recognise(str(err))[0].entry.id == "disk-full"
    else:
        pytest.skip("/dev/full is not a full device here")


def _cc() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


MODULE_C = """
#include <Python.h>
extern int {symbol}(void);
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit_{name}(void) {{ {symbol}(); return PyModule_Create(&def); }}
"""


def _c_module(folder: Path, name: str, symbol: str, extra: list[str]) -> Path:
    source = folder / f"{name}.c"
    source.write_text(MODULE_C.format(name=name, symbol=symbol))
    library = folder / f"{name}.so"
    include = sysconfig.get_path("include")
    subprocess.run(
        [_cc(), "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(library), *extra],
        check=True,
    )
    return library


@pytest.mark.skipif(_cc() is None, reason="no C compiler on this machine")
def test_a_real_undefined_symbol_on_import(tmp_path):
    library = _c_module(tmp_path, "gsnb_stale_build", "gsnb_symbol_from_another_torch", [])
    with pytest.raises(ImportError) as caught:
        load_module("gsnb_stale_build", library)
    (found,) = recognise(str(caught.value))
    assert found.entry.id == "undefined-symbol" and "gsnb_symbol_from_another_torch" in found.cause


@pytest.mark.skipif(_cc() is None, reason="no C compiler on this machine")
def test_a_real_missing_shared_library_on_import(tmp_path):
    helper = tmp_path / "helper.c"
    helper.write_text("int gsnb_helper(void) { return 1; }\n")
    subprocess.run(
        [_cc(), "-shared", "-fPIC", str(helper), "-o", str(tmp_path / "libgsnbgone.so")], check=True
    )
    library = _c_module(tmp_path, "gsnb_needs_lib", "gsnb_helper", [f"-L{tmp_path}", "-lgsnbgone"])
    (tmp_path / "libgsnbgone.so").unlink()
    with pytest.raises(ImportError) as caught:
        load_module("gsnb_needs_lib", library)
    (found,) = recognise(str(caught.value))
    assert found.entry.id == "library-missing" and "libgsnbgone.so" in found.cause


def _nvcc_major() -> int | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    return int(out.split("release ")[1].split(".")[0]) if "release " in out else None


@pytest.mark.skipif(
    (_nvcc_major() or 0) < 13, reason="needs nvcc 13 or newer (which dropped sm_50)"
)
def test_real_nvcc_refusing_an_architecture(tmp_path):
    source = tmp_path / "empty.cu"
    source.write_text("__global__ void k() {}\n")
    out = subprocess.run(
        [shutil.which("nvcc"), "-arch=sm_50", "-c", str(source), "-o", str(tmp_path / "empty.o")],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    (found,) = recognise(out.stdout + out.stderr, nvcc="13.0")
    assert found.entry.id == "arch-unsupported" and "sm_50" in found.cause


# Text a user must never see: an unfilled field, a template bracket, or a stand-in
# where a version belongs ("cuda-nvcc=version", "nvcc of torch's major.x").
PLACEHOLDER = re.compile(r"\?|[{}\[\]]|=version\b|major\.x|<[A-Za-z ]+>")


@pytest.mark.parametrize("entry_id", sorted(CATALOGUE))
def test_every_entry_reads_as_a_sentence_without_context(entry_id: str) -> None:
    diagnosis = diagnose(entry_id)
    for text in (diagnosis.cause, diagnosis.fix):
        assert text and not PLACEHOLDER.search(text), f"{entry_id}: {text!r}"


@pytest.mark.parametrize("entry_id", sorted(CATALOGUE))
def test_fields_outside_optional_parts_have_defaults(entry_id: str) -> None:
    entry = CATALOGUE[entry_id]
    for template in (entry.cause, entry.fix):
        bare = re.sub(r"\[[^\[\]]*\]", "", template)
        for name in re.findall(r"{(\w+)}", bare):
            assert name in entry.defaults, f"{entry_id}: {{{name}}} has no default"


def test_versions_fill_the_fix_when_known() -> None:
    text = (
        "The detected CUDA version (12.6) mismatches the version that was used to compile\n"
        "PyTorch (13.0). Please make sure to use the same CUDA versions."
    )
    (found,) = recognise(text)
    assert found.cause == "nvcc 12.6 and torch's CUDA 13.0 have different major versions"
    assert "cuda-nvcc=13.0" in found.fix and "(12)" in found.fix
    assert not PLACEHOLDER.search(found.fix)


def test_optional_parts_and_alternatives() -> None:
    assert render("a[ {x}] b[ {y}|c]", {"x": "1"}) == "a 1 bc"
    assert render("[{x}|none]", {}) == "none"


def test_a_value_with_braces_is_filled_in_as_it_is() -> None:
    (found,) = recognise("kernel.cu(3): error: no instance of {float} matches {nvcc}")
    assert "{float} matches {nvcc}" in found.cause
