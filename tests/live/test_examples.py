"""The docstring examples of gsnb.live run, and nothing there imports a GUI library."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

MODULES = ["gsnb.live.controls", "gsnb.live.imaging", "gsnb.live.throttle"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_importing_gsnb_live_loads_no_gui_library():
    code = (
        "import sys\n"
        f"import {', '.join(MODULES)}\n"
        "print(sorted(m for m in ('ipywidgets', 'plotly', 'viser') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
