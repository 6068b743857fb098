"""Smoke-test records in a build's manifest: reused on the same GPU, dropped on any change."""

from __future__ import annotations

import time

import pytest
import torch

from gsnb.toolchain import cache
from gsnb.toolchain.smoke_records import (
    gpu_identity,
    recorded_pass,
    smoke_checked,
    store_smoke_result,
)

H200 = {
    "gpu": "NVIDIA H200",
    "capability": "9.0",
    "driver": "580.65.06",
    "torch": "2.11.0+cu130",
    "torch_cuda": "13.0",
}
A100 = {**H200, "gpu": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}


def _build(folder, key="k" * 64):
    """A complete build folder: library plus manifest."""
    folder.mkdir(parents=True)
    (folder / "lib.so").write_bytes(b"\x7fELF....")
    manifest = {
        "format": cache.FORMAT,
        "key": key,
        "name": folder.name,
        "library": "lib.so",
        "library_size": 8,
        "archs": ["8.0", "9.0"],
        "fingerprint": "f",
        "created": time.time(),
        "smoke": [],
    }
    cache.write_manifest(folder, manifest)
    return manifest


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu", "NVIDIA H100 80GB HBM3"),
        ("capability", "9.1"),
        ("driver", "590.10"),
        ("torch", "2.12.0+cu130"),
        ("torch_cuda", "12.8"),
    ],
)
def test_a_record_matches_only_the_same_gpu_driver_and_torch(field, value):
    manifest = {"smoke": [{**H200, "status": "passed", "max_error": 1e-7, "when": 1.0}]}
    assert recorded_pass(manifest, H200)["max_error"] == 1e-7
    assert recorded_pass(manifest, {**H200, field: value}) is None
    assert recorded_pass(manifest, None) is None
    assert recorded_pass({"smoke": "garbage"}, H200) is None
    assert recorded_pass({"smoke": [{**H200, "status": "failed"}]}, H200) is None


def test_passes_are_recorded_per_gpu_and_a_failure_forgets_only_its_gpu(tmp_path):
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    assert store_smoke_result(folder, manifest, H200, True, 2e-7)
    assert store_smoke_result(folder, manifest, A100, True, 3e-7)
    assert store_smoke_result(folder, manifest, H200, True, 1e-7)  # replaces, not appends
    stored = cache.read_manifest(folder)
    assert [r["gpu"] for r in stored["smoke"]] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H200"]
    assert recorded_pass(stored, H200)["max_error"] == 1e-7
    assert cache.complete_build(folder, manifest["key"]) is not None  # still a complete build
    assert store_smoke_result(folder, manifest, H200, False, None)
    stored = cache.read_manifest(folder)
    assert recorded_pass(stored, H200) is None and recorded_pass(stored, A100) is not None
    assert not store_smoke_result(folder, manifest, H200, False, None)  # nothing left to forget


def test_a_failed_test_is_never_recorded_as_passed(tmp_path):
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    assert not store_smoke_result(folder, manifest, H200, False, 0.5)
    assert cache.read_manifest(folder)["smoke"] == []


def test_nothing_is_recorded_for_a_half_built_or_replaced_build(tmp_path):
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    (folder / "lib.so").write_bytes(b"\x7f")  # a rebuild was killed mid-link
    assert not store_smoke_result(folder, manifest, H200, True, 1e-7)
    (folder / "lib.so").write_bytes(b"\x7fELF....")
    rebuilt = {**manifest, "created": manifest["created"] + 5}  # another build in its place
    cache.write_manifest(folder, rebuilt)
    assert not store_smoke_result(folder, manifest, H200, True, 1e-7)
    assert cache.read_manifest(folder)["smoke"] == []
    assert not store_smoke_result(tmp_path / "gone", manifest, H200, True, 1e-7)


def test_a_busy_build_lock_skips_recording(tmp_path):
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    with cache.build_lock(tmp_path, "gsnb_csrc_abc"):  # e.g. a forced rebuild in progress
        assert not store_smoke_result(folder, manifest, H200, True, 1e-7, timeout=0.2)
    assert cache.read_manifest(folder)["smoke"] == []
    assert store_smoke_result(folder, manifest, H200, True, 1e-7)


def test_a_recorded_pass_is_reused_unless_verify_asks(tmp_path):
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    store_smoke_result(folder, manifest, H200, True, 2e-7)
    manifest = cache.read_manifest(folder)
    smoke, _ = smoke_checked(folder, manifest, ["9.0"], H200)
    assert smoke.status == "passed" and smoke.recorded is not None and smoke.max_error == 2e-7
    assert "not run again" in smoke.message and "NVIDIA H200" in smoke.message
    other, _ = smoke_checked(folder, manifest, ["9.0"], {**H200, "driver": "590.10"})
    verified, after = smoke_checked(folder, manifest, ["9.0"], H200, verify=True)
    for ran in (other, verified):  # the test really ran (without a GPU: skipped)
        assert ran.recorded is None
        assert ran.status == "skipped" or torch.cuda.is_available()
    assert recorded_pass(after, H200) is not None  # a skipped run changes no record


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_gpu_there_is_no_identity_and_nothing_is_recorded(tmp_path):
    assert gpu_identity() is None
    folder = tmp_path / "gsnb_csrc_abc"
    manifest = _build(folder)
    smoke, after = smoke_checked(folder, manifest, ["9.0"], gpu_identity())
    assert smoke.status == "skipped" and after["smoke"] == []
