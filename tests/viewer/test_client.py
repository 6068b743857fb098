"""Tests for gsnb/viewer/client.py: the wire format decoder and camera helper."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import zstandard

from gsnb.viewer.cameras import view_from_pose
from gsnb.viewer.client import decode_server_message, look_from


def pack(messages: list, buffers: list[bytes]) -> bytes:
    """A server message laid out as viser's producer writes it (independent of the decoder)."""
    inner = msgspec.msgpack.encode(
        {"messages": messages, "binaryBufferLengths": [len(b) for b in buffers]}
    )
    packed = zstandard.ZstdCompressor(level=1).compress(inner)
    out = len(inner).to_bytes(8, "little") + len(packed).to_bytes(8, "little") + packed
    for buffer in buffers:
        out += b"\0" * (-len(out) % 8) + buffer
    return out


def test_decodes_messages_and_binary_buffers():
    a = np.arange(6, dtype=np.float32)
    b = np.arange(3, dtype=np.uint16)  # 6 bytes: the next buffer needs padding
    c = np.array([7, 8], dtype=np.uint32)
    placeholder = [{"__binary_index": i, "dtype": x.dtype.str} for i, x in enumerate((a, b, c))]
    messages = [
        {"type": "PointCloudMessage", "props": {"points": placeholder[0], "n": 3}},
        {"type": "Other", "items": [placeholder[1], placeholder[2]], "rgb_data": b"\xff\xd8"},
    ]
    out = decode_server_message(pack(messages, [a.tobytes(), b.tobytes(), c.tobytes()]))
    assert np.array_equal(out[0]["props"]["points"], a) and out[0]["props"]["n"] == 3
    assert np.array_equal(out[1]["items"][0], b) and np.array_equal(out[1]["items"][1], c)
    assert out[1]["rgb_data"] == b"\xff\xd8"


def test_truncated_messages_are_refused():
    data = pack([{"type": "X"}], [b"12345678"])
    with pytest.raises(ValueError, match="16-byte header"):
        decode_server_message(data[:10])
    with pytest.raises(ValueError, match="compressed bytes"):
        decode_server_message(data[:20])
    with pytest.raises(ValueError, match="shorter than its binary buffers"):
        decode_server_message(data[:-3])


@pytest.mark.parametrize("eye", [(0, -5, 0), (3, 2, 1), (0.1, 0.0, 6.0), (0, 0, -4)])
def test_look_from_points_the_camera_at_the_target(eye):
    target = np.array([0.5, -0.2, 0.3])
    view = view_from_pose(look_from(eye, tuple(target)), eye, 1.0, 41, 31)
    cam = view.viewmat.double().numpy() @ np.append(target, 1.0)
    pix = view.K.double().numpy() @ cam[:3]
    assert cam[2] > 0 and np.allclose(pix[:2] / pix[2], [20.5, 15.5], atol=1e-4)
    if abs(eye[2]) < 4:  # not looking straight down: world +z points up in the image
        up = view.viewmat.double().numpy()[:3, :3] @ np.array([0.0, 0.0, 1.0])
        assert up[1] < 0
