"""Cache keys, manifests, compatibility, writability and the build lock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from gsnb.toolchain import cache
from gsnb.utils.atomic import writable_problem


def _sources(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)
    return folder


def test_default_cache_dir_order(tmp_path):
    assert cache.default_cache_dir({"GSNB_CACHE_DIR": str(tmp_path)}) == tmp_path
    xdg = cache.default_cache_dir({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert xdg == tmp_path / "xdg" / "gsnb" / "extensions"


def test_key_covers_sources_headers_flags_torch_and_archs(tmp_path):
    src = _sources(tmp_path / "src", a_cu="kernel", b_cuh="header", c_txt="not hashed")
    base = cache.fingerprint(src, {"nvcc": ["-O3"]}, "2.5.1", "12.4")
    (src / "c.txt").write_text("changed")
    assert cache.fingerprint(src, {"nvcc": ["-O3"]}, "2.5.1", "12.4") == base
    (src / "b.cuh").write_text("changed header")
    changed = cache.fingerprint(src, {"nvcc": ["-O3"]}, "2.5.1", "12.4")
    assert changed != base
    assert cache.fingerprint(src, {"nvcc": ["-O2"]}, "2.5.1", "12.4") != changed
    assert cache.fingerprint(src, {"nvcc": ["-O3"]}, "2.6.0", "12.4") != changed
    assert cache.fingerprint(src, {"nvcc": ["-O3"]}, "2.5.1", "12.6") != changed
    assert cache.build_key(changed, ["9.0"]) != cache.build_key(changed, ["8.0", "9.0"])
    assert cache.module_name("gsnb_csrc", "0123456789abcdef") == "gsnb_csrc_0123456789ab"


def _complete(folder, key="k" * 64, archs=("9.0",), fp="f"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.so").write_bytes(b"12345")
    manifest = {
        "format": 1,
        "key": key,
        "name": "gsnb_csrc_x",
        "library": "m.so",
        "library_size": 5,
        "archs": list(archs),
        "fingerprint": fp,
        "created": time.time(),
    }
    cache.write_manifest(folder, manifest)
    return folder


def test_a_build_is_complete_only_with_manifest_and_library(tmp_path):
    folder = _complete(tmp_path / "gsnb_csrc_x")
    assert cache.complete_build(folder, "k" * 64) is not None
    assert cache.complete_build(folder, "other") is None
    (folder / "m.so").write_bytes(b"123")  # truncated by a killed build
    assert cache.complete_build(folder) is None
    (folder / "m.so").write_bytes(b"12345")
    (folder / cache.MANIFEST).write_text("{not json")
    assert cache.complete_build(folder) is None
    (folder / cache.MANIFEST).write_text(json.dumps({"format": 1}) + " " * cache.MANIFEST_LIMIT)
    assert cache.read_manifest(folder) is None


def test_compatible_builds_match_the_gpu_architecture(tmp_path):
    _complete(tmp_path / "gsnb_csrc_a", archs=["8.0", "9.0"], fp="f")
    _complete(tmp_path / "gsnb_csrc_b", archs=["12.0"], fp="f")
    _complete(tmp_path / "gsnb_csrc_c", archs=["9.0"], fp="other")
    assert [
        b.folder.name for b in cache.compatible_builds(tmp_path, "gsnb_csrc", "f", [(9, 0)])
    ] == ["gsnb_csrc_a"]
    assert (
        cache.compatible_builds(tmp_path, "gsnb_csrc", "f", [(8, 6)])[0].folder.name
        == "gsnb_csrc_a"
    )
    assert cache.compatible_builds(tmp_path, "gsnb_csrc", "f", [(10, 0)]) == []


def test_an_unwritable_cache_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problem = writable_problem(blocker / "cache")
    assert problem is not None and ("NotADirectoryError" in problem or "FileExistsError" in problem)
    assert writable_problem(tmp_path / "fine") is None


def test_stale_lock_of_a_killed_build_is_recovered(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    (tmp_path / "gsnb_csrc_x.owner.json").write_text(
        json.dumps({"pid": pid, "host": "h", "started": 0})
    )
    (tmp_path / "gsnb_csrc_x.lock").write_text("")
    start = time.monotonic()
    with cache.build_lock(tmp_path, "gsnb_csrc_x", timeout=5) as state:
        assert state.stale_pid == pid
    assert time.monotonic() - start < 2
    assert not (tmp_path / "gsnb_csrc_x.owner.json").exists()
    with cache.build_lock(tmp_path, "gsnb_csrc_x", timeout=5) as state:
        assert state.stale_pid is None


def test_a_live_holder_makes_others_wait_then_time_out(tmp_path):
    holder = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from gsnb.toolchain.cache import build_lock
        with build_lock(Path({str(tmp_path)!r}), "gsnb_csrc_x"):
            print("held", flush=True)
            time.sleep(30)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        waits = []
        with (
            pytest.raises(TimeoutError, match=f"pid {process.pid}"),
            cache.build_lock(tmp_path, "gsnb_csrc_x", timeout=1, on_wait=waits.append),
        ):
            pass
        assert len(waits) == 1 and waits[0].startswith(f"pid {process.pid} on ")
    finally:
        process.kill()
        process.wait()
    with cache.build_lock(tmp_path, "gsnb_csrc_x", timeout=5) as state:
        assert state.stale_pid == process.pid  # killed while holding it
