"""``import gsnb`` makes idle OpenMP threads sleep, where that can still take effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


SHOW = (
    "import os; from gsnb.cpu import wait_policy_note;"
    "print(os.environ.get('OMP_WAIT_POLICY'), '|', wait_policy_note())"
)


def test_import_gsnb_sets_passive_and_says_so() -> None:
    value, note = _run(f"import gsnb; {SHOW}").split(" | ")
    assert value == "PASSIVE" and note == "OMP_WAIT_POLICY=PASSIVE, set by gsnb"


def test_a_value_the_user_set_is_kept() -> None:
    value, note = _run(f"import gsnb; {SHOW}", OMP_WAIT_POLICY="ACTIVE").split(" | ")
    assert value == "ACTIVE" and "export OMP_WAIT_POLICY=PASSIVE" in note


@pytest.mark.parametrize("first", ["import torch"])
def test_too_late_after_torch_and_the_note_says_what_to_do(first: str) -> None:
    value, note = _run(f"{first}; import gsnb; {SHOW}").split(" | ")
    assert value == "None" and "import gsnb before torch" in note


def test_docstring_examples() -> None:
    import doctest

    import gsnb.cpu

    result = doctest.testmod(gsnb.cpu)
    assert result.attempted > 0 and result.failed == 0
