"""What a training run reads from its dataset.

The first Gaussians (:func:`initial_model`), the views' images and cameras on
the training device (:class:`ViewImages`), the shuffled order in which the
training views come (:class:`ViewOrder`) and each step's background
(:func:`step_background`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from gsnb.model import GaussianModel

if TYPE_CHECKING:
    from gsnb.data.dataset import View


def initial_model(
    points: Tensor,
    colors: Tensor,
    *,
    sh_degree: int,
    init_opacity: float,
    init_scale: float,
    max_points: int = 0,
    generator: torch.Generator | None = None,
) -> GaussianModel:
    """Gaussians on the dataset's ``points [P, 3]`` with ``colors [P, 3]`` in [0, 1].

    With ``0 < max_points < P``, a random subset of ``max_points`` points drawn
    from ``generator`` (kept in their original order).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> model = initial_model(torch.rand(50, 3), torch.rand(50, 3), sh_degree=1,
        ...                       init_opacity=0.1, init_scale=1.0, max_points=20, generator=g)
        >>> model.num_gaussians, model.sh_degree
        (20, 1)
    """
    points = torch.as_tensor(points, dtype=torch.float32)
    colors = torch.as_tensor(colors, dtype=torch.float32)
    if points.dim() != 2 or points.shape[-1] != 3 or points.shape[0] == 0:
        raise ValueError(
            f"the dataset's initial points have shape {list(points.shape)}; a non-empty "
            "[P, 3] point cloud is needed (or pass model=)"
        )
    if not bool(torch.isfinite(points).all()):
        bad = int((~torch.isfinite(points)).any(-1).sum())
        raise ValueError(
            f"{bad} of {points.shape[0]} initial points hold NaN or Inf; clean the point "
            "cloud or delete it to start from random points"
        )
    if 0 < max_points < points.shape[0]:
        keep = torch.randperm(points.shape[0], generator=generator)[:max_points].sort().values
        points, colors = points[keep], colors[keep]
    return GaussianModel.from_points(
        points, colors, sh_degree=sh_degree, init_opacity=init_opacity, init_scale=init_scale
    )


def load_view_image(view: View, device: torch.device) -> Tensor:
    """``view``'s image ``[height, width, 3]`` float32 on ``device``; its shape is checked.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=2, size=16))
        >>> tuple(load_view_image(data.views[0], torch.device("cpu")).shape)
        (16, 16, 3)
    """
    image = view.load_image()
    if tuple(image.shape) != (view.height, view.width, 3):
        raise ValueError(
            f"image of view {view.name} has shape {list(image.shape)}; the view says "
            f"[{view.height}, {view.width}, 3]"
        )
    return image.to(device, torch.float32)


def view_camera(view: View, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(viewmat [1, 4, 4], K [1, 3, 3])`` of ``view`` on ``device``; both must be finite.

    Example:
        >>> from pathlib import Path
        >>> from gsnb.data.dataset import View
        >>> v = View("a.png", Path("a.png"), 8, 8, torch.eye(3), torch.eye(4))
        >>> [tuple(t.shape) for t in view_camera(v, torch.device("cpu"))]
        [(1, 4, 4), (1, 3, 3)]
    """
    viewmat = torch.as_tensor(view.viewmat, dtype=torch.float32)
    K = torch.as_tensor(view.K, dtype=torch.float32)
    if not (bool(torch.isfinite(viewmat).all()) and bool(torch.isfinite(K).all())):
        raise ValueError(f"view {view.name} has a non-finite pose or intrinsics; fix its camera")
    return viewmat[None].to(device), K[None].to(device)


class ViewImages:
    """The images and cameras of ``views``, loaded once onto ``device``.

    Attributes:
        views: the views, in order.
        images: ``[height, width, 3]`` float32 image of each view.
        cameras: ``(viewmat [1, 4, 4], K [1, 3, 3])`` of each view.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=3, size=16))
        >>> train = ViewImages(data.train, torch.device("cpu"))
        >>> len(train), train.max_size, train.nbytes  # view 0 is held out
        (2, (16, 16), 6144)
    """

    def __init__(self, views: Sequence[View], device: torch.device, progress: bool = False) -> None:
        self.views = list(views)
        shown: Any = self.views
        if progress:
            from tqdm.auto import tqdm

            shown = tqdm(shown, desc="loading images", unit="image", leave=False)
        self.images = [load_view_image(v, device) for v in shown]
        self.cameras = [view_camera(v, device) for v in self.views]

    def __len__(self) -> int:
        return len(self.views)

    @property
    def max_size(self) -> tuple[int, int]:
        """``(width, height)``: the largest width and the largest height of the views."""
        return max(v.width for v in self.views), max(v.height for v in self.views)

    @property
    def nbytes(self) -> int:
        """Bytes the images take on the device."""
        return sum(image.numel() * image.element_size() for image in self.images)


class ViewOrder:
    """The order of the training views: a fresh random permutation every epoch.

    Its generator (seeded with ``seed``, on the CPU) also draws the initial
    points' subset, so one seed fixes both.

    Example:
        >>> order = ViewOrder(3, seed=0)
        >>> sorted(order.next() for _ in range(3))
        [0, 1, 2]
        >>> saved = order.state()
        >>> a = [order.next() for _ in range(4)]
        >>> order.load_state(saved)
        >>> [order.next() for _ in range(4)] == a
        True
    """

    def __init__(self, count: int, seed: int) -> None:
        self.count = count
        self.generator = torch.Generator().manual_seed(seed)
        self.order = torch.empty(0, dtype=torch.long)
        self.pos = 0

    def next(self) -> int:
        """Index of the next view."""
        if self.pos >= len(self.order):
            self.order = torch.randperm(self.count, generator=self.generator)
            self.pos = 0
        idx = int(self.order[self.pos])
        self.pos += 1
        return idx

    def state(self) -> dict[str, Any]:
        """``{"order": [count] tensor, "pos": int, "rng": generator state}`` (copies)."""
        return {"order": self.order.clone(), "pos": self.pos, "rng": self.generator.get_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state`."""
        self.order = torch.as_tensor(state["order"], dtype=torch.long)
        self.pos = int(state["pos"])
        self.generator.set_state(state["rng"])


def step_background(
    background: Tensor, random: bool, generator: torch.Generator | None = None
) -> Tensor:
    """The ``[3]`` background of one step: ``background``, or a random colour from ``generator``.

    Example:
        >>> black = torch.zeros(3)
        >>> step_background(black, random=False) is black
        True
    """
    if not random:
        return background
    return torch.rand(3, generator=generator, device=background.device)
