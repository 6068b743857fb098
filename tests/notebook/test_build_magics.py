"""``%gs_build`` and ``%gs_doctor`` in a real IPython shell."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gsnb.toolchain import BuildError
from gsnb.toolchain.report import DoctorReport


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gsnb")
    return ip


def test_help_lists_the_options(shell, capsys):
    shell.run_cell("%gs_build?")
    out = capsys.readouterr().out
    for option in ("--arch", "--force", "--clean", "--verify", "--verbose", "--jobs"):
        assert option in out


def test_bad_option_is_a_usage_error(shell):
    with pytest.raises(UsageError, match="unrecognized arguments: --bogus"):
        shell.run_line_magic("gs_build", "--bogus")
    with pytest.raises(UsageError, match="--jobs must be 1 or more"):
        shell.run_line_magic("gs_build", "--jobs 0")
    with pytest.raises(UsageError, match=r"like 9\.0"):
        shell.run_line_magic("gs_doctor", "--arch nine")


def test_doctor_returns_a_table(shell, tmp_path):
    report = shell.run_line_magic("gs_doctor", f"--arch 9.0 --cache-dir {tmp_path}")
    assert isinstance(report, DoctorReport)
    assert "CUDA toolkit" in str(report) and "<table>" in report._repr_html_()


def test_doctor_json(shell, tmp_path, capsys):
    assert shell.run_line_magic("gs_doctor", f"--json --arch 9.0 --cache-dir {tmp_path}") is None
    assert '"checks"' in capsys.readouterr().out


def test_build_failure_shows_cause_and_fix_without_a_traceback(shell, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BuildError) as caught:
        shell.run_line_magic(
            "gs_build", f"--arch 9.0 --cache-dir {blocker / 'cache'} --no-progress"
        )
    lines = caught.value._render_traceback_()
    assert lines[0].startswith("BuildError: cannot build:") and "not writable" in lines[0]
    assert any(line.startswith("fix: set GSNB_CACHE_DIR") for line in lines)
    result = shell.run_cell(f"%gs_build --arch 9.0 --cache-dir {blocker / 'cache'} --no-progress")
    assert isinstance(result.error_in_exec, BuildError)
    shown = capsys.readouterr()
    assert "Traceback" not in shown.out + shown.err and "not writable" in shown.out + shown.err
