"""nvJPEG frames: the same picture as the CPU encoder, faster at 1920x1080."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.live.imaging import FrameEncoder, to_uint8_tensor


@pytest.fixture
def frame() -> torch.Tensor:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    pytest.importorskip("torchvision", reason="nvJPEG encoding needs torchvision")
    y, x = torch.meshgrid(torch.linspace(0, 1, 1080), torch.linspace(0, 1, 1920), indexing="ij")
    return torch.stack([x, y, (x * y).sqrt()], -1).cuda()


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.float64)


def test_nvjpeg_encodes_the_same_picture_on_the_gpu(frame):
    gpu, cpu = FrameEncoder(85), FrameEncoder(85, gpu=False)
    on_gpu, on_cpu = gpu.encode(frame), cpu.encode(frame)
    assert gpu.backend == "nvjpeg" and gpu.gpu_error is None and cpu.backend == "pil"
    truth = to_uint8_tensor(frame).cpu().numpy().astype(np.float64)
    assert np.abs(decode(on_gpu) - truth).mean() < 2.0
    assert np.abs(decode(on_gpu) - decode(on_cpu)).mean() < 2.0
    assert len(on_gpu) < 0.2 * truth.size  # only the JPEG crosses to the host


def test_the_viewer_streams_nvjpeg_frames_of_a_cuda_model(frame, cuda_ext):
    pytest.importorskip("viser", reason="the viewer needs viser (gsnb[viewer])")
    from gsnb.model import GaussianModel
    from gsnb.viewer import Viewer
    from gsnb.viewer.cameras import view_from_pose
    from gsnb.viewer.client import ViewerClient, look_from

    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(
        torch.randn(2000, 3, generator=g) * 0.5, torch.rand(2000, 3, generator=g), sh_degree=0
    ).to("cuda")
    eye = (0.5, -4.0, 2.0)
    wxyz = look_from(eye, (0.0, 0.0, 0.0))
    with Viewer(model, mode="render") as viewer, ViewerClient(viewer.url) as client:
        client.send_camera(wxyz, eye, 0.9, 640, 360)
        image = client.next_frame(min_width=640)
        assert viewer.encoder.backend == "nvjpeg", viewer.encoder.gpu_error
        timings = viewer.frame_timings()
        expected = viewer.render(view_from_pose(wxyz, eye, 0.9, 640, 360)).rgb[0]
    truth = to_uint8_tensor(expected).cpu().numpy().astype(np.float64)
    assert image.shape == (360, 640, 3) and np.abs(image - truth).mean() < 3.0
    assert {"render", "convert", "encode", "copy", "send"} <= set(timings)


def test_encoders_on_different_streams_under_load_give_whole_jpegs(frame):
    # torchvision's cached encoder orders its own stream after the stream current when it
    # was made; a second encoder (another side stream) must still read finished bytes.
    first, second = FrameEncoder(80), FrameEncoder(80)
    load = torch.randn(4096, 4096, device="cuda")
    for i in range(40):
        load = load @ load.T / 4096  # keep the default stream busy
        data = (first if i % 2 else second).encode(frame * (0.5 + i / 80))
        assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9", i
        assert decode(data).shape == (1080, 1920, 3), i
