"""What a training run reads from its dataset.

The first Gaussians (:func:`initial_model`), the views' images and cameras on
the training device (:class:`ViewImages`), the shuffled order in which the
training views come (:class:`ViewOrder`) and each step's background
(:func:`step_background`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from gsnb.data.dataset import bytes_to_float
from gsnb.model import GaussianModel

# Views a step copies ahead from host memory (the next ones of the order).
PREFETCH = 2

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
    rotation: str = "identity",
    generator: torch.Generator | None = None,
) -> GaussianModel:
    """Gaussians on the dataset's ``points [P, 3]`` with ``colors [P, 3]`` in [0, 1].

    With ``0 < max_points < P``, a random subset of ``max_points`` points drawn
    from ``generator`` (kept in their original order). ``rotation="random"`` then
    draws each quaternion's components uniformly from [0, 1) from ``generator``
    (see ``TrainConfig.init_rotation``); ``"identity"`` draws nothing.

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
    if rotation not in ("identity", "random"):
        raise ValueError(f"rotation must be 'identity' or 'random', got {rotation!r}")
    model = GaussianModel.from_points(
        points, colors, sh_degree=sh_degree, init_opacity=init_opacity, init_scale=init_scale
    )
    if rotation == "random":
        quats = torch.rand(model.num_gaussians, 4, generator=generator)
        model.splats["quats"].data.copy_(quats)
    return model


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
    return bytes_to_float(load_view_bytes(view).to(device))


def load_view_bytes(view: View) -> Tensor:
    """``view``'s 8-bit image ``[height, width, 3]`` uint8 on the CPU; its shape is checked.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=2, size=16))
        >>> load_view_bytes(data.views[0]).dtype
        torch.uint8
    """
    image = view.load_bytes()
    if tuple(image.shape) != (view.height, view.width, 3):
        raise ValueError(
            f"image of view {view.name} has shape {list(image.shape)}; the view says "
            f"[{view.height}, {view.width}, 3]"
        )
    return image


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
    """The images and cameras of ``views``: 8-bit images on the GPU or in host memory.

    With ``images_on = "gpu"`` the images sit on ``device``; with ``"cpu"`` they
    sit in host memory (pinned when ``device`` is a GPU) and :meth:`image` copies
    the views named ``upcoming`` ahead on a side CUDA stream, so that a step finds
    its image already on the GPU. Either way a step gets the same values: the
    bytes themselves (:meth:`image_bytes`, which the fused step reads) or their
    float32 values divided by 255 on ``device`` (:meth:`image`). Decoding (and undistorting,
    downscaling) runs on a thread pool.

    Attributes:
        views: the views, in order.
        images_on: ``"gpu"`` or ``"cpu"``.
        stored: ``[height, width, 3]`` uint8 image of each view, where ``images_on`` says.
        images: the float32 images, computed on access (a read-only sequence).
        cameras: ``(viewmat [1, 4, 4], K [1, 3, 3])`` of each view.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=3, size=16))
        >>> train = ViewImages(data.train, torch.device("cpu"))
        >>> len(train), train.max_size, train.nbytes  # view 0 is held out
        (2, (16, 16), 4608)
        >>> tuple(train.image(1, upcoming=[0]).shape)
        (16, 16, 3)
        >>> photo = train.image_bytes(1)  # the bytes image() divides by 255
        >>> photo.dtype, bool(train.image(1).eq(photo / 255).all())
        (torch.uint8, True)
    """

    def __init__(
        self,
        views: Sequence[View],
        device: torch.device,
        progress: bool = False,
        images_on: str = "gpu",
        workers: int | None = None,
    ) -> None:
        if images_on not in ("gpu", "cpu"):
            raise ValueError(f"images_on must be 'gpu' or 'cpu' here, got {images_on!r}")
        self.views = list(views)
        self.device = torch.device(device)
        self.images_on = images_on
        on_cuda = self.device.type == "cuda"
        pin = images_on == "cpu" and on_cuda and torch.cuda.is_available()
        decoded = _decoded(self.views, progress, workers)
        if images_on == "gpu":
            self.stored = [image.to(self.device) for image in decoded]
        elif pin:
            self.stored = _pinned_arena(self.views, decoded)
        else:
            self.stored = list(decoded)
        self.cameras = [view_camera(v, self.device) for v in self.views]
        self._staging = _Staging(self.device, self.stored) if pin else None

    def __len__(self) -> int:
        return len(self.views)

    def image(self, idx: int, upcoming: Sequence[int] = ()) -> Tensor:
        """View ``idx``'s image ``[height, width, 3]`` float32 in [0, 1] on ``device``.

        With host-resident images, the views of ``upcoming`` (the next ones of the
        order) start copying to the device now; a view not copied ahead is copied
        at once.
        """
        return bytes_to_float(self.image_bytes(idx, upcoming))

    def image_bytes(self, idx: int, upcoming: Sequence[int] = ()) -> Tensor:
        """View ``idx``'s 8-bit image ``[height, width, 3]`` uint8 on ``device``: what
        :meth:`image` converts, for kernels that read the bytes themselves. It may be the
        stored image itself: read it, never write to it.

        ``upcoming`` as for :meth:`image`. A host-resident image comes in a staging buffer
        that is not reused before the work queued on the current stream until the next call
        of :meth:`image` or :meth:`image_bytes` has read it: read it on that stream, before
        that call. (Example: the class's.)
        """
        if self.images_on == "gpu":
            return self.stored[idx]
        if self._staging is None:
            return self.stored[idx].to(self.device)
        return self._staging.image_bytes(idx, upcoming)

    @property
    def images(self) -> Sequence[Tensor]:
        """The float32 images ``[height, width, 3]`` on ``device``, each computed when read."""
        return _FloatImages(self, range(len(self.views)))

    @property
    def max_size(self) -> tuple[int, int]:
        """``(width, height)``: the largest width and the largest height of the views."""
        return max(v.width for v in self.views), max(v.height for v in self.views)

    @property
    def nbytes(self) -> int:
        """Bytes the images take on the device: all of them, or the few copied ahead.

        The float32 copy of one step's image (4 bytes a value) is included.
        """
        largest = max(image.numel() for image in self.stored)
        if self.images_on == "gpu":
            return sum(image.numel() for image in self.stored) + 4 * largest
        return (PREFETCH + 1) * largest + 4 * largest

    @property
    def host_nbytes(self) -> int:
        """Bytes the images take in host memory (0 when they live on the GPU)."""
        return 0 if self.images_on == "gpu" else sum(image.numel() for image in self.stored)


def _pinned_arena(views: list[View], decoded: Iterable[Tensor]) -> list[Tensor]:
    """The images in one pinned host buffer (one page-locking call, no power-of-two rounding
    as one pinned block per image would have), as views into it."""
    sizes = [v.height * v.width * 3 for v in views]
    arena = torch.empty(sum(sizes), dtype=torch.uint8, pin_memory=True)
    stored, start = [], 0
    for image, size in zip(decoded, sizes, strict=True):
        if image.numel() != size:
            raise ValueError(f"an image holds {image.numel()} values, its view {size}")
        slot = arena[start : start + size].view(image.shape)
        slot.copy_(image)
        stored.append(slot)
        start += size
    return stored


class _Staging:
    """A few device buffers that host images are copied into ahead of their step.

    Each buffer has an event for "copied" (side stream) and one for "read" (the training
    stream): a copy waits until the step that read the buffer before is done with it, and a
    step waits for its copy. A buffer handed out is read by the work its step queues after
    it, so its "read" is recorded on the next call, behind that work. Nothing is allocated
    per step.
    """

    def __init__(self, device: torch.device, stored: list[Tensor]) -> None:
        largest = max(image.numel() for image in stored)
        self.device, self.stored = device, stored
        self.stream = torch.cuda.Stream(device)
        self.buffers = [
            torch.empty(largest, dtype=torch.uint8, device=device) for _ in range(PREFETCH + 1)
        ]
        self.copied = [torch.cuda.Event() for _ in self.buffers]
        self.read = [torch.cuda.Event() for _ in self.buffers]
        self.slot_of: dict[int, int] = {}  # view -> buffer holding (or receiving) it
        self.handed: int | None = None  # the buffer handed out last, its "read" not recorded

    def image_bytes(self, idx: int, upcoming: Sequence[int]) -> Tensor:
        main = torch.cuda.current_stream(self.device)
        if self.handed is not None:  # the work that read it is queued by now
            self.read[self.handed].record(main)
            self.handed = None
        slot = self.slot_of.pop(idx, None)
        if slot is None:  # not copied ahead: copy now, on the training stream
            slot = self._free_slot(set())
            self._fill(slot, idx, main)
        main.wait_event(self.copied[slot])
        shape = self.stored[idx].shape
        out = self.buffers[slot][: self.stored[idx].numel()].view(shape)
        self.handed = slot
        wanted = [j for j in dict.fromkeys(upcoming) if j != idx][: len(self.buffers) - 1]
        for j in [j for j in self.slot_of if j not in wanted]:
            del self.slot_of[j]
        for j in wanted:
            if j not in self.slot_of:
                free = self._free_slot({slot})
                self._fill(free, j, self.stream)
                self.slot_of[j] = free
        return out

    def _free_slot(self, busy: set[int]) -> int:
        taken = set(self.slot_of.values()) | busy
        return next(s for s in range(len(self.buffers)) if s not in taken)

    def _fill(self, slot: int, idx: int, stream: Any) -> None:
        host = self.stored[idx].reshape(-1)
        with torch.cuda.stream(stream):
            stream.wait_event(self.read[slot])  # the last step that read it is done
            stream.wait_event(self.copied[slot])  # and a copy still going into it
            self.buffers[slot][: host.numel()].copy_(host, non_blocking=True)
            self.copied[slot].record(stream)


class _FloatImages(Sequence[Tensor]):
    """A read-only sequence of :meth:`ViewImages.image` over some of the views."""

    def __init__(self, source: ViewImages, ids: range) -> None:
        self.source, self.ids = source, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _FloatImages(self.source, self.ids[key])
        return self.source.image(self.ids[key])


def _decoded(views: list[View], progress: bool, workers: int | None) -> Iterator[Tensor]:
    """The 8-bit images of ``views`` in order, decoded on a thread pool (OpenCV and PIL
    release the GIL), with a progress bar when asked."""
    count = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="gsnb-images") as pool:
        results: Iterable[Tensor] = pool.map(load_view_bytes, views)
        if progress:
            from tqdm.auto import tqdm

            results = tqdm(results, total=len(views), desc="loading images", unit="image")
        yield from results


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
        self.order = torch.empty(0, dtype=torch.long)  # replaced, never changed in place
        self.pos = 0
        # The order as a list, and the generator's state since its last draw (None: not
        # read yet): a step reads both, and tensor indexing and get_state() (5 KB) cost
        # more host time than the step's use of them. The generator is this class's after
        # construction (the initial points' subset draws from it before the first step).
        self._ids: list[int] = []
        self._rng: Tensor | None = None

    def peek(self, count: int) -> list[int]:
        """The indices of the next ``count`` views, without moving on (nor drawing).

        Example:
            >>> order = ViewOrder(3, seed=0)
            >>> ahead = order.peek(5)
            >>> ahead == [order.next() for _ in range(5)]
            True
        """
        ahead = self._ids[self.pos : self.pos + count]
        if len(ahead) < count:
            # Later epochs' orders, from a copy of the generator: the real one is not moved.
            copy = torch.Generator().manual_seed(0)
            copy.set_state(self._rng_state())
            while len(ahead) < count:
                ahead += torch.randperm(self.count, generator=copy)[: count - len(ahead)].tolist()
        return ahead

    def next(self) -> int:
        """Index of the next view."""
        if self.pos >= len(self._ids):
            self.order = torch.randperm(self.count, generator=self.generator)
            self._ids = self.order.tolist()
            self._rng = None
            self.pos = 0
        idx = self._ids[self.pos]
        self.pos += 1
        return idx

    def state(self) -> dict[str, Any]:
        """``{"order": [count] tensor, "pos": int, "rng": generator state}``; the tensors
        are not changed afterwards (a new epoch makes a new order)."""
        return {"order": self.order, "pos": self.pos, "rng": self._rng_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state`."""
        self.order = torch.as_tensor(state["order"], dtype=torch.long)
        self._ids = self.order.tolist()
        self.pos = int(state["pos"])
        self.generator.set_state(state["rng"])
        self._rng = None

    def _rng_state(self) -> Tensor:
        if self._rng is None:
            self._rng = self.generator.get_state()
        return self._rng


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
