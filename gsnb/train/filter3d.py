"""Mip-Splatting's 3D smoothing filter (Yu et al. 2024, "Mip-Splatting: Alias-free 3D
Gaussian Splatting").

A Gaussian smaller than the finest pixel footprint any training camera has on it cannot be
constrained by the photos, and shows as aliasing when the view zooms in. The filter widens
each Gaussian by a 3D low-pass of the variance ``0.2 / rate^2``, ``rate = focal / depth``
being the highest sampling rate (pixels per unit length) among the training cameras that see
it (in front of the camera and inside its image, with Mip-Splatting's 15% margin); a
Gaussian no camera sees gets no filter. The filtered Gaussian keeps its energy:

    scales' = sqrt(scales^2 + variance),
    opacity' = opacity * sqrt(prod(scales^2) / prod(scales^2 + variance)).

Mip-Splatting's code pairs the largest focal length of all cameras with the smallest depth,
which is the same rate when the cameras share one focal length, and gives a Gaussian no camera
sees the largest filter; here each camera's own rate counts, and an unseen Gaussian keeps its
shape (nothing constrains it either way).

The variances depend on the means only; :class:`Filter3D` recomputes them when the
Gaussians change (densification) and otherwise every ``every`` steps, as Mip-Splatting's
trainer does, and training renders through the filtered Gaussians.

Example:
    >>> import torch
    >>> K = torch.tensor([[[100.0, 0, 50], [0, 100, 50], [0, 0, 1]]])
    >>> means = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, -2.0]])  # in front, behind
    >>> v = filter3d_variances(means, torch.eye(4)[None], K, [100], [100])
    >>> [round(x, 10) for x in v.tolist()]  # rate 100 / 2 px per unit: 0.2 / 50^2
    [8e-05, 0.0]
    >>> scales, opacities = apply_filter3d(torch.full((1, 3), 0.01), torch.tensor([0.5]),
    ...                                    torch.tensor([3e-4]))
    >>> round(scales[0, 0].item(), 4), round(opacities.item(), 4)
    (0.02, 0.0625)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

FILTER_VARIANCE = 0.2
"""Mip-Splatting's 3D filter variance in units of the squared pixel footprint (its
``filter_3D = sqrt(0.2) * depth / focal`` standard deviation)."""

SCREEN_MARGIN = 0.15
"""A centre up to this fraction of the image size outside it still counts as seen
(Mip-Splatting's ``compute_3D_filter``)."""

CHUNK_ELEMENTS = 1 << 22
"""(camera, Gaussian) pairs projected at once by :func:`filter3d_variances` (a few float
tensors of this many entries: 16 MiB each)."""

RECOMPUTE_EVERY = 100
"""Steps between recomputations while the Gaussians keep their number (Mip-Splatting: 100)."""


@torch.no_grad()
def filter3d_variances(
    means: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    widths: Sequence[int] | Tensor,
    heights: Sequence[int] | Tensor,
    near_plane: float = 0.01,
) -> Tensor:
    """The 3D filter's variance ``[N]`` of each Gaussian (0 where no camera sees it).

    Args:
        means: ``[N, 3]`` centres in world space.
        viewmats: ``[C, 4, 4]`` world-to-camera matrices of the training cameras.
        Ks: ``[C, 3, 3]`` their intrinsics (the sampling rate uses ``fx``, as Mip-Splatting).
        widths, heights: the image size of each camera (sequences, or ``[C]`` tensors: kept
            on the device of ``means``, they need no copy from the host).
        near_plane: centres at a depth up to this are not in front of a camera.

    Returns:
        ``[N]`` ``0.2 / max_rate^2`` with ``rate = fx / depth`` over the cameras where the
        centre is in front and inside the image (15% margin); 0 where it is in none.
    """
    means = means.detach()
    best = torch.zeros(means.shape[0], dtype=means.dtype, device=means.device)
    cams = viewmats.shape[0]
    if len(widths) != cams or len(heights) != cams:
        raise ValueError(
            f"one width and height per camera: {cams} cameras, "
            f"{len(widths)} widths, {len(heights)} heights"
        )
    viewmats, Ks = viewmats.to(means), Ks.to(means)
    sizes = torch.stack([torch.as_tensor(widths).to(means), torch.as_tensor(heights).to(means)], -1)
    # Cameras in groups of about CHUNK_ELEMENTS (camera, Gaussian) pairs: a few launches per
    # group rather than per camera, with memory bounded however many views the capture has.
    step = max(1, CHUNK_ELEMENTS // max(means.shape[0], 1))
    for c0 in range(0, cams, step):
        view, K, size = viewmats[c0 : c0 + step], Ks[c0 : c0 + step], sizes[c0 : c0 + step]
        # [N, c] camera-space coordinates, one matrix product each
        x, y, z = (torch.addmm(view[:, i, 3], means, view[:, i, :3].T) for i in range(3))
        zs = z.clamp_min(near_plane)
        rate = K[:, 0, 0] / zs
        u = rate * x + K[:, 0, 2]
        v = (K[:, 1, 1] / zs) * y + K[:, 1, 2]
        width, height = size[:, 0], size[:, 1]
        seen = (z > near_plane) & (u >= -SCREEN_MARGIN * width)
        seen &= (u <= (1 + SCREEN_MARGIN) * width) & (v >= -SCREEN_MARGIN * height)
        seen &= v <= (1 + SCREEN_MARGIN) * height
        best = torch.maximum(best, torch.where(seen, rate, 0.0).amax(dim=1))
    return torch.where(best > 0, FILTER_VARIANCE / best.clamp_min(1e-30) ** 2, 0.0)


def apply_filter3d(scales: Tensor, opacities: Tensor, variances: Tensor) -> tuple[Tensor, Tensor]:
    """Filtered ``scales [N, 3]`` (linear) and ``opacities [N]`` (in [0, 1]), differentiably.

    ``scales' = sqrt(scales^2 + variances)`` and ``opacities' = opacities *
    sqrt(prod(scales^2 / (scales^2 + variances)))``; ``variances [N]`` has no gradient.
    See the module example.
    """
    s2 = scales * scales
    widened = s2 + variances.detach()[:, None]
    # The product of ratios in [0, 1] neither overflows nor underflows early. Spelled out:
    # torch.prod's backward reads from the GPU whether an input is zero (a host sync).
    ratio = s2 / widened
    shrink = ratio[:, 0] * ratio[:, 1] * ratio[:, 2]
    return torch.sqrt(widened), opacities * torch.sqrt(shrink)


class Filter3D:
    """The 3D filter of a model seen by fixed training cameras, kept up to date.

    Args:
        views: the training views (each with ``viewmat [4, 4]``, ``K [3, 3]``, ``width``,
            ``height``).
        every: steps between recomputations while the Gaussians keep their tensors.
        device: where the Gaussians live: the cameras are kept there, since copying them
            from the host at each recomputation would wait for the GPU.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> view = SimpleNamespace(viewmat=torch.eye(4), K=torch.tensor(
        ...     [[100.0, 0, 50], [0, 100, 50], [0, 0, 1]]), width=100, height=100)
        >>> f = Filter3D([view])
        >>> splats = {"means": torch.tensor([[0.0, 0.0, 2.0]])}
        >>> round(f.variances(splats, step=0).item(), 10)
        8e-05
    """

    def __init__(
        self,
        views: Sequence[Any],
        every: int = RECOMPUTE_EVERY,
        device: torch.device | str = "cpu",
    ) -> None:
        if not views:
            raise ValueError("the 3D filter needs at least one training view")
        self.viewmats = torch.stack([torch.as_tensor(v.viewmat).float() for v in views]).to(device)
        self.Ks = torch.stack([torch.as_tensor(v.K).float() for v in views]).to(device)
        self.widths = torch.tensor([int(v.width) for v in views], device=device)
        self.heights = torch.tensor([int(v.height) for v in views], device=device)
        self.every = every
        self._means: Tensor | None = None  # the tensor the variances were computed from
        self._step = 0
        self._value: Tensor | None = None

    def variances(self, splats: Mapping[str, Tensor], step: int) -> Tensor:
        """``[N]`` variances for ``splats["means"]`` at training step ``step``: recomputed when
        the means are another tensor (densification replaces them) or ``every`` steps passed."""
        means = splats["means"]
        stale = (
            self._value is None
            or means is not self._means  # a reference is kept, so an id is never reused
            or self._value.shape[0] != means.shape[0]
            or abs(step - self._step) >= self.every
        )
        if stale:
            self._value = filter3d_variances(
                means, self.viewmats, self.Ks, self.widths, self.heights
            )
            self._means, self._step = means, step
        assert self._value is not None
        return self._value

    def state_dict(self, splats: Mapping[str, Tensor]) -> dict[str, Any]:
        """The variances in use and the step they were computed at, on the CPU, for a
        checkpoint of a run whose Gaussians are ``splats`` (a resume continues exactly)."""
        value = None if self._value is None else self._value.detach().to("cpu", copy=True)
        return {"variances": value, "step": self._step, "current": self._means is splats["means"]}

    def load_state_dict(self, state: Mapping[str, Any], splats: Mapping[str, Tensor]) -> None:
        """Continue from :meth:`state_dict` with the restored Gaussians ``splats``."""
        if state.get("variances") is None:
            return
        means = splats["means"]
        self._value = state["variances"].to(device=means.device, dtype=means.dtype)
        self._step = int(state["step"])
        # Variances of the Gaussians before a densification are recomputed at the next use.
        self._means = means if state["current"] else None
