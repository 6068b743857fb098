"""Several views per step: one render call for the batch, the loss averaged over it.

A step of batch ``B`` draws ``B`` views from the run's view order, renders those of
this process (all of them in one process; ``B / world`` each over several, see
:mod:`gsnb.train.distributed`) in one call with cameras ``viewmats [C, 4, 4]`` and
``Ks [C, 3, 3]``, and takes the mean of the per-view losses. The rasterizer takes one
image size per call, so views of different sizes (a COLMAP model with several
cameras) are rendered in one call per size, each group's loss weighted by its share
of the views. Learning rates and Adam's settings follow gsplat's ``simple_trainer``
(:func:`scaled_rates`, :func:`adam_settings`).

The densification statistic stays per view: each render's ``means2d`` gradient holds
``1 / C`` of a view's gradient, and the strategy multiplies it back by ``n_cameras``
(``info["n_cameras"] = C``), so the mean gradient over views does not depend on ``B``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch import Tensor

from gsnb.raster import RenderResult
from gsnb.train.inputs import PREFETCH, ViewImages, ViewOrder
from gsnb.train.losses import photometric_terms
from gsnb.train.optim import ADAM_EPS
from gsnb.train.rendering import screen_absgrad

ADAM_BETAS = (0.9, 0.999)
"""Adam's betas at batch 1 (torch's defaults, as the 3DGS code uses)."""


class ProcessGroup(Protocol):
    """What a step needs from the processes of a data-parallel run (one process: none)."""

    rank: int
    world_size: int

    def average(self, params: list[Tensor], terms: Tensor) -> Tensor:
        """Average every parameter's gradient and ``terms`` over the processes."""
        ...

    def sum_(self, *tensors: Tensor) -> None:
        """Sum ``tensors`` over the processes, in place."""
        ...

    def max_(self, *tensors: Tensor) -> None:
        """Take the elementwise maximum of ``tensors`` over the processes, in place."""
        ...


def scaled_rates(
    rates: Mapping[str, float], batch_size: int, rule: str = "sqrt"
) -> dict[str, float]:
    """The learning rates of a step of ``batch_size`` views: each times ``sqrt(batch_size)``
    (``rule="sqrt"``) or ``batch_size`` (``rule="linear"``).

    The square-root rule for Adam (Malladi et al. 2022) is gsplat's ``simple_trainer``'s;
    the linear one keeps the distance Adam moves over the same number of views (a run of
    batch ``B`` takes ``B`` times fewer steps). Batch 1 returns the rates as they are.

    Example:
        >>> scaled_rates({"means": 1e-4}, 4), scaled_rates({"means": 1e-4}, 4, "linear")
        ({'means': 0.0002}, {'means': 0.0004})
    """
    if rule not in ("sqrt", "linear"):
        raise ValueError(f"batch_lr_scaling must be 'sqrt' or 'linear', got {rule!r}")
    if batch_size == 1:
        return dict(rates)
    factor = math.sqrt(batch_size) if rule == "sqrt" else float(batch_size)
    return {name: rate * factor for name, rate in rates.items()}


def adam_settings(batch_size: int) -> dict[str, Any]:
    """Adam's ``betas`` and ``eps`` for batches of ``batch_size`` views, as gsplat scales them.

    ``beta -> 1 - batch_size * (1 - beta)``: one step of batch ``B`` forgets as much as
    ``B`` steps of batch 1 would, to first order; beta1 stops at 0 (no momentum) from
    batch 10 on, where gsplat's formula turns negative. ``eps -> eps / sqrt(B)``.

    Example:
        >>> adam_settings(2)
        {'betas': (0.8, 0.998), 'eps': 7.071067811865475e-16}
    """
    betas = tuple(round(max(0.0, 1.0 - batch_size * (1.0 - b)), 12) for b in ADAM_BETAS)
    return {"betas": betas, "eps": ADAM_EPS / math.sqrt(batch_size)}


def apply_adam_settings(optimizer: torch.optim.Optimizer, batch_size: int) -> None:
    """Write :func:`adam_settings` into every parameter group (batch 1: nothing changes)."""
    if batch_size == 1:
        return
    settings = adam_settings(batch_size)
    for group in optimizer.param_groups:
        group.update(settings)


def check_batch(batch_size: int, world_size: int) -> int:
    """The views each of ``world_size`` processes renders per step; a clear error if uneven.

    Example:
        >>> check_batch(4, 2)
        2
    """
    if batch_size % world_size:
        raise ValueError(
            f"batch_size {batch_size} does not split evenly over {world_size} processes; "
            f"use a multiple of {world_size}"
        )
    return batch_size // world_size


def draw_views(order: ViewOrder, batch_size: int, rank: int = 0, world_size: int = 1) -> tuple:
    """The next ``batch_size`` views of ``order`` (every process draws all of them, so the
    orders stay equal), the ones of process ``rank`` and the ones it renders next after.

    Returns ``(mine, upcoming)``: the indices this process renders now, and those it
    renders in the next :data:`PREFETCH` steps (to copy their images ahead).

    Example:
        >>> order = ViewOrder(6, seed=0)
        >>> everyone = order.peek(4)
        >>> mine, _ = draw_views(order, 4, rank=1, world_size=2)
        >>> mine == everyone[2:]
        True
    """
    local = check_batch(batch_size, world_size)
    drawn = [order.next() for _ in range(batch_size)]
    mine = drawn[rank * local : (rank + 1) * local]
    ahead = order.peek(PREFETCH * batch_size)
    upcoming = [v for i, v in enumerate(ahead) if (i % batch_size) // local == rank]
    return mine, upcoming


def render_batch(
    render: Callable[[Tensor, Tensor, int, int], RenderResult],
    images: ViewImages,
    ids: list[int],
    upcoming: list[int],
    ssim_lambda: float,
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], dict[str, Any]]:
    """Render views ``ids`` (one call per image size) and their mean loss terms.

    Args:
        render: ``render(viewmats [C, 4, 4], Ks [C, 3, 3], width, height)``.
        images: the training views' images and cameras.
        ids: the views to render.
        upcoming: views to copy ahead (host-resident images).
        ssim_lambda: the SSIM weight of the loss.

    Returns:
        ``((loss, l1, ssim, mse), info)``: scalars averaged over the views, and the
        strategy's ``info`` (``means2d``, ``radii [C, N, 2]``, ``width``, ``height``,
        ``n_cameras``, ``absgrad``); views of several sizes give ``info["groups"]``, one
        such dict per size.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> from gsnb.model import GaussianModel
        >>> from gsnb.train.rendering import BackendRenderer, render_model
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=3, size=16))
        >>> images = ViewImages(data.train, torch.device("cpu"))
        >>> model = GaussianModel.from_points(data.points, data.points_rgb)
        >>> def render(viewmats, Ks, w, h):
        ...     return render_model(model, BackendRenderer("reference"), viewmats, Ks, w, h)
        >>> terms, info = render_batch(render, images, [0, 1], [], 0.2)
        >>> info["n_cameras"], tuple(info["radii"].shape[:1])
        (2, (2,))
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i in ids:
        view = images.views[i]
        groups.setdefault((view.width, view.height), []).append(i)
    total: list[Tensor] | None = None
    infos = []
    for (width, height), members in groups.items():
        targets = []
        for j, i in enumerate(members):
            ahead = members[j + 1 :] + [k for k in ids if k not in members] + upcoming
            targets.append(images.image(i, ahead))
        viewmats = torch.cat([images.cameras[i][0] for i in members])
        Ks = torch.cat([images.cameras[i][1] for i in members])
        out = render(viewmats, Ks, width, height)
        means2d = out.meta.means2d
        if means2d.requires_grad:
            means2d.retain_grad()
        terms = photometric_terms(out.rgb, torch.stack(targets), ssim_lambda)
        share = len(members) / len(ids)
        weighted = [t * share for t in terms] if len(groups) > 1 else list(terms)
        total = weighted if total is None else [a + b for a, b in zip(total, weighted, strict=True)]
        infos.append(
            {
                "means2d": means2d,
                "radii": out.meta.radii,
                "width": width,
                "height": height,
                "n_cameras": len(ids),  # each view's loss carries 1 / len(ids)
                "absgrad": screen_absgrad(out),
            }
        )
    assert total is not None
    info = infos[0] if len(infos) == 1 else {"groups": infos}
    return (total[0], total[1], total[2], total[3]), info
