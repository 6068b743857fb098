"""The fused SSIM kernels against the PyTorch SSIM run in float64.

Error measure: relative L2 error over the SSIM map's mean (or per-image means)
and over the whole gradient of the first image, with a random weight per map
pixel so that every pixel's gradient path is exercised.
"""

from __future__ import annotations

import doctest

import pytest
import torch

from gsnb import kernels
from gsnb.data.dataset import bytes_to_float
from gsnb.train import fused_ssim
from gsnb.train.losses import SSIM_C1, SSIM_C2, photometric_loss, photometric_terms, ssim

VALUE_TOL = 1e-5
GRAD_TOL = 1e-4


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / max(float(b.norm()), 1e-12))


def images(shape, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.rand(shape, generator=gen, device="cuda")
    # A target correlated with x, as a render and its photo are.
    y = (0.7 * x + 0.3 * torch.rand(shape, generator=gen, device="cuda")).clamp(0, 1)
    return x, y


@pytest.mark.parametrize(
    "shape",
    [(1, 64, 48, 3), (2, 17, 13, 3), (1, 11, 11, 3), (1, 7, 5, 3), (1, 1, 1, 3), (1, 540, 960, 3)],
)
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_matches_float64_pytorch(cuda_ext, shape, padding):
    x, y = images(shape)
    assert fused_ssim.available(x, y, 11)
    xf = x.clone().requires_grad_(True)
    value = ssim(xf, y, padding=padding, reduce=False)
    weights = torch.rand(value.shape, device="cuda")
    (value * weights).sum().backward()
    xd = x.double().requires_grad_(True)
    ref = ssim(xd, y.double(), padding=padding, reduce=False)  # float64: the PyTorch path
    (ref * weights.double()).sum().backward()
    assert rel_err(value, ref) < VALUE_TOL
    assert rel_err(xf.grad, xd.grad) < GRAD_TOL


def test_map_shape_and_identity(cuda_ext):
    x, _ = images((1, 40, 30, 3))
    out = fused_ssim.ssim_map(x, x, pad=0, sigma=1.5, c1=SSIM_C1, c2=SSIM_C2)
    assert out.shape == (1, 30, 20, 3)
    torch.testing.assert_close(out, torch.ones_like(out), atol=1e-5, rtol=0)


def test_loss_gradient_matches(cuda_ext):
    x, y = images((96, 128, 3), seed=3)  # [H, W, 3] as the trainer passes it
    xf = x.clone().requires_grad_(True)
    loss, _, _ = photometric_loss(xf, y, 0.2)
    loss.backward()
    xd = x.double().requires_grad_(True)
    ref, _, _ = photometric_loss(xd, y.double(), 0.2)
    ref.backward()
    assert rel_err(loss, ref) < VALUE_TOL
    assert rel_err(xf.grad, xd.grad) < GRAD_TOL


@pytest.mark.parametrize(
    ("shape", "lam"),
    [((96, 128, 3), 0.2), ((2, 37, 53, 3), 0.5), ((1, 9, 7, 3), 0.2), ((540, 960, 3), 0.0)],
)
def test_fused_photometric_terms_match_float64(cuda_ext, shape, lam):
    # All four outputs, each with its own random weight, so every gradient path counts.
    x, y = images(shape, seed=len(shape) + shape[-2])
    weights = torch.tensor([1.0, 0.3, -0.7, 2.0], dtype=torch.float64)
    xf = x.clone().requires_grad_(True)
    got = photometric_terms(xf, y, lam)
    sum(w * t for w, t in zip(weights.tolist(), got, strict=True)).backward()
    xd = x.double().requires_grad_(True)
    want = photometric_terms(xd, y.double(), lam)
    sum(w * t for w, t in zip(weights.tolist(), want, strict=True)).backward()
    for name, a, b in zip(("loss", "l1", "ssim", "mse"), got, want, strict=True):
        assert a.dtype == torch.float32 and rel_err(a, b) < VALUE_TOL, (name, a.item(), b.item())
    assert rel_err(xf.grad, xd.grad) < GRAD_TOL


def test_fused_photometric_loss_alone_and_without_gradient(cuda_ext):
    x, y = images((1, 64, 80, 3), seed=9)
    assert fused_ssim.available(x, y, 11, "photometric_forward")
    with torch.no_grad():
        loss, l1, s, mse = photometric_terms(x, y, 0.2)
    ref = photometric_terms(x.double(), y.double(), 0.2)
    assert rel_err(torch.stack([loss, l1, s, mse]), torch.stack(ref)) < VALUE_TOL
    xf = x.clone().requires_grad_(True)
    photometric_terms(xf, y, 0.2)[0].backward()  # only the loss: the others get no gradient
    xd = x.double().requires_grad_(True)
    photometric_terms(xd, y.double(), 0.2)[0].backward()
    assert rel_err(xf.grad, xd.grad) < GRAD_TOL


def test_target_with_gradient_takes_pytorch_path(cuda_ext):
    x, y = images((1, 32, 32, 3))
    y.requires_grad_(True)
    assert not fused_ssim.available(x, y, 11)
    ssim(x, y).backward()
    assert y.grad is not None and torch.isfinite(y.grad).all()


def test_docstring_examples(cuda_ext):
    result = doctest.testmod(fused_ssim)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("shape", [(2, 37, 53, 3), (1, 540, 960, 3)])
def test_photometric_reads_a_photos_bytes_as_bytes_to_float(cuda_ext, shape):
    # The kernels read an 8-bit target as v / 255 themselves: the same loss, terms and
    # gradient, bit for bit, as from the float32 image bytes_to_float makes on the GPU.
    x, _ = images(shape, seed=5)
    gen = torch.Generator(device="cuda").manual_seed(6)
    photo = torch.randint(0, 256, shape, generator=gen, device="cuda", dtype=torch.uint8)
    photo[0, :2] = torch.tensor([0, 255], dtype=torch.uint8, device="cuda")[:, None, None]
    common = {"pad": 0, "sigma": 1.5, "c1": SSIM_C1, "c2": SSIM_C2, "lam": 0.2}
    outs = {}
    for name, target in (("bytes", photo), ("floats", bytes_to_float(photo))):
        stats, d_mu, d_xx, d_xy = kernels.photometric_forward(
            img1=x, img2=target, with_grad=True, **common
        )
        one = torch.ones((), device="cuda")
        v_x = kernels.photometric_backward(
            img1=x, img2=target, d_mu=d_mu, d_xx=d_xx, d_xy=d_xy, pad=0, sigma=1.5, lam=0.2,
            g_loss=one, g_l1=0.5 * one, g_ssim=None, g_mse=2 * one,
        )  # fmt: skip
        outs[name] = [stats, d_mu, d_xx, d_xy, v_x]
    for a, b in zip(outs["bytes"], outs["floats"], strict=True):
        assert torch.equal(a, b)


def test_only_the_photometric_pair_takes_bytes(cuda_ext):
    x, _ = images((1, 16, 16, 3))
    photo = torch.zeros((1, 16, 16, 3), dtype=torch.uint8, device="cuda")
    with pytest.raises(RuntimeError, match="img2 must be a contiguous float32"):
        kernels.ssim_forward(img1=x, img2=photo, pad=0, sigma=1.5, c1=SSIM_C1, c2=SSIM_C2,
                             with_grad=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="img2 must be float32 or uint8, got float64"):
        kernels.photometric_forward(img1=x, img2=x.double(), pad=0, sigma=1.5, c1=SSIM_C1,
                                    c2=SSIM_C2, lam=0.2, with_grad=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="img1 must be a contiguous float32"):
        kernels.photometric_forward(img1=photo, img2=x, pad=0, sigma=1.5, c1=SSIM_C1,
                                    c2=SSIM_C2, lam=0.2, with_grad=False)  # fmt: skip
