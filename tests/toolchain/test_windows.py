"""Windows and WSL2: discovery and rules on a simulated Windows layout, recorded messages.

The platform name, the environment variables and a ``Program Files`` tree are
simulated in a temporary folder; the fake ``nvcc.exe``, ``cl.exe`` and
``vswhere.exe`` are scripts printing what the real tools print.
"""

from __future__ import annotations

import json
import platform

import pytest

from gsnb import cli
from gsnb.toolchain import rules
from gsnb.toolchain.catalogue import recognise
from gsnb.toolchain.host import Host
from gsnb.toolchain.loader import dll_directories
from gsnb.toolchain.toolkit import choose_toolkit, find_toolkits
from gsnb.toolchain.tools import msvc_compiler

CL_X64 = (
    "Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33133 for x64\n"
    "Copyright (C) Microsoft Corporation."
)
CL_X86 = "Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33133 for x86"
CL_2026 = "Microsoft (R) C/C++ Optimizing Compiler Version 19.50.35717 for x64"

RECORDED = {
    "cl-not-found": "'cl' is not recognized as an internal or external command,\n"
    "operable program or batch file.",
    "toolkit-root-off-by-one": "C:\\src\\ext.cpp(2): fatal error C1083: Cannot open include file: "
    "'cuda_runtime.h': No such file or directory",
    "msbuild-nvcc-failed": "C:\\VS\\MSBuild\\Microsoft\\VC\\v170\\BuildCustomizations\\"
    "CUDA 12.1.targets"
    '(799,9): error MSB3721: The command ""C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA'
    '\\v12.1\\bin\\nvcc.exe" -gencode=arch=compute_86,code=sm_86 -c kernel.cu" exited with code 1.',
    "dll-load-failed": "ImportError: DLL load failed while importing gsnb_csrc_0123456789ab: "
    "The specified module could not be found.",
    "shm-small": "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is "
    "possible that dataloader's workers are out of shared memory.",
}


@pytest.mark.parametrize("entry_id", sorted(RECORDED))
def test_recorded_windows_and_wsl_messages(entry_id):
    assert recognise(RECORDED[entry_id])[0].entry.id == entry_id


def test_winerror_126_is_the_dll_entry():
    text = (
        "OSError: [WinError 126] The specified module could not be found. Error loading "
        '"C:\\venv\\Lib\\site-packages\\torch\\lib\\c10_cuda.dll" or one of its dependencies.'
    )
    assert recognise(text)[0].entry.id == "dll-load-failed"


def test_rtx_50_with_cuda_12_6_names_cuda_12_8():
    (found,) = recognise("nvcc fatal   : Unsupported gpu architecture 'compute_120'", nvcc="12.6")
    assert found.cause == "nvcc 12.6 cannot compile for sm_120"
    check = rules.check_archs([(12, 0)], (12, 6, 85), [(12, 0)])
    assert "RTX 50" in check.diagnosis.fix and "12.8" in check.diagnosis.fix


def _program_files(tmp_path, fakes, versions=("12.6", "13.1")):
    program_files = tmp_path / "Program Files"
    roots = {}
    for version in versions:
        root = program_files / "NVIDIA GPU Computing Toolkit" / "CUDA" / f"v{version}"
        roots[version] = fakes.toolkit(root, version, lib="lib/x64", windows=True)
    return program_files, roots


def _windows(tmp_path, env):
    return Host(
        system="Windows",
        env=env,
        usr_local=tmp_path / "none",
        proc=tmp_path / "none",
        dev_shm=tmp_path / "none",
        site_packages=(),
        scripts_dir=None,
    )


def test_side_by_side_toolkits_pick_torchs_major(tmp_path, fakes):
    program_files, roots = _program_files(tmp_path, fakes)
    env = {
        "ProgramFiles": str(program_files),
        "CUDA_PATH": str(roots["12.6"]),  # the installer of the last one sets CUDA_PATH
        "CUDA_PATH_V12_6": str(roots["12.6"]),
        "CUDA_PATH_V13_1": str(roots["13.1"]),
        "PATH": "",
    }
    search = find_toolkits(_windows(tmp_path, env))
    assert [t.version for t in search.toolkits] == [(12, 6), (13, 1)]
    choice = choose_toolkit(search, "13.0")
    assert choice.toolkit.root == roots["13.1"]
    assert "matches torch's CUDA 13.0" in choice.reason and "12.6" in choice.reason


def test_gsnb_doctor_json_on_a_simulated_windows(tmp_path, fakes, monkeypatch, capsys):
    import torch

    if torch.version.cuda is None or not torch.version.cuda.startswith("13."):
        pytest.skip("the scenario needs a torch built for CUDA 13")
    program_files, roots = _program_files(tmp_path, fakes)
    bin_dir = tmp_path / "VS" / "bin"
    fakes.exe(bin_dir, "cl.exe", CL_X64)
    fakes.exe(bin_dir, "ninja.exe", "1.12.1")
    for key in [k for k in list(__import__("os").environ) if k.startswith(("CUDA_", "CONDA_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    monkeypatch.setenv("ProgramFiles", str(program_files))
    monkeypatch.setenv("CUDA_PATH", str(roots["12.6"]))
    monkeypatch.setenv("CUDA_PATH_V12_6", str(roots["12.6"]))
    monkeypatch.setenv("CUDA_PATH_V13_1", str(roots["13.1"]))
    monkeypatch.setenv("PATH", str(bin_dir))
    code = cli.main(["doctor", "--json", "--arch", "9.0", "--cache-dir", str(tmp_path / "cache")])
    report = json.loads(capsys.readouterr().out)
    toolkit = report["toolkit"]
    assert toolkit["root"] == str(roots["13.1"]) and toolkit["version"] == "13.1"
    assert "matches torch's CUDA 13.0" in toolkit["reason"]
    assert toolkit["others"] == [{"root": str(roots["12.6"]), "version": "12.6"}]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["host compiler (nvcc)"]["status"] == "ok"
    assert checks["nvcc"]["status"] == "ok" and checks["nvcc"]["value"].startswith("13.1")
    assert "torch alone would use" in checks["torch's toolkit guess"]["note"]
    assert checks["DLL search"]["status"] == "ok"
    assert code in (0, 1)


def test_cl_exe_from_path_or_vswhere_or_missing(tmp_path, fakes):
    on_path = fakes.exe(tmp_path / "devprompt", "cl.exe", CL_X64)
    found = msvc_compiler(_windows(tmp_path, {"PATH": str(on_path.parent)}))
    assert (found.kind, found.version, found.found_by) == ("msvc", (19, 38, 33133), "PATH")

    program_files = tmp_path / "Program Files (x86)"
    install = tmp_path / "VS2022"
    cl = install / "VC" / "Tools" / "MSVC" / "14.38.33130" / "bin" / "Hostx64" / "x64"
    fakes.exe(cl, "cl.exe", CL_X64)
    fakes.exe(program_files / "Microsoft Visual Studio" / "Installer", "vswhere.exe", str(install))
    host = _windows(tmp_path, {"PATH": "", "ProgramFiles(x86)": str(program_files)})
    found = msvc_compiler(host)
    assert found.found_by == "vswhere" and found.path == cl / "cl.exe"

    missing = msvc_compiler(_windows(tmp_path, {"PATH": ""}))
    assert missing is None
    check = rules.check_host_compiler(None, (), "", (13, 0, 88), windows=True)
    assert check.status == "fail" and check.diagnosis.entry.id == "cl-not-found"
    assert "x64 Native Tools Command Prompt" in check.diagnosis.fix


def test_x86_cl_and_an_unsupported_visual_studio_fail(tmp_path, fakes):
    x86 = msvc_compiler(
        _windows(tmp_path, {"PATH": str(fakes.exe(tmp_path / "a", "cl.exe", CL_X86).parent)})
    )
    check = rules.check_host_compiler(x86.kind, x86.version, str(x86), (13, 0, 88), windows=True)
    assert check.status == "fail" and "not x64" in check.note
    vs2026 = msvc_compiler(
        _windows(tmp_path, {"PATH": str(fakes.exe(tmp_path / "b", "cl.exe", CL_2026).parent)})
    )
    check = rules.check_host_compiler(
        vs2026.kind, vs2026.version, str(vs2026), (13, 0, 88), windows=True
    )
    assert check.status == "fail" and "_MSC_VER 1950" in check.note
    ok = rules.check_host_compiler("msvc", (19, 38, 0), "cl 19.38", (13, 0, 88), windows=True)
    assert ok.status == "ok"


def test_cuda_path_one_folder_off(tmp_path, fakes):
    _, roots = _program_files(tmp_path, fakes, versions=("13.0",))
    parent = roots["13.0"].parent  # ...\CUDA instead of ...\CUDA\v13.0
    search = find_toolkits(_windows(tmp_path, {"CUDA_PATH": str(parent), "PATH": ""}))
    checks = rules.check_toolkit(choose_toolkit(search, "13.0"), search.rejected, None, "13.0")
    row = next(c for c in checks if c.name == "CUDA_PATH")
    assert row.diagnosis.entry.id == "toolkit-root-off-by-one"
    assert str(roots["13.0"]) in row.diagnosis.fix
    search = find_toolkits(
        _windows(tmp_path, {"CUDA_PATH": str(roots["13.0"] / "bin"), "PATH": ""})
    )
    assert "one folder off" in search.rejected[0][2]


def test_another_cuda_runtime_first_on_path(tmp_path, fakes):
    _, roots = _program_files(tmp_path, fakes, versions=("13.0",))
    old = tmp_path / "old-cuda" / "bin"
    old.mkdir(parents=True)
    (old / "cudart64_12.dll").write_text("")
    (roots["13.0"] / "bin" / "cudart64_13.dll").write_text("")
    check = rules.check_dll_path([old, roots["13.0"] / "bin"], roots["13.0"] / "bin", "13.0")
    assert check.status == "warn" and check.diagnosis.entry.id == "dll-load-failed"
    assert "cudart64_12.dll" in check.diagnosis.cause and "add_dll_directory" in check.diagnosis.fix
    fine = rules.check_dll_path([roots["13.0"] / "bin", old], roots["13.0"] / "bin", "13.0")
    assert fine.status == "ok"
    folders = dll_directories(roots["13.0"])
    assert roots["13.0"] / "bin" in folders and folders[0].name == "lib"


def test_variable_set_for_new_shells_but_not_seen(tmp_path):
    seen = {"CUDA_PATH": r"C:\CUDA\v12.6", "PATH": ""}
    stored = {"CUDA_PATH": r"C:\CUDA\v13.0", "CUDA_HOME": r"C:\CUDA\v13.0"}
    checks = rules.check_environment(seen, stored)
    assert checks[0].value == r"CUDA_PATH=C:\CUDA\v12.6"  # what this process saw, printed
    warned = {c.name: c for c in checks[1:]}
    assert set(warned) == {"CUDA_HOME", "CUDA_PATH"}
    assert warned["CUDA_HOME"].diagnosis.entry.id == "env-not-seen"
    assert "this process sees nothing" in warned["CUDA_HOME"].diagnosis.cause
    assert r"%env CUDA_PATH=C:\CUDA\v13.0" in warned["CUDA_PATH"].diagnosis.fix


def test_wsl2_without_nvidia_smi_is_not_a_problem(tmp_path, host_factory):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text(
        "Linux version 6.6.87.2-microsoft-standard-WSL2 (root@host) (gcc 11.2.0) #1 SMP\n"
    )
    host = host_factory()
    assert host.wsl()
    check = rules.check_driver(None, "13.0", windows=False, have_gpu=True, wsl=host.wsl())
    assert check.status == "info" and "Windows driver" in check.note
    assert rules.check_gpus(["NVIDIA GeForce RTX 4090 (sm_89)"], [], None, False).status == "ok"
    assert not Host(system="Linux", env={}, proc=tmp_path / "nowhere").wsl()


def test_small_dev_shm_is_reported_with_the_fix():
    small = rules.check_shm(64 * 2**20)
    assert small.status == "warn" and small.diagnosis.entry.id == "shm-small"
    assert "64 MiB" in small.diagnosis.cause and "--shm-size" in small.diagnosis.fix
    assert rules.check_shm(8 * 2**30).status == "ok" and rules.check_shm(None) is None
