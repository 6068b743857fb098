"""Only a client with the viewer's secret gets frames and controls; the viewer restarts cleanly."""

from __future__ import annotations

import socket
import time
import urllib.parse

import pytest
import torch
from websockets.exceptions import ConnectionClosed

from gsnb.model import GaussianModel
from gsnb.viewer import Viewer
from gsnb.viewer.access import REFUSED, has_secret, page_url
from gsnb.viewer.client import ViewerClient, look_from, socket_url

from .test_server import EYE, FOV, find, wait_until


def without_secret(url: str) -> str:
    """The viewer's page, its websocket named without the secret segment (or with a wrong one)."""
    ws = socket_url(url)
    return url.split("?")[0] + "?websocket=" + ws.rsplit("/", 1)[0] + "/"


def test_a_client_without_the_secret_gets_nothing_and_cannot_turn_a_knob(trainer, viewers):
    viewer = viewers(trainer)
    knob = {}
    with ViewerClient(viewer.url) as owner:  # learns the slider's id, as any page could guess
        owner.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        knob = find(owner, "GuiSliderMessage", "ssim_lambda")
    port = viewer.port
    strangers = [
        without_secret(viewer.url),
        f"http://127.0.0.1:{port}/",  # the bare port, as before the secret
        page_url(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", "guessed"),
    ]
    for url in strangers:
        received: list[dict] = []
        with pytest.raises(ConnectionClosed) as closed, ViewerClient(url) as stranger:
            stranger.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
            stranger.send(
                {"type": "GuiUpdateMessage", "uuid": knob["uuid"], "updates": {"value": 0.5}}
            )
            stranger.send({"type": "GuiUpdateMessage", "uuid": "x", "updates": {}})
            received.extend(stranger.messages(30.0))  # the refusal ends it
        assert closed.value.rcvd is not None and closed.value.rcvd.code == REFUSED, url
        assert received == [], url  # not one message: no scene, no GUI, no frame
    time.sleep(0.3)
    assert trainer.pending_knobs == {}
    assert viewer._gate.refused == len(strangers)
    # with the secret the same change goes through
    with ViewerClient(viewer.url) as owner:
        owner.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        slider = find(owner, "GuiSliderMessage", "ssim_lambda")
        owner.send({"type": "GuiUpdateMessage", "uuid": slider["uuid"], "updates": {"value": 0.5}})
        wait_until(lambda: trainer.pending_knobs == {"ssim_lambda": 0.5})
        assert owner.next_frame().ndim == 3


def test_the_secret_is_checked_by_value_and_urls_carry_it():
    assert has_secret("/gsnb-abc", "abc") and has_secret("/x/proxy/9/gsnb-abc/", "abc")
    assert not has_secret("/gsnb-abd", "abc") and not has_secret("/?gsnb-abc", "abc")
    assert not has_secret("/gsnb-abc/more", "abc") and not has_secret("", "abc")
    url = page_url("http://h:1", "ws://h:1", "a-b_c")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["websocket"] == [
        "ws://h:1/gsnb-a-b_c"
    ]


def test_stop_and_start_again_frees_the_port_and_serves_a_new_secret(viewers):
    model = GaussianModel.from_points(torch.rand(20, 3), torch.rand(20, 3), sh_degree=0)
    viewer = viewers(model, mode="render")
    port = viewer.port
    for _ in range(3):
        old = viewer.url
        with ViewerClient(viewer.url) as client:
            client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
            assert client.next_frame().ndim == 3
        viewer.stop()
        with socket.socket() as probe:  # free for a new server the moment stop returns
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
            probe.listen()
        viewer.show()  # prints the new URL outside a notebook, serving again
        assert viewer.port == port and viewer.url != old
        with pytest.raises(ConnectionClosed), ViewerClient(old) as stale:
            list(stale.messages(30.0))  # the refusal ends it
    threads = [t for t in __import__("threading").enumerate() if t.name == "gsnb-viewer"]
    assert len(threads) == 1  # no orphaned frame loop


def test_a_taken_port_after_stop_moves_the_restart_to_a_free_one(viewers):
    model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3), sh_degree=0)
    viewer = viewers(model)
    port = viewer.port
    viewer.stop()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        viewer.start()
        assert viewer.port != port
    viewer.stop()
    assert Viewer  # the module's public name stays importable


def test_a_killed_kernel_leaves_no_server_and_its_page_cannot_join_the_next(viewers, tmp_path):
    import os
    import subprocess
    import sys

    from gsnb.viewer.server import port_is_free

    script = (
        "import torch, sys\n"
        "from gsnb.model import GaussianModel\n"
        "from gsnb.viewer import Viewer\n"
        "m = GaussianModel.from_points(torch.rand(9, 3), torch.rand(9, 3), sh_degree=0)\n"
        "v = Viewer(m, port=0, mode='render')\n"
        "print(v.url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    kernel = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        old = kernel.stdout.readline().decode().strip()
        port = int(urllib.parse.urlsplit(old).port)
        assert not port_is_free("127.0.0.1", port)
    finally:
        kernel.kill()  # what a kernel restart does to the process
        kernel.wait(30)
    wait_until(lambda: port_is_free("127.0.0.1", port), timeout=5)
    model = GaussianModel.from_points(torch.rand(9, 3), torch.rand(9, 3), sh_degree=0)
    viewer = viewers(model, port=port, mode="render")  # the new kernel takes the same port
    # the old page's websocket does not get in
    with pytest.raises(ConnectionClosed), ViewerClient(old) as stale:
        list(stale.messages(30.0))  # the refusal ends it
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        assert client.next_frame().ndim == 3
