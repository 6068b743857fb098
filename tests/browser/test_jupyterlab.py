"""A real browser: JupyterLab runs ``%gs_train`` in a notebook; headless Chromium shows the panel.

Needs Debian's ``chromium`` (``apt-get install chromium``; CI installs it in
``.ci/run``), driven through Playwright with ``executable_path`` (no browser
download). The screenshot is kept as ``test-artifacts/jupyterlab-panel.png``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",  # containers often have a small /dev/shm
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
STEPS = 3000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run does)",
    ),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_notebook(folder: Path) -> Path:
    cells = [
        "from gsnb.data.synthetic import make_synthetic_scene\n"
        "scene = make_synthetic_scene('scene', num_views=6, size=48, num_points=400, samples=1)",
        "%load_ext gsnb\n"
        f"%gs_train scene --steps {STEPS} --device cpu --sh-degree 1 --test-every 3 "
        "--eval-every 50",
        "print('the notebook is free at step', trainer.step_count)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = folder / "panel.ipynb"
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def jupyterlab(tmp_path: Path) -> Iterator[str]:
    """A token-less JupyterLab on 127.0.0.1 with a temporary root, config and data folder."""
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(root)
    port = free_port()
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env[name] = str(tmp_path / name.lower())
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        command.append("--allow-root")
    log = (tmp_path / "jupyterlab.log").open("w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as reply:
                    json.load(reply)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(
                        "JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()
                    ) from None
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_the_panel_trains_live_in_jupyterlab(jupyterlab: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "jupyterlab-panel.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(f"{jupyterlab}/lab/tree/panel.ipynb", timeout=60_000)
            page.wait_for_function(
                "() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session"
                "?.kernel?.status === 'idle'",
                timeout=90_000,
            )
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # the plot, with a drawn loss curve, and the live render as a loaded image
            page.wait_for_function(
                """() => [...document.querySelectorAll('.js-plotly-plot path.js-line')]
                         .some(p => (p.getAttribute('d') || '').split('L').length > 2)""",
                timeout=90_000,
            )
            page.wait_for_function(
                """() => [...document.querySelectorAll('img.widget-image')]
                         .filter(i => i.complete && i.naturalWidth > 0).length >= 2""",
                timeout=30_000,
            )
            assert page.locator(".js-plotly-plot").first.is_visible()
            assert page.locator("img.widget-image").first.is_visible()
            assert page.get_by_text(f" / {STEPS}").first.is_visible()  # the progress line
            # the cell after %gs_train ran while training goes on in the background
            assert page.get_by_text("the notebook is free at step").first.is_visible()
            page.screenshot(path=str(shot), full_page=True)
            page.get_by_role("button", name="Pause").first.click()
            page.wait_for_selector("b:text-is('paused')", timeout=30_000)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
