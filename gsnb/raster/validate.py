"""Argument checks for :func:`gsnb.render`.

Each error names the argument, its shape and the expected one. Shapes, dtypes and
devices are checked on the host before every render. Values (NaN/Inf, ranges) are checked
by :func:`check_values` on the reference backend, and on the CUDA backend by the projection
kernel, which sets the bits of :data:`PROBLEM_BITS` in a device flag that
:class:`DeferredCheck` reads when the host waits anyway.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from gsnb.raster.sh import sh_degree_from_bases


def _describe(t: Tensor) -> str:
    return f"shape {list(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_tensor(name: str, t: object, shape: tuple[int | str, ...], expected: str) -> Tensor:
    """Check type and shape; ``-1`` in ``shape`` matches any size."""
    if not isinstance(t, Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor of shape {expected}, got {type(t).__name__}"
        )
    if t.dim() != len(shape) or any(
        s != -1 and s != d for s, d in zip(shape, t.shape, strict=True)
    ):
        raise ValueError(f"{name} has {_describe(t)}; expected shape {expected}")
    return t


def validate_inputs(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    sh_degree: int | None,
    backgrounds: Tensor | None,
    near_plane: float,
    far_plane: float,
    check_values: bool,
    *,
    rest: Tensor | None = None,
    stored: bool = False,
) -> int | None:
    """Validate :func:`gsnb.render` inputs; returns the SH degree to use (None for RGB).

    With ``stored`` the inputs are stored parameters (:func:`gsnb.render_splats`):
    ``colors`` is ``sh0 [N, 1, 3]``, ``rest`` is ``shN [N, K-1, 3]``, and scales and
    opacities are log-scales and logits (any finite value).
    """
    check_tensor("means", means, (-1, 3), "[N, 3]")
    n = means.shape[0]
    check_tensor("quats", quats, (n, 4), f"[N, 4] with N = {n}")
    check_tensor("scales", scales, (n, 3), f"[N, 3] with N = {n}")
    check_tensor("opacities", opacities, (n,), f"[N] with N = {n}")
    if stored:
        check_tensor("sh0", colors, (n, 1, 3), f"[N, 1, 3] with N = {n}")
        rest = check_tensor("shN", rest, (n, -1, 3), f"[N, K-1, 3] with N = {n}")
    elif rest is not None:
        raise ValueError("rest (shN) is taken with stored parameters only")
    elif not isinstance(colors, Tensor) or colors.dim() not in (2, 3):
        got = _describe(colors) if isinstance(colors, Tensor) else type(colors).__name__
        raise ValueError(f"colors has {got}; expected RGB [N, 3] or SH coefficients [N, K, 3]")
    if colors.shape[0] != n or colors.shape[-1] != 3:
        raise ValueError(
            f"colors has {_describe(colors)}; expected RGB [N, 3] or SH [N, K, 3] with N = {n}"
        )
    check_tensor("viewmats", viewmats, (-1, 4, 4), "[C, 4, 4] (world-to-camera)")
    c = viewmats.shape[0]
    if c == 0:
        raise ValueError("viewmats has shape [0, 4, 4]; at least one camera is needed")
    check_tensor("Ks", Ks, (c, 3, 3), f"[C, 3, 3] with C = {c}")
    if backgrounds is not None and (
        not isinstance(backgrounds, Tensor) or tuple(backgrounds.shape) not in ((3,), (c, 3))
    ):
        got = _describe(backgrounds) if isinstance(backgrounds, Tensor) else type(backgrounds)
        raise ValueError(f"backgrounds has {got}; expected [3] or [C, 3] with C = {c}")
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not hasattr(type(value), "__index__") or int(value) <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (0 <= near_plane < far_plane):
        raise ValueError(f"need 0 <= near_plane < far_plane, got {near_plane} and {far_plane}")

    tensors = value_tensors(
        means, quats, scales, opacities, colors, viewmats, Ks, backgrounds, rest, stored
    )
    for name, t in tensors.items():
        if t.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{name} has {_describe(t)}; expected float32 or float64")
        if t.dtype != means.dtype:
            raise ValueError(f"{name} has {_describe(t)}; expected dtype {means.dtype} like means")
        if t.device != means.device:
            raise ValueError(
                f"{name} has {_describe(t)}; expected device {means.device} like means"
            )

    degree = None
    if colors.dim() == 3:
        k = colors.shape[1] + (rest.shape[1] if stored else 0)
        full = sh_degree_from_bases(k) if k in (1, 4, 9, 16) else None
        if full is None:
            what = f"shN has {_describe(rest)}" if stored else f"colors has {_describe(colors)}"
            raise ValueError(
                f"{what}; K = {k} coefficients is not (degree+1)^2 for a degree 0..3 "
                "(1, 4, 9 or 16)"
            )
        degree = full if sh_degree is None else sh_degree
        if not 0 <= degree <= full:
            raise ValueError(
                f"sh_degree={sh_degree} needs {(degree + 1) ** 2} coefficients, "
                f"{'sh0 and shN hold' if stored else 'colors holds'} {k} (degree {full})"
            )
    elif sh_degree is not None:
        raise ValueError(
            f"sh_degree={sh_degree} given but colors {list(colors.shape)} is RGB [N, 3]"
        )

    if check_values:
        check_values_of(tensors, stored=stored)
    return degree


def value_tensors(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    backgrounds: Tensor | None,
    rest: Tensor | None,
    stored: bool,
) -> dict[str, Tensor]:
    """The value-checked inputs by the names errors give them, in the order they are checked."""
    tensors = {"means": means, "quats": quats, "scales": scales, "opacities": opacities}
    if stored:
        tensors |= {"sh0": colors, "shN": rest}
    else:
        tensors["colors"] = colors
    tensors |= {"viewmats": viewmats, "Ks": Ks}
    if backgrounds is not None:
        tensors["backgrounds"] = backgrounds
    return tensors


def check_values_of(tensors: dict[str, Tensor], stored: bool) -> None:
    """Raise ``ValueError`` for NaN/Inf in ``tensors`` (:func:`value_tensors`), opacities
    outside [0, 1], negative scales (both unless ``stored``) or focal lengths <= 0; one
    host sync when all is well.

    Example:
        >>> t = value_tensors(torch.zeros(1, 3), torch.ones(1, 4), torch.ones(1, 3),
        ...     torch.tensor([2.0]), torch.ones(1, 3), torch.eye(4)[None], torch.eye(3)[None],
        ...     None, None, stored=False)
        >>> try:
        ...     check_values_of(t, stored=False)
        ... except ValueError as err:
        ...     print(str(err).split(")")[0])
        opacities (shape [1], dtype torch.float32, device cpu
    """
    opacities, scales, Ks = tensors["opacities"], tensors["scales"], tensors["Ks"]
    # One device-to-host sync for all checks; details are worked out only on failure.
    # Stored log-scales and logits may take any finite value.
    flags = [torch.isfinite(t).all() for t in tensors.values()]
    if not stored:
        flags += [(opacities >= 0).all() & (opacities <= 1).all(), (scales >= 0).all()]
    flags += [(Ks[:, 0, 0] > 0).all() & (Ks[:, 1, 1] > 0).all()]
    if bool(torch.stack(flags).all()):
        return
    for name, t in tensors.items():
        bad = ~torch.isfinite(t)
        if bad.any():
            rows = bad.reshape(t.shape[0], -1).any(-1).sum().item() if t.dim() else 1
            raise ValueError(
                f"{name} ({_describe(t)}) has non-finite values (NaN or Inf) in {rows} rows"
            )
    if not stored and not bool(((opacities >= 0) & (opacities <= 1)).all()):
        raise ValueError(
            f"opacities ({_describe(opacities)}) must lie in [0, 1] "
            f"(min {opacities.min().item():.3g}, max {opacities.max().item():.3g}); "
            "apply a sigmoid to logits first"
        )
    if not stored and not bool((scales >= 0).all()):
        raise ValueError(
            f"scales ({_describe(scales)}) must be >= 0 (linear scales; exponentiate log-scales "
            f"first); min {scales.min().item():.3g}"
        )
    raise ValueError(f"Ks ({_describe(Ks)}) must have positive focal lengths fx, fy")


# The bits of the CUDA projection's problems flag (csrc/projection_forward.cu's Problem): a
# bit per input whose values hold NaN/Inf, then the range problems. "colors" is sh0 for stored
# inputs.
PROBLEM_BITS = {
    "means": 1 << 0,
    "quats": 1 << 1,
    "scales": 1 << 2,
    "opacities": 1 << 3,
    "colors": 1 << 4,
    "shN": 1 << 5,
    "viewmats": 1 << 6,
    "Ks": 1 << 7,
    "backgrounds": 1 << 8,
    "opacity range": 1 << 9,
    "negative scales": 1 << 10,
    "focal lengths": 1 << 11,
}


def problems_message(bits: int, described: dict[str, str], stored: bool) -> str:
    """The error for the first problem in ``bits`` (:data:`PROBLEM_BITS`), in the order
    :func:`check_values_of` checks; ``described`` maps input names to their
    shape/dtype/device text. Used when the inputs are gone, else their own check words it.

    Example:
        >>> problems_message(PROBLEM_BITS["quats"], {"quats": "shape [5, 4]"}, stored=False)
        'quats (shape [5, 4]) has non-finite values (NaN or Inf)'
    """
    tensor_of = {"opacity range": "opacities", "negative scales": "scales", "focal lengths": "Ks"}
    for name, bit in PROBLEM_BITS.items():
        if not bits & bit:
            continue
        shown = "sh0" if stored and name == "colors" else tensor_of.get(name, name)
        what = f"{shown} ({described[shown]})" if shown in described else shown
        if bit < PROBLEM_BITS["opacity range"]:
            return f"{what} has non-finite values (NaN or Inf)"
        if name == "opacity range":
            return f"{what} must lie in [0, 1]; apply a sigmoid to logits first"
        if name == "negative scales":
            return f"{what} must be >= 0 (linear scales; exponentiate log-scales first)"
        return f"{what} must have positive focal lengths fx, fy"
    raise AssertionError(f"no known problem in the flag bits {bits}")


class DeferredCheck:
    """The value checks of one CUDA render of ``tensors`` (:func:`value_tensors`): its
    projection kernel sets the flag ``problems`` (int32 ``[1]`` on the device,
    :data:`PROBLEM_BITS`) without the host waiting for it.

    :meth:`start` takes the flag and queues its copy to pinned host memory on its stream;
    :meth:`poll` reads the copy once it is done (no sync), :meth:`check` waits for it.
    Either raises the ``ValueError`` :func:`check_values_of` raises on the reference
    backend, with the same text while the inputs live (only weak references are kept).

    Example:
        >>> means = torch.full((1, 3), float("nan"))
        >>> inputs = value_tensors(means, torch.ones(1, 4), torch.ones(1, 3), torch.ones(1),
        ...     torch.ones(1, 3), torch.eye(4)[None], torch.eye(3)[None], None, None, False)
        >>> flag = torch.tensor([PROBLEM_BITS["means"]], dtype=torch.int32)  # as the kernel sets
        >>> try:
        ...     DeferredCheck(inputs, stored=False, problems=flag).check()
        ... except ValueError as err:
        ...     print(str(err).split(") ", 1)[1])
        has non-finite values (NaN or Inf) in 1 rows
    """

    def __init__(
        self, tensors: dict[str, Tensor], stored: bool, problems: Tensor | None = None
    ) -> None:
        self.problems = problems
        self.stored = stored
        self.done = False
        self._refs = {k: weakref.ref(t) for k, t in tensors.items()}
        # Formatted only on failure: this runs every render.
        self._layouts = {k: (t.shape, t.dtype, t.device) for k, t in tensors.items()}
        self._host: Tensor | None = None
        self._event: torch.cuda.Event | None = None

    def start(self, problems: Tensor) -> None:
        """Take the flag and queue its copy to pinned host memory on the current stream of
        its device, behind the kernel that sets it (no sync)."""
        self.problems = problems
        self._host = torch.empty(1, dtype=torch.int32, pin_memory=True)
        self._host.copy_(self.problems, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record(torch.cuda.current_stream(self.problems.device))

    def poll(self, note: str = "") -> bool:
        """Whether the flag is known, without waiting; raises if it holds a problem."""
        if self.done:
            return True
        if self._event is None or not self._event.query():
            return False
        self._raise_for(int(self._host[0]), note)  # type: ignore[index]
        return True

    def check(self, bits: int | None = None) -> None:
        """Raise ``ValueError`` if the render's inputs held bad values: waits for the flag
        (one host sync) unless ``bits``, the flag's value read by the caller, is given."""
        if self.done or self.problems is None:
            return
        self._raise_for(int(self.problems.item()) if bits is None else int(bits), "")

    def _raise_for(self, bits: int, note: str) -> None:
        self.done = True
        self._host = self._event = None  # the pinned buffer goes back to its cache
        if bits == 0:
            return
        tensors = {k: r() for k, r in self._refs.items()}
        if all(t is not None for t in tensors.values()):
            try:
                check_values_of(tensors, stored=self.stored)  # type: ignore[arg-type]
            except ValueError as err:
                raise ValueError(f"{err}{note}") from None
        described = {
            k: f"shape {list(shape)}, dtype {dtype}, device {device}"
            for k, (shape, dtype, device) in self._layouts.items()
        }
        raise ValueError(problems_message(bits, described, self.stored) + note)
