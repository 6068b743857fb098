"""A headless viewer client: drive a running viewer over viser's websocket protocol, no browser.

For scripts, tests and benchmarks: it connects as a browser would (the
``viser-v<version>`` subprotocol), reports a camera with viser's
``ViewerCameraMessage`` and decodes the frames the server streams back
(``BackgroundImageMessage``). The server's wire format is, per websocket
message: the msgpack payload's size and its zstd-compressed size (8 bytes
each, little-endian), the zstd-compressed msgpack ``{"messages": [...],
"binaryBufferLengths": [...]}``, then the raw binary buffers (numpy arrays such
as splat data), each starting at a multiple of 8 bytes; a message refers to
buffer ``i`` with ``{"__binary_index": i, "dtype": "<f4"}``.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import numpy as np


def decode_server_message(data: bytes) -> list[dict[str, Any]]:
    """The messages (dicts with a ``"type"`` key) in one websocket message from a viser server;
    binary buffers become numpy arrays.

    Example:
        >>> import msgspec, zstandard
        >>> inner = msgspec.msgpack.encode({"messages": [{"type": "Hello"}]})
        >>> packed = zstandard.ZstdCompressor().compress(inner)
        >>> data = len(inner).to_bytes(8, "little") + len(packed).to_bytes(8, "little") + packed
        >>> decode_server_message(data)
        [{'type': 'Hello'}]
    """
    import msgspec
    import zstandard

    if len(data) < 16:
        raise ValueError(f"a viser message has a 16-byte header; got {len(data)} bytes")
    size = int.from_bytes(data[:8], "little")
    packed = int.from_bytes(data[8:16], "little")
    if packed > len(data) - 16:
        raise ValueError(f"viser message claims {packed} compressed bytes; only {len(data) - 16}")
    inner = zstandard.ZstdDecompressor().decompress(data[16 : 16 + packed], max_output_size=size)
    payload = msgspec.msgpack.decode(inner)
    buffers = []
    offset = 16 + packed
    for length in payload.get("binaryBufferLengths", ()):
        offset += -offset % 8
        if offset + length > len(data):
            raise ValueError("viser message is shorter than its binary buffers")
        buffers.append(data[offset : offset + length])
        offset += length
    return [_with_arrays(m, buffers) for m in payload["messages"]]


def _with_arrays(value: Any, buffers: list[bytes]) -> Any:
    """``value`` with every binary placeholder replaced by its numpy array."""
    if isinstance(value, dict):
        if "__binary_index" in value and "dtype" in value:
            return np.frombuffer(buffers[value["__binary_index"]], dtype=value["dtype"])
        return {k: _with_arrays(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_arrays(v, buffers) for v in value]
    return value


def socket_url(url: str) -> str:
    """The websocket a browser opening ``url`` connects to: viser's ``?websocket=`` parameter
    when the page names one, else the page's own address.

    Example:
        >>> socket_url("http://127.0.0.1:8080/?websocket=ws://127.0.0.1:8080/gsnb-abc")
        'ws://127.0.0.1:8080/gsnb-abc'
        >>> socket_url("https://hub.example/proxy/8080/")
        'wss://hub.example/proxy/8080/'
    """
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    named = urllib.parse.parse_qs(parts.query).get("websocket")
    if named:
        return named[0]
    page = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return page.replace("http://", "ws://", 1).replace("https://", "wss://", 1)


class ViewerClient:
    """Connects to a viewer at ``url`` (the viewer's :attr:`~gsnb.viewer.Viewer.url`, which
    names the websocket and carries its secret) like a browser tab.

    Example:
        >>> # with ViewerClient(viewer.url) as client:
        >>> #     client.send_camera((1, 0, 0, 0), (0, 0, -3), fov=0.8, width=640, height=360)
        >>> #     image = client.next_frame(min_width=640)   # [360, 640, 3] uint8
    """

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        import viser
        from websockets.sync.client import connect

        self.connection = connect(
            socket_url(url),
            subprotocols=[f"viser-v{viser.__version__}"],  # type: ignore[list-item]
            max_size=None,
            open_timeout=timeout,
            compression=None,
        )
        self.received: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        """Send one client-to-server message (a dict with viser's ``"type"`` and fields)."""
        import msgspec

        self.connection.send(msgspec.msgpack.encode(message))

    def send_camera(
        self,
        wxyz: tuple[float, ...],
        position: tuple[float, ...],
        fov: float,
        width: int,
        height: int,
        look_at: tuple[float, ...] | None = None,
        up: tuple[float, ...] = (0.0, 0.0, 1.0),
    ) -> None:
        """Report the camera: pose ``T_world_camera`` (OpenCV), vertical ``fov`` (radians), canvas.

        ``look_at`` defaults to one unit ahead of the camera.
        """
        from gsnb.cameras import matrix_from_wxyz

        if look_at is None:
            ahead = matrix_from_wxyz(wxyz)[:, 2]
            look_at = tuple(float(p + a) for p, a in zip(position, ahead, strict=True))
        self.send(
            {
                "type": "ViewerCameraMessage",
                "wxyz": [float(v) for v in wxyz],
                "position": [float(v) for v in position],
                "fov": float(fov),
                "near": 0.01,
                "far": 1000.0,
                "image_height": int(height),
                "image_width": int(width),
                "look_at": [float(v) for v in look_at],
                "up_direction": [float(v) for v in up],
            }
        )

    def messages(self, timeout: float) -> Iterator[dict[str, Any]]:
        """Messages from the server as they arrive, until ``timeout`` seconds have passed."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                data = self.connection.recv(timeout=left)
            except TimeoutError:
                return
            if isinstance(data, str):
                continue
            for message in decode_server_message(data):
                self.received.append(message)
                yield message

    def next_frame(self, timeout: float = 30.0, min_width: int = 0) -> np.ndarray:
        """The next streamed frame at least ``min_width`` wide: ``[H, W, 3]`` uint8."""
        from PIL import Image

        for message in self.messages(timeout):
            if message.get("type") != "BackgroundImageMessage" or not message.get("rgb_data"):
                continue
            image = np.asarray(Image.open(io.BytesIO(message["rgb_data"])).convert("RGB"))
            if image.shape[1] >= min_width:
                return image
        raise TimeoutError(f"no frame at least {min_width} px wide within {timeout} s")

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def __enter__(self) -> ViewerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def look_from(
    position: tuple[float, float, float], target: tuple[float, float, float]
) -> tuple[float, float, float, float]:
    """The ``wxyz`` of an OpenCV camera at ``position`` looking at ``target`` with +z world up.

    Example:
        >>> [round(v, 3) + 0.0 for v in look_from((0, -5, 0), (0, 0, 0))]
        [0.707, -0.707, 0.0, 0.0]
    """
    from gsnb.cameras import look_at, wxyz_from_matrix

    forward = np.subtract(target, position, dtype=np.float64)
    # Looking straight up or down, +z cannot be the image's up: +y takes its place.
    vertical = abs(float(forward[2])) > (1 - 1e-6) * float(np.linalg.norm(forward))
    viewmat = look_at(position, target, up=(0.0, 1.0, 0.0) if vertical else (0.0, 0.0, 1.0))
    wxyz = wxyz_from_matrix(viewmat[:3, :3].T)  # the camera-to-world rotation
    return tuple(float(v) for v in wxyz)  # type: ignore[return-value]
