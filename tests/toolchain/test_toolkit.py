"""Toolkit discovery against fake toolkit trees: wrappers, links, env vars, conda, pip."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gsnb.toolchain import rules
from gsnb.toolchain.host import Host
from gsnb.toolchain.toolkit import choose_toolkit, find_toolkits, follow_nvcc, torch_guess

REAL_NVCC = shutil.which("nvcc")


def _wrapper(folder: Path, target: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_wrapper_script_is_followed_to_the_real_root(fakes, tmp_path, host_factory):
    # The layout of the development machine: /usr/local/bin/nvcc is `exec .../cuda-13.0/bin/nvcc`.
    root = fakes.toolkit(tmp_path / "usr_local" / "cuda-13.0", "13.0")
    bin_dir = tmp_path / "usr_local" / "bin"
    _wrapper(bin_dir, root / "bin" / "nvcc")
    host = host_factory({"PATH": str(bin_dir)})
    search = find_toolkits(host)
    assert search.toolkits[0].root == root.resolve()
    assert "->" in search.toolkits[0].found_by
    guess = torch_guess(host)
    assert guess == tmp_path / "usr_local"
    checks = rules.check_toolkit(choose_toolkit(search, "13.0"), search.rejected, guess, "13.0")
    row = next(c for c in checks if c.name == "torch's toolkit guess")
    assert row.diagnosis is not None and row.diagnosis.entry.id == "toolkit-root-wrong"
    assert "lib64/libcudart.so" in row.diagnosis.cause and str(root.resolve()) in row.diagnosis.fix


def test_symlinked_nvcc_is_followed(fakes, tmp_path, host_factory):
    root = fakes.toolkit(tmp_path / "opt" / "cuda", "12.6")
    bin_dir = tmp_path / "links"
    bin_dir.mkdir()
    (bin_dir / "nvcc").symlink_to(root / "bin" / "nvcc")
    assert follow_nvcc(bin_dir / "nvcc", host_factory()) == (root / "bin" / "nvcc").resolve()
    search = find_toolkits(host_factory({"PATH": str(bin_dir)}))
    assert search.toolkits[0].root == root.resolve()
    assert search.toolkits[0].version == (12, 6)


def test_cuda_home_first_and_a_wrong_one_is_ignored_with_a_warning(fakes, tmp_path, host_factory):
    good = fakes.toolkit(tmp_path / "good", "13.0")
    bad = tmp_path / "not-a-toolkit"
    bad.mkdir()
    search = find_toolkits(host_factory({"CUDA_HOME": str(good)}))
    assert search.toolkits[0].found_by == "CUDA_HOME" and search.toolkits[0].root == good

    search = find_toolkits(host_factory({"CUDA_HOME": str(bad), "PATH": str(good / "bin")}))
    assert search.toolkits[0].root == good
    checks = rules.check_toolkit(choose_toolkit(search, "13.0"), search.rejected, None, "13.0")
    warning = next(c for c in checks if c.name == "CUDA_HOME")
    assert warning.status == "warn" and warning.diagnosis.entry.id == "cuda-home-invalid"
    assert "no bin/nvcc" in warning.diagnosis.cause


def test_usr_local_cuda_and_versioned_folders(fakes, tmp_path, host_factory):
    fakes.toolkit(tmp_path / "usr_local" / "cuda-12.4", "12.4")
    fakes.toolkit(tmp_path / "usr_local" / "cuda-13.0", "13.0")
    search = find_toolkits(host_factory())
    assert [t.version for t in search.toolkits] == [(13, 0), (12, 4)]
    choice = choose_toolkit(search, "12.4")
    assert choice.toolkit.version == (12, 4)
    assert "matches torch's CUDA 12.4" in choice.reason and "13.0" in choice.reason


def test_conda_environment_with_targets_layout(fakes, tmp_path, host_factory):
    prefix = tmp_path / "conda-env"
    fakes.exe(prefix / "bin", "nvcc", "release 13.0, V13.0.48")
    fakes.toolkit(prefix / "targets" / "x86_64-linux", "13.0", lib="lib")
    (prefix / "targets" / "x86_64-linux" / "bin" / "nvcc").unlink()
    search = find_toolkits(host_factory({"CONDA_PREFIX": str(prefix)}))
    toolkit = search.toolkits[0]
    assert toolkit.found_by == "conda environment" and toolkit.root == prefix
    assert toolkit.include_dir == prefix / "targets" / "x86_64-linux" / "include"
    assert toolkit.lib_dir == prefix / "targets" / "x86_64-linux" / "lib"


def test_pip_wheels_with_only_a_versioned_cudart(fakes, tmp_path, host_factory):
    site = tmp_path / "site-packages"
    fakes.toolkit(site / "nvidia" / "cu13", "13.0", lib="lib", unversioned=False)
    search = find_toolkits(host_factory(site_packages=(site,)))
    toolkit = search.toolkits[0]
    assert toolkit.found_by == "pip wheel nvidia/cu13"
    assert not toolkit.unversioned_cudart()


def test_pip_wheels_of_cuda_12_keep_nvcc_apart(fakes, tmp_path, host_factory):
    site = tmp_path / "site-packages"
    fakes.exe(site / "nvidia" / "cuda_nvcc" / "bin", "nvcc", "release 12.6, V12.6.85")
    fakes.toolkit(site / "nvidia" / "cuda_runtime", "12.6", lib="lib", unversioned=False)
    (site / "nvidia" / "cuda_runtime" / "bin" / "nvcc").unlink()
    toolkit = find_toolkits(host_factory(site_packages=(site,))).toolkits[0]
    assert toolkit.nvcc == site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"
    assert toolkit.version == (12, 6)


def test_no_toolkit_anywhere_is_a_failure(host_factory):
    search = find_toolkits(host_factory())
    assert search.toolkits == []
    checks = rules.check_toolkit(choose_toolkit(search, "13.0"), search.rejected, None, "13.0")
    assert checks[-1].status == "fail" and checks[-1].diagnosis.entry.id == "no-toolkit"
    assert "cuda-nvcc=13.0" in checks[-1].diagnosis.fix


def test_a_root_without_libcudart_is_rejected(fakes, tmp_path, host_factory):
    root = fakes.toolkit(tmp_path / "cuda", "13.0")
    for lib in (root / "lib64").iterdir():
        lib.unlink()
    search = find_toolkits(host_factory({"CUDA_HOME": str(root)}))
    assert search.toolkits == []
    assert search.rejected == [("CUDA_HOME", root, f"{root} has no lib64/libcudart.so")]


@pytest.mark.skipif(REAL_NVCC is None, reason="no nvcc on PATH on this machine")
def test_this_machine_resolves_to_a_root_with_the_runtime():
    host = Host.current()
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    search = find_toolkits(Host(system=host.system, env=env))
    toolkit = search.toolkits[0]
    assert (toolkit.include_dir / "cuda_runtime.h").is_file()
    assert any(toolkit.lib_dir.glob("libcudart.so*"))
    assert toolkit.nvcc.resolve() == follow_nvcc(Path(REAL_NVCC), host)
