"""A per-viewer secret: only a browser given the viewer's URL gets frames and controls.

viser (1.x) has no authentication and no public hook on its websocket
handshake: anyone who can reach its port receives the scene, the frames and
the GUI, and can press every button. gsnb keeps viser's page (a public,
static JavaScript bundle with no scene data) and gates the websocket: the
page's URL names the websocket URL in viser's ``?websocket=`` parameter, and
that websocket URL carries the secret as its last path segment
(``ws://127.0.0.1:PORT/gsnb-<secret>``). A connection without it is closed
(code 1008, policy violation) before viser starts sending or reading
messages, so it never sees a frame nor reaches a control.

The gate is a connect callback placed first in viser's websocket server (the
``_client_connect_cb`` list of ``ViserServer._websock_server``): it runs before
viser's own callbacks and before the connection's message tasks start. A
refused connection reads no message (a client may have sent some before the
close), and the server's message dispatch drops any from a client that did
not pass.
"""

from __future__ import annotations

import secrets
import urllib.parse
from typing import Any

# Path segment prefix of the secret in the websocket URL: readable in a log, unlikely to clash.
PREFIX = "gsnb-"
# Websocket close code for a refused connection (RFC 6455: policy violation).
REFUSED = 1008


def new_secret() -> str:
    """A fresh URL-safe secret (128 bits).

    Example:
        >>> len(new_secret()) >= 22
        True
    """
    return secrets.token_urlsafe(16)


def socket_path(secret: str) -> str:
    """The websocket path that carries ``secret``.

    Example:
        >>> socket_path("abc")
        'gsnb-abc'
    """
    return PREFIX + secret


def has_secret(request_path: str, secret: str) -> bool:
    """Whether a websocket request path (query included) ends with the secret's segment.

    Example:
        >>> has_secret("/proxy/8080/gsnb-abc", "abc"), has_secret("/", "abc")
        (True, False)
    """
    path = request_path.partition("?")[0].rstrip("/")
    last = urllib.parse.unquote(path.rpartition("/")[2])
    return secrets.compare_digest(last.encode(), socket_path(secret).encode())


def page_url(http_base: str, ws_base: str, secret: str) -> str:
    """The page to open: viser's client at ``http_base``, told to connect to the gated socket.

    Example:
        >>> page_url("http://127.0.0.1:8080/", "ws://127.0.0.1:8080/", "abc")
        'http://127.0.0.1:8080/?websocket=ws://127.0.0.1:8080/gsnb-abc'
    """
    socket = ws_base.rstrip("/") + "/" + socket_path(secret)
    # viser's client reads the parameter with URLSearchParams: ':' and '/' may stay as they are
    return http_base.rstrip("/") + "/?websocket=" + urllib.parse.quote(socket, safe=":/")


class Gate:
    """Closes every websocket of ``server`` (a ``viser.ViserServer``) that lacks ``secret``.

    :meth:`allowed` tells the viewer's own callbacks which clients passed.

    Example:
        >>> # gate = Gate(viser_server, secret); gate.allowed(client.client_id)
    """

    def __init__(self, server: Any, secret: str) -> None:
        self.secret = secret
        self.refused = 0
        self._passed: set[int] = set()
        websock = server._websock_server
        self._connections: dict[int, Any] = websock._live_connections
        # first: before viser's own callbacks build the client's handle and before its
        # message tasks start
        websock._client_connect_cb.insert(0, self._check)
        # and a message from a refused client (sent before its connection closed) reaches no
        # handler: the GUI's and the scene's handlers hang on the server's dispatch
        dispatch = websock._handle_incoming_message

        async def guarded(client_id: int, message: Any) -> None:
            if client_id in self._passed:
                await dispatch(client_id, message)

        websock._handle_incoming_message = guarded
        self._loop = websock._background_event_loop
        # a client that connected between the server's start and now is checked as well
        for client_id, connection in list(self._connections.items()):
            if not self._passes(connection):
                self._close_soon(connection)
            else:
                self._passed.add(client_id)

    def allowed(self, client_id: int) -> bool:
        """Whether the client ``client_id`` presented the secret."""
        return client_id in self._passed

    def forget(self, client_id: int) -> None:
        """Drop a disconnected client."""
        self._passed.discard(client_id)

    def _passes(self, connection: Any) -> bool:
        request = getattr(connection, "request", None)
        return request is not None and has_secret(request.path, self.secret)

    async def _check(self, conn: Any) -> None:
        connection = self._connections.get(conn.client_id)
        if connection is not None and self._passes(connection):
            self._passed.add(conn.client_id)
            return
        self.refused += 1
        if connection is not None:
            # messages already received would still be read after the close: read none
            connection.recv = _closed
            await connection.close(REFUSED, "this viewer needs the URL it printed (with its key)")

    def _close_soon(self, connection: Any) -> None:
        import asyncio

        self.refused += 1
        connection.recv = _closed
        asyncio.run_coroutine_threadsafe(connection.close(REFUSED, "no key"), self._loop)


async def _closed(*args: object, **kwargs: object) -> Any:
    """``recv`` of a refused connection: closed, whatever it had sent."""
    from websockets.exceptions import ConnectionClosedError

    raise ConnectionClosedError(None, None)
