"""How a training run renders its model: gsnb's own renderer, or any with its signature.

A renderer is a callable with :func:`gsnb.render`'s signature returning an object
with ``rgb``, ``alpha``, ``depth`` and ``meta`` (``means2d``, ``radii [C, N, 2]``,
``absgrad``). :class:`BackendRenderer` is gsnb's own, which :func:`render_model`
hands the stored parameters so that the CUDA kernels apply the activations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from gsnb.model import GaussianModel
from gsnb.raster import RenderResult, render, render_splats
from gsnb.train.filter3d import apply_filter3d

Renderer = Callable[..., RenderResult]


class BackendRenderer:
    """:func:`gsnb.render` on one backend, without value checks or depth (what training needs).

    Calling it calls :func:`gsnb.render`; :meth:`render_splats` renders the
    parameters as stored (log-scales, opacity logits, ``sh0``/``shN``).

    Args:
        backend: ``"auto"``, ``"cuda"`` or ``"reference"``.

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(20, 3) + 2.0, torch.rand(20, 3))
        >>> out = render_model(model, BackendRenderer("reference"), torch.eye(4)[None],
        ...                    torch.tensor([[[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]]), 16, 16)
        >>> tuple(out.rgb.shape)
        (1, 16, 16, 3)
    """

    def __init__(self, backend: str = "auto") -> None:
        self.options: dict[str, Any] = {
            "backend": backend,
            "check_values": False,
            "with_depth": False,
        }

    def __call__(self, *args: Any, **kwargs: Any) -> RenderResult:
        return render(*args, **(self.options | kwargs))

    def render_splats(self, splats: Any, *args: Any, **kwargs: Any) -> RenderResult:
        """:func:`gsnb.render_splats` with these options."""
        return render_splats(splats, *args, **(self.options | kwargs))

    def __repr__(self) -> str:
        return f"BackendRenderer({self.options['backend']!r})"


def render_model(
    model: GaussianModel,
    renderer: Renderer,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    sh_degree: int | None = None,
    background: Tensor | None = None,
    absgrad: bool = False,
    rasterize_mode: str = "classic",
    filter3d: Tensor | None = None,
) -> RenderResult:
    """Render ``model`` from cameras ``viewmats [C, 4, 4]``, ``Ks [C, 3, 3]`` with ``renderer``.

    A :class:`BackendRenderer` gets the stored parameters; any other renderer the
    activated ones (linear scales, opacities in [0, 1], SH colours).
    ``background [3]`` is composited under the splats. ``rasterize_mode``: as for
    :func:`gsnb.render` (passed to a renderer only when not ``"classic"``, so that any
    renderer works in the classic mode). ``filter3d``: ``[N]`` variances of the 3D
    filter (:mod:`gsnb.train.filter3d`) applied to the activated scales and opacities.
    See :class:`BackendRenderer` for an example.
    """
    mode = {} if rasterize_mode == "classic" else {"rasterize_mode": rasterize_mode}
    if isinstance(renderer, BackendRenderer) and filter3d is None:
        return renderer.render_splats(
            model.splats, viewmats, Ks, width, height, sh_degree=sh_degree,
            backgrounds=background, absgrad=absgrad, **mode,
        )  # fmt: skip
    a = model.activated()
    scales, opacities = a["scales"], a["opacities"]
    if filter3d is not None:
        scales, opacities = apply_filter3d(scales, opacities, filter3d)
    return renderer(
        a["means"], a["quats"], scales, opacities, a["colors"], viewmats, Ks,
        width, height, sh_degree=sh_degree, backgrounds=background, absgrad=absgrad, **mode,
    )  # fmt: skip


def screen_absgrad(out: RenderResult) -> Tensor | None:
    """The render's ``[C, N, 2]`` absolute screen-space gradients, if it kept them.

    gsnb keeps them in ``meta.absgrad``; gsplat hangs them on ``meta.means2d``.

    Example:
        >>> from types import SimpleNamespace
        >>> screen_absgrad(SimpleNamespace(meta=SimpleNamespace(absgrad=None, means2d=None)))
    """
    meta = out.meta
    found = getattr(meta, "absgrad", None)
    return found if found is not None else getattr(meta.means2d, "absgrad", None)
