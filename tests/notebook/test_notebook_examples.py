"""The docstring examples of gsnb.notebook (panel, %gs_train, ...) and gsnb.viewer run.

The ``Viewer`` example starts a real server on a free port.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "gsnb.notebook.figures",
    "gsnb.notebook.knob_widgets",
    "gsnb.notebook.panel",
    "gsnb.notebook.process_magics",
    "gsnb.notebook.top_view",
    "gsnb.notebook.train_magics",
    "gsnb.viewer.cameras",
    "gsnb.viewer.client",
    "gsnb.viewer.frames",
    "gsnb.viewer.gui",
    "gsnb.viewer.server",
    "gsnb.viewer.splats",
    "gsnb.viewer.stream",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
