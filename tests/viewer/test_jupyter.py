"""Finding the notebook's Jupyter server and asking it whether it proxies the viewer."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from gsnb.viewer.jupyter import JupyterServer, find_server, proxy_embed_html, proxy_works

LAB = {"url": "http://127.0.0.1:8888/", "base_url": "/", "pid": 10, "token": "t1"}
HUB = {"url": "http://127.0.0.1:9999/user/ada/", "base_url": "/user/ada/", "pid": 20, "token": ""}


def test_the_kernels_parent_server_is_chosen_and_a_hub_prefix_is_kept(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    assert find_server([LAB, HUB], ancestors=[20]).base_url == "/user/ada/"
    assert find_server([LAB, HUB], ancestors=[5, 10]).token == "t1"  # through a wrapper
    assert find_server([LAB, HUB], ancestors=[99]) is None  # two servers, neither ours
    # a lone server: ours when it keeps this kernel's connection file, else an editor's kernel
    assert find_server([LAB], ancestors=[99], in_runtime_dir=True).url == LAB["url"]
    assert find_server([LAB], ancestors=[99], in_runtime_dir=False) is None
    assert find_server([], ancestors=[99]) is None  # a terminal
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token")
    assert find_server([LAB, HUB], ancestors=[99]).url == HUB["url"]
    unseen = find_server([], ancestors=[99])  # the hub's runtime file out of sight
    assert unseen == JupyterServer("", "/user/ada/", "hub-token")
    assert unseen.proxy_path(8080) == "/user/ada/proxy/8080/"


def test_the_process_chain_reaches_this_process_parent():
    import os

    from gsnb.viewer.jupyter import _ancestors

    chain = _ancestors(os.getpid())
    assert chain[0] == os.getppid() and os.getpid() not in chain


@pytest.fixture
def jupyter_like() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that answers 200 under /user/ada/proxy/4242/ and 404 elsewhere."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            self.send_response(200 if self.path == "/user/ada/proxy/4242/" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/user/ada/", seen
    server.shutdown()
    server.server_close()


def test_the_server_is_asked_whether_it_proxies_the_port(jupyter_like):
    url, seen = jupyter_like
    server = JupyterServer(url, "/user/ada/", "secret-token")
    assert proxy_works(server, 4242, timeout=30)
    assert not proxy_works(server, 4343, timeout=30)  # 404: no proxy route
    assert seen == [
        "/user/ada/proxy/4242/ token secret-token",
        "/user/ada/proxy/4343/ token secret-token",
    ]


def test_the_embed_builds_its_urls_from_the_browsers_location():
    html = proxy_embed_html(JupyterServer("", "/user/ada/"), 4242, "s3cret", height=300)
    assert 'new URL("/user/ada/proxy/4242/", window.location.href)' in html
    assert '"gsnb-s3cret"' in html and "height:300px" in html
    assert "127.0.0.1" not in html


def test_the_remote_hint_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from gsnb.viewer.jupyter import remote_hint

    assert remote_hint(None, 81).startswith("no Jupyter server runs this kernel")
    assert "ssh -L 81:127.0.0.1:81 HOST" in remote_hint(None, 81)
    server = JupyterServer("http://127.0.0.1:8888/", "/")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "pip install jupyter-server-proxy" in remote_hint(server, 81)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert "jupyter-server-proxy (installed) loads" in remote_hint(server, 81)
