"""Evaluation on held-out views: PSNR, SSIM, and LPIPS when its weights are on disk."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from gsnb.train.losses import psnr, ssim

if TYPE_CHECKING:
    from gsnb.data.dataset import View

# torchvision's AlexNet checkpoint, which the `lpips` package loads for net="alex".
_ALEXNET_FILE = "alexnet-owt-7be5be79.pth"


@dataclass
class EvalResult:
    """Image quality on a set of views (means over views).

    Attributes:
        step: training steps done when measured.
        psnr: mean PSNR in dB.
        ssim: mean SSIM (11x11 Gaussian window, valid region).
        lpips: mean LPIPS (AlexNet), or None when unavailable.
        lpips_note: why LPIPS is missing, or "".
        num_views: how many views were rendered.
        per_view: ``[(name, psnr, ssim), ...]``.
        seconds: time the evaluation took.
        protocol: which pixels were measured: ``"full images"``, or ``"right halves"``
            (3DGS's exposure protocol, :func:`evaluate_views`).

    Example:
        >>> EvalResult(step=0, psnr=30.0, ssim=0.9).summary()
        'step 0: PSNR 30.00 dB, SSIM 0.9000 over 0 views'
    """

    step: int
    psnr: float
    ssim: float
    lpips: float | None = None
    lpips_note: str = ""
    num_views: int = 0
    per_view: list[tuple[str, float, float]] = field(default_factory=list)
    seconds: float = 0.0
    protocol: str = "full images"

    def summary(self) -> str:
        """One line for logs."""
        text = f"step {self.step}: PSNR {self.psnr:.2f} dB, SSIM {self.ssim:.4f}"
        if self.lpips is not None:
            text += f", LPIPS {self.lpips:.4f}"
        text += f" over {self.num_views} views"
        return text if self.protocol == "full images" else f"{text}, {self.protocol}"


@functools.lru_cache(maxsize=1)
def lpips_status() -> tuple[bool, str]:
    """Whether LPIPS can run offline (the ``lpips`` package and AlexNet weights on disk).

    Nothing is ever downloaded. Returns ``(available, reason when not)``.

    Example:
        >>> ok, why = lpips_status()
        >>> isinstance(ok, bool) and (ok or len(why) > 0)
        True
    """
    try:
        import lpips  # noqa: F401
    except ImportError:
        return False, "LPIPS skipped: the `lpips` package is not installed (pip install lpips)"
    weights = Path(torch.hub.get_dir()) / "checkpoints" / _ALEXNET_FILE
    if not weights.is_file():
        return (
            False,
            f"LPIPS skipped: AlexNet weights are not on disk ({weights}); gsnb never downloads",
        )
    return True, ""


@functools.lru_cache(maxsize=2)
def _lpips_net(device: str) -> Callable[[Tensor, Tensor], Tensor]:
    import lpips

    net = lpips.LPIPS(net="alex", verbose=False).to(device).eval()
    return lambda a, b: net(a, b, normalize=True)


@torch.no_grad()
def image_metrics(
    render: Tensor, target: Tensor, with_lpips: bool
) -> tuple[float, float, float | None]:
    """PSNR, SSIM and (optionally) LPIPS of one ``[H, W, 3]`` render against its target.

    Example:
        >>> import torch
        >>> a = torch.rand(16, 16, 3)
        >>> p, s, l = image_metrics(a, a.clone(), with_lpips=False)
        >>> p > 100, round(s, 4), l
        (True, 1.0, None)
    """
    render = render.clamp(0.0, 1.0)
    values = torch.stack([psnr(render, target), ssim(render[None], target[None])]).tolist()
    lp = None
    if with_lpips:
        nchw = [x.permute(2, 0, 1)[None] for x in (render, target)]
        lp = float(_lpips_net(str(render.device))(*nchw).item())
    return values[0], values[1], lp


def evaluate_views(
    render_view: Callable[[View], Tensor],
    views: Sequence[View],
    targets: Sequence[Tensor],
    step: int,
    right_half: bool = False,
) -> EvalResult:
    """Mean PSNR, SSIM (and LPIPS when it can run offline) of ``render_view(view)`` ``[H, W, 3]``.

    Each render is compared with the view's target ``[H, W, 3]`` in [0, 1];
    ``step`` is recorded in the result. Protocol: by default on whole images. With
    ``right_half``, the evaluation protocol of 3DGS with exposure compensation
    (``--train_test_exp``): the test views trained on their left halves, which gave
    them a learned exposure, and every metric is computed on the right half of render
    and target alike, columns ``[W // 2, W)``.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=2, size=16))
        >>> photos = {view.name: view.load_image() for view in data.views}
        >>> targets = list(photos.values())
        >>> exact = evaluate_views(lambda view: photos[view.name], data.views, targets, step=0)
        >>> exact.num_views, exact.psnr > 100, round(exact.ssim, 4)
        (2, True, 1.0)
    """
    if len(views) != len(targets):
        raise ValueError(f"{len(views)} views but {len(targets)} target images")
    if not views:
        raise ValueError("no views to evaluate")
    start = time.perf_counter()
    with_lpips, note = lpips_status()
    rows = []
    lp_values = []
    for view, target in zip(views, targets, strict=True):
        render = render_view(view)
        if right_half:
            render, target = render[:, render.shape[1] // 2 :], target[:, target.shape[1] // 2 :]
        p, s, lp = image_metrics(render, target, with_lpips)
        rows.append((view.name, p, s))
        if lp is not None:
            lp_values.append(lp)
    return EvalResult(
        step=step,
        psnr=sum(r[1] for r in rows) / len(rows),
        ssim=sum(r[2] for r in rows) / len(rows),
        lpips=sum(lp_values) / len(lp_values) if lp_values else None,
        lpips_note=note,
        num_views=len(rows),
        per_view=rows,
        seconds=time.perf_counter() - start,
        protocol="right halves" if right_half else "full images",
    )
