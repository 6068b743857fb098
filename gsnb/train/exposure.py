"""Per-image exposure compensation: a learned affine colour transform of each training image.

Phone captures change exposure and white balance from photo to photo; a scene
fitted to them bakes those changes into view-dependent colour (floaters, colour
noise). As in the original 3DGS code (Kerbl et al., ``graphdeco-inria/gaussian-splatting``,
``--train_test_exp``), each training image ``i`` gets a ``3x4`` matrix ``A_i``
(identity at the start) applied to the rendered image before the loss::

    rgb' = rgb @ A_i[:, :3]^T + A_i[:, 3]

that is ``rgb' = M rgb + b`` per pixel, so the Gaussians learn one scene and
``A_i`` the camera's response for that photo. 3DGS's code multiplies by
``A[:3, :3]`` on the right (``rgb @ A``); gsnb's ``A`` is that matrix transposed,
which is the same model (only a matrix imported from 3DGS needs transposing).
The matrices have their own Adam (torch's defaults, as 3DGS) whose rate decays
exponentially from ``lr_exposure`` (0.01) to ``lr_exposure_final`` (0.001) over the
run, 3DGS's ``exposure_lr_init`` / ``exposure_lr_final`` with no delay.

Evaluation (3DGS's protocol, :data:`PROTOCOL_HALVES`): a held-out photo's
exposure is unknown, so with exposure compensation the test views train on
their left half only (columns ``[0, W // 2)``: their exposure is learned from
that half, the Gaussians see it too) and every metric on a test view is computed
on its right half (columns ``[W // 2, W)``), rendered with the exposure learned
from its left half. Without it (``train_test_exp`` off), evaluation uses whole images,
held out entirely, each rendered through the mean of the learned transforms
(:meth:`ExposureCorrection.mean`): the loss leaves that mean free, so it drifts from the
identity, and the average photo's response is the best guess of a held-out photo's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from gsnb.train.checkpoint import to_cpu
from gsnb.train.optim import Adam

PROTOCOL_FULL = "full images of held-out views"
"""Evaluation protocol without test halves: test views are held out whole."""
PROTOCOL_HALVES = (
    "right halves of test views, whose left halves (and exposures) trained (3DGS train_test_exp)"
)
"""Evaluation protocol with test halves (3DGS ``--train_test_exp``)."""


def exposure_rate(lr: float, lr_final: float, step: int, steps: int) -> float:
    """The exposures' learning rate at ``step``: ``lr`` decaying exponentially to ``lr_final``.

    Log-linear between the two over ``steps`` steps, then ``lr_final`` (3DGS's
    ``get_expon_lr_func`` without delay). A zero end point gives a linear decay to it.

    Example:
        >>> round(exposure_rate(0.01, 0.001, 500, 1000), 6)
        0.003162
        >>> exposure_rate(0.01, 0.001, 2000, 1000)
        0.001
    """
    t = min(max(step, 0), steps) / max(steps, 1)
    if t >= 1.0:
        return lr_final
    if lr <= 0.0 or lr_final <= 0.0:
        return lr * (1.0 - t) + lr_final * t
    return math.exp(math.log(lr) * (1.0 - t) + math.log(lr_final) * t)


def apply_exposure(rgb: Tensor, matrices: Tensor) -> Tensor:
    """``rgb [..., H, W, 3]`` through the affine colour transforms ``matrices [..., 3, 4]``.

    Each pixel ``c`` becomes ``A[:, :3] @ c + A[:, 3]``; a batch of images takes a
    batch of matrices (``[C, H, W, 3]`` with ``[C, 3, 4]``).

    Example:
        >>> import torch
        >>> A = torch.cat([2.0 * torch.eye(3), torch.full((3, 1), 0.1)], dim=1)
        >>> [round(v, 4) for v in apply_exposure(torch.full((1, 1, 3), 0.25), A).flatten().tolist()]
        [0.6, 0.6, 0.6]
    """
    # One [H*W, 3] x [3, 3] product per image: a 3x3 product per pixel would be a batch of
    # H*W tiny products whose backward holds a [H, W, 3, 3] gradient.
    linear = torch.einsum("...hwj,...ij->...hwi", rgb, matrices[..., :3])
    return linear + matrices[..., None, None, :, 3]


def identity_exposures(count: int, device: torch.device | str = "cpu") -> Tensor:
    """``[count, 3, 4]`` identity transforms: ``[I | 0]``.

    Example:
        >>> identity_exposures(2).shape
        torch.Size([2, 3, 4])
    """
    eye = torch.eye(3, 4, device=device)
    return eye.expand(count, 3, 4).clone()


def left_columns(width: int) -> int:
    """Columns ``[0, width // 2)`` train on a test view; ``[width // 2, width)`` evaluate it.

    Example:
        >>> left_columns(7)
        3
    """
    return width // 2


class ExposureCorrection:
    """The learned colour transforms of the training images and their Adam.

    Attributes:
        names: the image each transform belongs to, in training-view order.
        matrices: ``nn.Parameter [V, 3, 4]``, identity at the start.
        optimizer: Adam over ``matrices`` (torch's betas and epsilon, as 3DGS).

    Args:
        names: the training images' names.
        device: where the matrices live.

    Example:
        >>> import torch
        >>> exposure = ExposureCorrection(["a.png", "b.png"])
        >>> image = torch.rand(4, 4, 3)
        >>> torch.equal(exposure.apply(image, 1), image)  # identity until it learns
        True
    """

    def __init__(self, names: Sequence[str], device: torch.device | str = "cpu") -> None:
        self.names = list(names)
        self._index = {name: i for i, name in enumerate(self.names)}
        self.matrices = nn.Parameter(identity_exposures(len(self.names), device))
        self.optimizer = Adam([self.matrices], lr=0.01)

    def index_of(self, name: str) -> int | None:
        """The transform of the image ``name``, or None when it has none (not trained)."""
        return self._index.get(name)

    def mean(self) -> Tensor:
        """``[3, 4]``: the mean of the learned transforms, detached: how a photo without a
        transform of its own (held out whole) is taken to look.

        The colours and the transforms can trade a common transform (every colour through
        ``M``, every transform through ``M``'s inverse: the same photos), so the loss leaves
        the transforms' mean free, and it drifts from the identity while they learn (by a 1%
        gain and a -0.03 offset in a few hundred steps on the synthetic scene): a held-out
        photo rendered through the identity would carry that drift.

        Example:
            >>> import torch
            >>> exposure = ExposureCorrection(["a.png", "b.png"])
            >>> with torch.no_grad():
            ...     exposure.matrices[:, :, :3] *= torch.tensor([0.8, 0.9])[:, None, None]
            >>> [round(v, 3) for v in exposure.mean().diagonal().tolist()]
            [0.85, 0.85, 0.85]
        """
        return self.matrices.detach().mean(0)

    def apply(self, rgb: Tensor, index: int | Tensor) -> Tensor:
        """``rgb [H, W, 3]`` (or ``[C, H, W, 3]`` with ``index [C]``) through image ``index``'s
        transform; differentiable in both."""
        return apply_exposure(rgb, self.matrices[index])

    def step(self, lr: float) -> None:
        """One Adam update at rate ``lr`` (when the matrices have a gradient)."""
        if self.matrices.grad is None:
            return
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        """The matrices and Adam's state, on the CPU, for a checkpoint."""
        return {
            "names": list(self.names),
            "matrices": self.matrices.detach().to("cpu", copy=True),
            "optimizer": to_cpu(self.optimizer.state_dict()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; ``ValueError`` when it belongs to other images."""
        if list(state["names"]) != self.names:
            raise ValueError(
                f"the exposures were learned for {len(state['names'])} other images "
                f"({', '.join(list(state['names'])[:3])}, ...); load the same data and split"
            )
        with torch.no_grad():
            self.matrices.copy_(state["matrices"])
        self.optimizer.load_state_dict(state["optimizer"])
