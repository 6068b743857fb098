"""``Viewer.show()`` in a real IPython kernel that no Jupyter server runs: the direct IFrame and
one line saying what to do from a remote browser."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("ipykernel")
pytest.importorskip("jupyter_client")

CELL = """
import torch
from gsnb.model import GaussianModel
from gsnb.viewer import Viewer
model = GaussianModel.from_points(torch.rand(9, 3), torch.rand(9, 3), sh_degree=0)
viewer = Viewer(model)
viewer.show(height=321)
viewer.stop()
"""


def test_without_a_jupyter_server_show_embeds_the_direct_url_and_says_what_to_do(tmp_path: Path):
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path)  # no server's runtime file: a bare kernel
    env.pop("JUPYTERHUB_SERVICE_PREFIX", None)
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    outputs: list[dict] = []
    try:
        reply = client.execute_interactive(
            CELL, timeout=120, output_hook=lambda m: outputs.append(m)
        )
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    frames = [
        m["content"]["data"]["text/html"]
        for m in outputs
        if m["msg_type"] == "display_data" and "text/html" in m["content"]["data"]
    ]
    text = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
    assert len(frames) == 1 and 'src="http://127.0.0.1:' in frames[0] and "gsnb-" in frames[0]
    assert 'height="321"' in frames[0]
    lines = [line for line in text.splitlines() if line.startswith("gsnb viewer:")]
    assert len(lines) == 1 and "no Jupyter server runs this kernel" in lines[0]
    assert "ssh -L" in lines[0] and "viser" not in text  # no banner without the secret
