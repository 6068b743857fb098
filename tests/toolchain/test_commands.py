"""``gsnb doctor`` and ``gsnb build`` through the real command line entry point."""

from __future__ import annotations

import json

import pytest

from gsnb import cli


def test_doctor_json_names_the_toolkit_and_the_checks(tmp_path, capsys):
    code = cli.main(["doctor", "--json", "--arch", "9.0", "--cache-dir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in report["checks"]]
    assert names[:2] == ["platform", "torch"] and "CUDA toolkit" in names and "build cache" in names
    assert report["cache_dir"] == str(tmp_path) and report["archs"] == ["9.0"]
    assert code == (0 if report["ready"] else 1)
    if report["toolkit"] is not None:
        assert report["toolkit"]["reason"]


def test_doctor_text_ends_with_a_verdict(tmp_path, capsys):
    cli.main(["doctor", "--arch", "9.0", "--cache-dir", str(tmp_path)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(("ready to build", "cannot build"))


def test_doctor_rejects_a_bad_arch(tmp_path, capsys):
    assert cli.main(["doctor", "--arch", "nine", "--cache-dir", str(tmp_path)]) == 2
    assert "like 9.0" in capsys.readouterr().err


def test_build_failure_prints_cause_and_fix(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = cli.main(
        ["build", "--arch", "9.0", "--cache-dir", str(blocker / "cache"), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "not writable" in err and "fix: set GSNB_CACHE_DIR" in err


def test_build_rejects_zero_jobs(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["build", "--jobs", "0"])
    assert caught.value.code == 2 and "--jobs must be 1 or more" in capsys.readouterr().err
