"""The real ``csrc/`` rasterizer compiled and linked for sm_80 and sm_90 (no GPU needed).

This is also the compile check of the rasterizer sources: it builds once per test
run into a temporary cache, then shows that a second call is a cache hit.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import time

import pytest

from gsnb import cli
from gsnb.toolchain.cache import default_sources_dir, source_files

ARCHS = "8.0,9.0"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3000),
    pytest.mark.skipif(
        shutil.which("nvcc") is None, reason="no CUDA toolkit (nvcc) on this machine"
    ),
]


@pytest.fixture(scope="session")
def csrc_build(tmp_path_factory):
    """``gsnb build --arch 8.0,9.0`` into an empty cache, once: (cache, exit code, output)."""
    cache = tmp_path_factory.mktemp("csrc-cache")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["build", "--arch", ARCHS, "--cache-dir", str(cache), "--no-progress"])
    return cache, code, out.getvalue() + err.getvalue()


def test_csrc_has_sources():
    assert source_files(default_sources_dir()), f"no *.cu/*.cpp in {default_sources_dir()}"


def test_real_csrc_compiles_and_links_for_sm80_and_sm90(csrc_build):
    cache, code, output = csrc_build
    assert code == 0, output
    assert "for sm_80, sm_90, built in" in output
    (folder,) = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("gsnb_csrc_")]
    log = (folder / "build.log").read_text()
    assert "code=sm_80" in log and "code=sm_90" in log


def test_without_a_gpu_the_smoke_test_is_skipped_with_a_reason(csrc_build):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the smoke test runs (tests/toolchain/test_smoke.py)")
    _, code, output = csrc_build
    assert code == 0 and "smoke test skipped: no GPU is visible" in output


def test_second_build_is_a_cache_hit_in_well_under_a_second(csrc_build, capsys):
    cache, code, _ = csrc_build
    assert code == 0
    start = time.perf_counter()
    again = cli.main(["build", "--arch", ARCHS, "--cache-dir", str(cache), "--no-progress"])
    seconds = time.perf_counter() - start
    assert again == 0 and "cache hit" in capsys.readouterr().out
    assert seconds < 1.0
