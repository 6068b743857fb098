"""Tools' answers are remembered beside the cache while the tool's file stays the same."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gsnb.toolchain.host import Host
from gsnb.toolchain.probes import PROBES_FILE, ProbeMemo, file_identity

DATE = shutil.which("date")
TRUE = shutil.which("true")
pytestmark = pytest.mark.skipif(
    DATE is None or TRUE is None or file_identity(DATE) is None,
    reason="needs the native date and true executables",
)
CLOCK = ["+%s%N"]  # a different answer on every real run


def _tool(folder: Path, name: str = "date", source: str | None = None) -> Path:
    """A private copy of a native executable that prints the time in nanoseconds."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    shutil.copy2(source or DATE, path)
    return path


def _host(memo: ProbeMemo | None) -> Host:
    return Host(system="Linux", env=dict(os.environ), probes=memo)


def test_answer_is_reused_in_a_new_process_while_the_tool_is_unchanged(tmp_path):
    tool = _tool(tmp_path / "bin")
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    first = _host(memo).probe([str(tool), *CLOCK])
    assert first is not None and first[0] == 0
    assert _host(memo).probe([str(tool), *CLOCK]) == first
    assert memo.save() and not memo.save()  # written once, then nothing new
    reloaded = ProbeMemo(tmp_path / PROBES_FILE)
    assert _host(reloaded).probe([str(tool), *CLOCK]) == first
    assert _host(None).probe([str(tool), *CLOCK]) != first  # the tool really answers anew


def test_a_touched_replaced_or_moved_tool_is_asked_again(tmp_path):
    tool = _tool(tmp_path / "bin")
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    first = _host(memo).probe([str(tool), *CLOCK])
    stat = tool.stat()
    os.utime(tool, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    touched = _host(memo).probe([str(tool), *CLOCK])
    assert touched != first
    tool.unlink()
    _tool(tmp_path / "bin", "date", TRUE)  # another program under the same name
    assert _host(memo).probe([str(tool), *CLOCK]) == (0, "")
    moved = _tool(tmp_path / "other")
    assert _host(memo).probe([str(moved), *CLOCK]) != touched


def test_refresh_runs_again_and_stores_the_new_answer(tmp_path):
    tool = _tool(tmp_path / "bin")
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    first = _host(memo).probe([str(tool), *CLOCK])
    memo.refresh = True
    fresh = _host(memo).probe([str(tool), *CLOCK])
    assert fresh != first
    memo.save()
    assert _host(ProbeMemo(tmp_path / PROBES_FILE)).probe([str(tool), *CLOCK]) == fresh


def test_scripts_and_compiler_launchers_are_never_remembered(tmp_path):
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nexec {DATE} +%s%N\n")
    script.chmod(0o755)
    assert file_identity(script) is None
    launcher = _tool(tmp_path / "bin", "ccache")
    assert file_identity(launcher) is None
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    for command in ([str(script)], [str(launcher), *CLOCK]):
        assert _host(memo).probe(command) != _host(memo).probe(command)
    # The script's last answer is kept for the warm check only; the launcher's never.
    assert list(memo.entries) == [json.dumps([str(script)])]
    assert memo.entries[json.dumps([str(script)])]["script"] is True


def test_the_warm_check_reuses_a_script_answer_while_it_and_the_files_it_names_stay(tmp_path):
    real = _tool(tmp_path / "real")
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nexec {real} +%s%N\n")
    script.chmod(0o755)
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    first = _host(memo).probe([str(script)])
    assert memo.save()
    trusting = ProbeMemo(tmp_path / PROBES_FILE, trust_scripts=True)
    assert _host(trusting).probe([str(script)]) == first
    assert _host(ProbeMemo(tmp_path / PROBES_FILE)).probe([str(script)]) != first  # a build
    _tool(tmp_path / "real", source=TRUE)  # the wrapped compiler is replaced
    assert _host(trusting).probe([str(script)]) != first


def test_a_symlink_is_keyed_by_the_file_it_points_to(tmp_path):
    tool = _tool(tmp_path / "real")
    link = tmp_path / "bin" / "date"
    link.parent.mkdir()
    link.symlink_to(tool)
    assert file_identity(link)[0] == str(tool.resolve())
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    first = _host(memo).probe([str(link), *CLOCK])
    link.unlink()
    link.symlink_to(_tool(tmp_path / "newer"))  # e.g. /usr/local/cuda relinked to a new toolkit
    assert _host(memo).probe([str(link), *CLOCK]) != first


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": 99, "entries": {}}),
        json.dumps({"format": 1, "entries": {"k": {"file": "x", "code": "0", "output": 1}}}),
        json.dumps({"format": 1, "entries": {}}) + " " * (2 << 20),
    ],
)
def test_a_malformed_or_oversized_file_is_ignored(tmp_path, content):
    (tmp_path / PROBES_FILE).write_text(content)
    memo = ProbeMemo(tmp_path / PROBES_FILE)
    assert memo.entries == {}
    tool = _tool(tmp_path / "bin")
    assert _host(memo).probe([str(tool), *CLOCK]) is not None and memo.save()
    assert len(ProbeMemo(tmp_path / PROBES_FILE).entries) == 1


def test_an_unwritable_place_only_costs_the_probes(tmp_path):
    memo = ProbeMemo(tmp_path / "missing-folder" / PROBES_FILE)
    tool = _tool(tmp_path / "bin")
    assert _host(memo).probe([str(tool), *CLOCK]) is not None
    assert memo.save() is False
    assert _host(None).probe([str(tmp_path / "absent")]) is None
    assert memo.answer([str(tmp_path / "absent")], _host(None).run) is None
