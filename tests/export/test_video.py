"""Tests for gsnb/export/video.py: encoded MP4s read back, atomic writes, lanczos frames."""

from __future__ import annotations

import os
import stat

import imageio.v2 as imageio
import imageio_ffmpeg
import numpy as np
import pytest
import torch

from gsnb.cameras import scale_intrinsics
from gsnb.export.paths import fit_orbit_to_points, orbit_path
from gsnb.export.upscale import lanczos_resize, to_uint8
from gsnb.export.video import render_frames, render_video, write_video


def _probe(path) -> dict:
    """Frame count, size, codec and pixel format as ffmpeg reports them."""
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        meta = reader.get_meta_data()
        first = reader.get_data(0)
    pix_fmt = meta["pix_fmt"].split("(")[0]
    return {"frames": frames, "size": meta["size"], "codec": meta["codec"], "pix_fmt": pix_fmt,
            "fps": meta["fps"], "first": first}  # fmt: skip


def _orbit(model, frames, size):
    return orbit_path(fit_orbit_to_points(model.splats["means"].detach()), frames, *size)


def test_rendered_video_reads_back_as_h264_yuv420p(tmp_path, small_model):
    viewmats, Ks = _orbit(small_model, 6, (64, 48))
    out = render_video(small_model, tmp_path / "orbit.mp4", viewmats, Ks, (64, 48), (32, 24),
                       fps=12, quality=10, progress=False)  # fmt: skip
    probe = _probe(out)
    assert probe["frames"] == 6
    assert probe["size"] == (64, 48)
    assert probe["codec"] == "h264" and probe["pix_fmt"] == "yuv420p"
    assert probe["fps"] == pytest.approx(12.0)
    assert os.listdir(tmp_path) == ["orbit.mp4"]


def test_frames_are_renders_upscaled_with_lanczos(small_model, tmp_path):
    viewmats, Ks = _orbit(small_model, 2, (64, 48))
    frames = list(render_frames(small_model, viewmats, Ks, (64, 48), (32, 24), (0.1, 0.2, 0.3)))
    small = small_model.render(viewmats[:1], scale_intrinsics(Ks[:1], (64, 48), (32, 24)), 32, 24,
                               backgrounds=torch.tensor([0.1, 0.2, 0.3])).rgb[0]  # fmt: skip
    expected = to_uint8(lanczos_resize(small.detach(), 64, 48))
    assert np.array_equal(frames[0], expected)
    assert frames[0].std() > 5  # the Gaussians are in view, not a blank frame
    # The encoded video holds the same picture (lossy, so compare loosely).
    write_video(tmp_path / "two.mp4", frames, fps=5, quality=10, progress=False)
    decoded = _probe(tmp_path / "two.mp4")["first"].astype(float)
    mse = np.mean((decoded - frames[0].astype(float)) ** 2)
    assert 10 * np.log10(255**2 / mse) > 30


def test_native_size_needs_no_upscale(small_model):
    viewmats, Ks = _orbit(small_model, 1, (32, 24))
    frame = next(render_frames(small_model, viewmats, Ks, (32, 24)))
    direct = small_model.render(viewmats, Ks, 32, 24, backgrounds=torch.zeros(3)).rgb[0]
    assert np.array_equal(frame, to_uint8(direct.detach()))


def test_odd_size_and_bad_settings_are_refused(tmp_path, small_model):
    viewmats, Ks = _orbit(small_model, 2, (63, 48))
    with pytest.raises(ValueError, match="even width and height, got 63x48"):
        render_video(small_model, tmp_path / "odd.mp4", viewmats, Ks, (63, 48), progress=False)
    frames = [np.zeros((8, 8, 3), np.uint8)]
    with pytest.raises(ValueError, match="fps must be positive"):
        write_video(tmp_path / "a.mp4", frames, fps=0)
    with pytest.raises(ValueError, match=r"quality must lie in \[0, 10\]"):
        write_video(tmp_path / "a.mp4", frames, quality=11)
    with pytest.raises(ValueError, match="no frames"):
        write_video(tmp_path / "a.mp4", [], progress=False)
    mixed = [np.zeros((8, 8, 3), np.uint8), np.zeros((8, 10, 3), np.uint8)]
    with pytest.raises(ValueError, match="frame size changed"):
        write_video(tmp_path / "a.mp4", mixed, progress=False)
    assert os.listdir(tmp_path) == []


def test_unwritable_output_gives_clear_error_and_no_partial_file(tmp_path):
    frames = [np.zeros((8, 8, 3), np.uint8)] * 3
    with pytest.raises(OSError, match=r"folder .* does not exist"):
        write_video(tmp_path / "missing" / "out.mp4", frames, progress=False)
    (tmp_path / "taken.mp4").mkdir()
    with pytest.raises(IsADirectoryError, match="it is a folder"):
        write_video(tmp_path / "taken.mp4", frames, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["taken.mp4"]


def test_failure_while_streaming_leaves_the_old_video(tmp_path):
    target = tmp_path / "out.mp4"
    write_video(target, [np.full((8, 8, 3), 200, np.uint8)] * 2, progress=False)
    before = target.read_bytes()

    def failing():
        yield np.zeros((8, 8, 3), np.uint8)
        raise RuntimeError("renderer crashed")

    with pytest.raises(RuntimeError, match="renderer crashed"):
        write_video(target, failing(), progress=False)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["out.mp4"]


def test_video_gets_the_permissions_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        write_video(tmp_path / "shared.mp4", [np.zeros((8, 8, 3), np.uint8)] * 2, progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared.mp4").stat().st_mode) == 0o644


def test_a_name_other_than_mp4_is_refused_before_any_frame(tmp_path):
    def never():
        raise AssertionError("no frame is rendered")
        yield

    with pytest.raises(ValueError, match=r"o.avi: the video is H.264 in an MP4 container"):
        write_video(tmp_path / "o.avi", never(), progress=False)
    assert os.listdir(tmp_path) == []
