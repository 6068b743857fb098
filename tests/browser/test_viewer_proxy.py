"""A real browser reaches the viewer through the Jupyter server only (jupyter-server-proxy).

The notebook's kernel starts a viewer on a port of its machine and embeds it
with ``viewer.show()``; headless Chromium opens the notebook through the
Jupyter port, with every direct request to the viewer's own port blocked
(HTTP and websockets). The viewer's page must load, connect its websocket
through ``/proxy/PORT/`` with the viewer's secret, and receive rendered frames.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from gsnb.viewer.client import decode_server_message

from .test_jupyterlab import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, free_port
from .test_jupyterlab import jupyterlab as jupyterlab  # the fixture: a token-less JupyterLab

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run does)",
    ),
]
pytest.importorskip("jupyter_server_proxy", reason="needs jupyter-server-proxy (gsnb[viewer])")


def write_notebook(folder: Path, port: int) -> None:
    cells = [
        "import torch\n"
        "from gsnb.model import GaussianModel\n"
        "from gsnb.viewer import Viewer\n"
        "g = torch.Generator().manual_seed(0)\n"
        "model = GaussianModel.from_points(torch.randn(200, 3, generator=g) * 0.5,\n"
        "                                  torch.rand(200, 3, generator=g), sh_degree=0)\n"
        f"viewer = Viewer(model, port={port}, mode='render', max_size=160)\n"
        "viewer.show(height=400)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(notebook, folder / "viewer.ipynb")


def test_the_viewer_streams_through_the_jupyter_port_only(jupyterlab: str, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    port = free_port()
    write_notebook(tmp_path / "root", port)
    direct = re.compile(rf"^(https?|wss?)://[^/]*:{port}(/|$)")
    blocked: list[str] = []
    frames: list[bytes] = []
    sockets: list[str] = []

    def on_socket(ws) -> None:
        sockets.append(ws.url)
        if f"/proxy/{port}/" not in ws.url:
            return  # the kernel's and JupyterLab's own sockets

        def received(payload) -> None:
            if isinstance(payload, bytes):
                for message in decode_server_message(payload):
                    if message["type"] == "BackgroundImageMessage" and message.get("rgb_data"):
                        frames.append(message["rgb_data"])

        ws.on("framereceived", received)

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 1000})
            # the viewer's own port is unreachable from the page and its frames
            context.route(direct, lambda route: (blocked.append(route.request.url), route.abort()))
            context.route_web_socket(direct, lambda ws: (blocked.append(ws.url), ws.close()))
            page = context.new_page()
            page.on("websocket", on_socket)
            page.goto(f"{jupyterlab}/lab/tree/viewer.ipynb", timeout=60_000)
            page.wait_for_function(
                "() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session"
                "?.kernel?.status === 'idle'",
                timeout=90_000,
            )
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            frame = page.frame_locator(f"iframe[id^='gsnb-viewer-{port}']")
            frame.locator("canvas").first.wait_for(timeout=60_000)
            page.wait_for_timeout(500)
            deadline = 60_000
            while len(frames) < 2 and deadline > 0:
                page.wait_for_timeout(250)
                deadline -= 250
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-viewer-proxy.png"))
            # no address without the secret in the output (viser's own banner)
            banner = page.get_by_text(f"127.0.0.1:{port}").count()
        finally:
            browser.close()
    viewer_sockets = [url for url in sockets if f"/proxy/{port}/" in url]
    assert viewer_sockets, sockets
    assert all(url.startswith(jupyterlab.replace("http", "ws")) for url in viewer_sockets)
    assert all(re.search(r"/gsnb-[\w-]{20,}$", url) for url in viewer_sockets)
    assert len(frames) >= 2 and all(f[:2] == b"\xff\xd8" for f in frames)  # JPEG frames
    assert banner == 0
    assert blocked == []  # nothing even tried the direct port: all went through Jupyter
