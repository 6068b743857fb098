"""The viewer through the notebook's own Jupyter server (jupyter-server-proxy).

A kernel on another machine (JupyterHub, a cloud box behind one forwarded
port) binds the viewer on *its* ``127.0.0.1``, which the user's browser cannot
reach. jupyter-server-proxy serves ``{base_url}proxy/{port}/`` on the Jupyter
server itself, HTTP and websockets, behind Jupyter's own login, so the
browser needs nothing but the Jupyter URL it already has.

:func:`find_server` finds the server that runs this kernel (the kernel is
its child process; ``JUPYTERHUB_SERVICE_PREFIX`` gives a hub's prefix), and
:func:`proxy_works` asks that server whether the proxy answers for the viewer's
port.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsnb.viewer.access import socket_path

FORWARD = "forward the port: ssh -L {port}:127.0.0.1:{port} HOST"


@dataclass(frozen=True)
class JupyterServer:
    """A running Jupyter server: its own URL, the path prefix the browser sees, its login token.

    Example:
        >>> JupyterServer("http://127.0.0.1:8888/", "/user/ada/").proxy_path(8080)
        '/user/ada/proxy/8080/'
    """

    url: str
    base_url: str
    token: str = field(default="", repr=False)  # a notebook's output must not show it

    def proxy_path(self, port: int) -> str:
        """The browser's path to a local ``port`` through jupyter-server-proxy."""
        return f"{self.base_url.rstrip('/')}/proxy/{int(port)}/"


def _running_servers() -> list[dict[str, Any]]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return []
    try:
        return list(list_running_servers())
    except (OSError, ValueError):
        return []


def _ancestors(pid: int, depth: int = 4) -> list[int]:
    """``pid``'s parent, grandparent, ... (Linux ``/proc``; only the parent elsewhere)."""
    chain = [os.getppid()] if pid == os.getpid() else []
    current = pid
    for _ in range(depth):
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            break
        current = int(stat.rpartition(")")[2].split()[1])  # the field after the name: ppid
        if current <= 1:
            break
        if current not in chain:
            chain.append(current)
    return chain


def _kernel_in_runtime_dir() -> bool:
    """Whether this kernel's connection file lies in Jupyter's runtime folder, where a server
    puts the kernels it starts (an editor's kernels live elsewhere)."""
    try:
        from ipykernel.connect import get_connection_file
        from jupyter_core.paths import jupyter_runtime_dir

        folder = os.path.dirname(os.path.abspath(get_connection_file()))
        return os.path.samefile(folder, jupyter_runtime_dir())
    except Exception:  # not a kernel, or no such folder: no evidence either way
        return False


def find_server(
    servers: list[dict[str, Any]] | None = None,
    ancestors: list[int] | None = None,
    in_runtime_dir: bool | None = None,
) -> JupyterServer | None:
    """The Jupyter server that runs this kernel, or None (a terminal, an editor's kernel).

    A server starts its kernels, so its pid is the kernel's parent (or a
    grandparent, through a wrapper such as ``conda run``); a hub's single-user
    server also sets ``JUPYTERHUB_SERVICE_PREFIX`` in the kernel's environment.
    A lone running server counts only when this kernel's connection file lies
    in the runtime folder that server uses.

    Example:
        >>> info = {"url": "http://127.0.0.1:8888/", "base_url": "/", "pid": 41, "token": ""}
        >>> find_server([info], ancestors=[41]).base_url
        '/'
    """
    servers = _running_servers() if servers is None else servers
    ancestors = _ancestors(os.getpid()) if ancestors is None else ancestors
    hub_prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    chosen = next((s for pid in ancestors for s in servers if s.get("pid") == pid), None)
    if chosen is None and hub_prefix:
        chosen = next((s for s in servers if s.get("base_url") == hub_prefix), None)
    if chosen is None and len(servers) == 1:
        lone = _kernel_in_runtime_dir() if in_runtime_dir is None else in_runtime_dir
        chosen = servers[0] if lone else None
    if chosen is None:
        if hub_prefix:  # a hub's server whose runtime file this kernel cannot see
            return JupyterServer("", hub_prefix, os.environ.get("JUPYTERHUB_API_TOKEN", ""))
        return None
    base = str(chosen.get("base_url") or hub_prefix or "/")
    token = str(chosen.get("token") or os.environ.get("JUPYTERHUB_API_TOKEN", ""))
    return JupyterServer(str(chosen.get("url", "")), base, token)


def proxy_works(server: JupyterServer, port: int, timeout: float = 3.0) -> bool:
    """Whether ``server`` proxies ``{base_url}proxy/{port}/`` to a local HTTP server on ``port``.

    Asks the server itself when it can; when it cannot (no local URL, a login it
    does not accept from here) trusts an installed jupyter-server-proxy.
    """
    if server.url:
        root = server.url.rstrip("/")
        prefix = server.base_url.rstrip("/")
        # the server's url already ends with its base_url
        if prefix and root.endswith(prefix):
            root = root[: -len(prefix)]
        request = urllib.request.Request(root + server.proxy_path(port))
        if server.token:
            request.add_header("Authorization", f"token {server.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return reply.status == 200
        except urllib.error.HTTPError as err:
            if err.code == 404:  # the server has no /proxy/ route
                return False
        except (OSError, ValueError):
            pass
    import importlib.util

    return importlib.util.find_spec("jupyter_server_proxy") is not None


def proxy_embed_html(server: JupyterServer, port: int, secret: str, height: int = 600) -> str:
    """HTML that shows the viewer through the Jupyter server, in an iframe.

    The page's address comes from the browser (``window.location``), so it works
    whatever host name, scheme or forwarded port the user reaches Jupyter by;
    viser's client needs the websocket's full URL, which only the browser knows.

    Example:
        >>> html = proxy_embed_html(JupyterServer("", "/"), 8080, "abc")
        >>> "/proxy/8080/" in html and "gsnb-abc" in html
        True
    """
    path = json.dumps(server.proxy_path(port))
    key = json.dumps(socket_path(secret))
    frame = f"gsnb-viewer-{int(port)}-{secret[:8]}"
    return (
        f'<iframe id="{html.escape(frame)}" style="width:100%;height:{int(height)}px;border:0" '
        f'allow="fullscreen"></iframe>\n'
        "<script>(() => {\n"
        f"  const page = new URL({path}, window.location.href);\n"
        f"  const socket = page.href.replace(/^http/, 'ws') + {key};\n"
        f"  document.getElementById({json.dumps(frame)}).src =\n"
        "    page.href + '?websocket=' + encodeURIComponent(socket);\n"
        "})();</script>"
    )


def viewer_display(
    url: str, host: str, port: int, secret: str, height: int = 600
) -> tuple[Any, str | None]:
    """What shows the viewer at ``url`` (``host``, ``port``, its ``secret``) in a notebook:
    the embedding through the Jupyter server's proxy when it answers, else an IFrame of
    this machine's address, and a line of advice for the latter (else None).

    Example:
        >>> shown, note = viewer_display("http://127.0.0.1:8080/", "0.0.0.1", 8080, "abc")
        >>> type(shown).__name__, "8080" in note
        ('IFrame', True)
    """
    from IPython.display import HTML, IFrame

    server = find_server() if host in ("127.0.0.1", "localhost", "0.0.0.0") else None
    if server is not None and proxy_works(server, port):
        return HTML(proxy_embed_html(server, port, secret, height)), None
    note = f"gsnb viewer: {url} (this machine only); " + remote_hint(server, port)
    return IFrame(url, width="100%", height=height), note


def remote_hint(server: JupyterServer | None, port: int) -> str:
    """How a browser on another machine reaches a viewer on ``port`` that the Jupyter server
    ``server`` (None: no server runs this kernel) does not proxy.

    Example:
        >>> remote_hint(None, 8080)[:60]
        'no Jupyter server runs this kernel (an editor, papermill): f'
    """
    forward = FORWARD.format(port=port)
    if server is None:
        return f"no Jupyter server runs this kernel (an editor, papermill): {forward}"
    if importlib.util.find_spec("jupyter_server_proxy") is None:
        return (
            "to see it from a remote notebook, pip install jupyter-server-proxy and restart "
            f"the Jupyter server (or {forward})"
        )
    return (
        "the Jupyter server does not proxy it: restart the server so that "
        f"jupyter-server-proxy (installed) loads (or {forward})"
    )


def show_viewer(url: str, host: str, port: int, secret: str, height: int = 600) -> None:
    """Show the viewer at ``url`` in a notebook (see :func:`viewer_display`), or print its
    address outside one.

    Example:
        >>> show_viewer("http://127.0.0.1:8080/?websocket=...", "127.0.0.1", 8080, "abc")
        gsnb viewer: open http://127.0.0.1:8080/?websocket=...
    """
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        print(f"gsnb viewer: open {url}")
        return
    from IPython.display import display

    shown, note = viewer_display(url, host, port, secret, height)
    display(shown)
    if note is not None:
        print(note)
