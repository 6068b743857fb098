"""Per-view pose refinement: a learned rigid correction of each training camera.

Poses from structure from motion (or a phone's tracking) are off by a little;
a scene fitted to them blurs. As gsplat's ``pose_opt``, each training view ``i``
gets a correction, zero at the start and learned with the scene by its own Adam
(``lr_pose``, 1e-5, with weight decay ``pose_weight_decay``, 1e-6: gsplat's
``pose_opt_lr`` and ``pose_opt_reg``). Here it is 6 numbers: an axis-angle
rotation ``w`` and a translation ``u`` in units of the scene extent, both in
the camera's frame. They make the rigid transform ``D_i = [R(w) | extent * u]``
and the corrected world-to-camera matrix::

    viewmat_i' = D_i @ viewmat_i

gsplat normalises its scenes to about unit size while gsnb keeps the data's
units, so the translation is stored in extents: one rate then means what
gsplat's means for both parts.

How it is rendered: gsnb's CUDA backend gives no gradient for ``viewmats``, so the
correction moves the Gaussians instead. Rendering the Gaussians moved by
``M_i = viewmat_i^-1 @ D_i @ viewmat_i`` (means ``M p``, rotations ``q_M * q``) from
the uncorrected camera gives exactly the corrected camera's positions, shapes,
depths and coverage, with gradients on every backend. The one difference is the
view direction of the colours: SH is evaluated at ``R_M (p - c')`` instead of
``p - c'`` (``c'`` the corrected camera centre), a direction turned by the
correction's angle (a few degrees), and the rotation's gradient also sees the
colours turn with the Gaussians. Degree-0 colours are unaffected: image and
gradient equal the reference backend's with a differentiated ``viewmats``. With
random degree-3 colours and a 3 degree, 3 cm correction, pixels differ by 2.6e-3
on average (0.045 at most; 4% of what the correction itself changes) and the
gradient keeps its direction (cosine 0.98): ``tests/train/test_pose_refine.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from gsnb.raster.api import activate_splats
from gsnb.train.checkpoint import to_cpu
from gsnb.train.optim import Adam

_SMALL = 1e-4
"""Below this angle (radians) the series of sin and cos replace their quotients."""


def skew(v: Tensor) -> Tensor:
    """``[..., 3, 3]`` cross-product matrices of ``v [..., 3]`` (``skew(a) @ b = a x b``).

    Example:
        >>> import torch
        >>> a, b = torch.tensor([1.0, 0, 0]), torch.tensor([0.0, 1, 0])
        >>> (skew(a) @ b).tolist()
        [0.0, 0.0, 1.0]
    """
    zero = torch.zeros_like(v[..., 0])
    x, y, z = v.unbind(-1)
    rows = [zero, -z, y, z, zero, -x, -y, x, zero]
    return torch.stack(rows, dim=-1).reshape(*v.shape[:-1], 3, 3)


def _angle(w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``theta^2``, ``theta`` (1 where small, so quotients stay finite) and the small mask."""
    theta2 = (w * w).sum(-1)
    small = theta2 < _SMALL**2
    theta = torch.sqrt(torch.where(small, torch.ones_like(theta2), theta2))
    return theta2, theta, small


def axis_angle_to_matrix(w: Tensor) -> Tensor:
    """Rotation matrices ``[..., 3, 3]`` of axis-angle vectors ``w [..., 3]`` (Rodrigues).

    Differentiable everywhere, at zero too (where its derivative is ``skew``).

    Example:
        >>> import math, torch
        >>> R = axis_angle_to_matrix(torch.tensor([0.0, 0.0, math.pi / 2]))
        >>> [round(v, 4) + 0 for v in (R @ torch.tensor([1.0, 0, 0])).tolist()]
        [0.0, 1.0, 0.0]
    """
    theta2, theta, small = _angle(w)
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / (theta * theta))
    k = skew(w)
    eye = torch.eye(3, dtype=w.dtype, device=w.device)
    return eye + a[..., None, None] * k + b[..., None, None] * (k @ k)


def axis_angle_to_quat(w: Tensor) -> Tensor:
    """Unit quaternions ``[..., 4]`` (wxyz) of axis-angle vectors ``w [..., 3]``.

    Example:
        >>> import math, torch
        >>> [round(v, 4) + 0 for v in axis_angle_to_quat(torch.tensor([math.pi, 0, 0])).tolist()]
        [0.0, 1.0, 0.0, 0.0]
    """
    theta2, theta, small = _angle(w)
    real = torch.where(small, 1.0 - theta2 / 8.0, torch.cos(theta / 2))
    coef = torch.where(small, 0.5 - theta2 / 48.0, torch.sin(theta / 2) / theta)
    return torch.cat([real[..., None], coef[..., None] * w], dim=-1)


def quat_multiply(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton products ``a * b`` of quaternions ``[..., 4]`` (wxyz): rotate by ``b``, then ``a``.

    Example:
        >>> import torch
        >>> i, j = torch.tensor([0.0, 1, 0, 0]), torch.tensor([0.0, 0, 1, 0])
        >>> quat_multiply(i, j).tolist()  # i j = k
        [0.0, 0.0, 0.0, 1.0]
    """
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    real = aw * bw - (av * bv).sum(-1, keepdim=True)
    vector = aw * bv + bw * av + torch.linalg.cross(*torch.broadcast_tensors(av, bv))
    return torch.cat([real, vector], dim=-1)


def correction_matrices(params: Tensor, extent: float) -> Tensor:
    """The rigid transforms ``D [..., 4, 4]`` of corrections ``params [..., 6]`` (``w``, ``u``).

    Example:
        >>> import torch
        >>> correction_matrices(torch.zeros(6), 2.0).equal(torch.eye(4))
        True
    """
    out = torch.zeros(*params.shape[:-1], 4, 4, dtype=params.dtype, device=params.device)
    out[..., :3, :3] = axis_angle_to_matrix(params[..., :3])
    out[..., :3, 3] = extent * params[..., 3:]
    out[..., 3, 3] = 1.0
    return out


def pose_difference(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """How far apart the cameras ``a`` and ``b`` (world-to-camera ``[..., 4, 4]``) are:
    the rotation angle between them (radians) and the distance of their centres.

    Example:
        >>> import torch
        >>> b = torch.eye(4); b[0, 3] = 0.5
        >>> [round(float(v), 4) for v in pose_difference(torch.eye(4), b)]
        [0.0, 0.5]
    """
    relative = a[..., :3, :3] @ b[..., :3, :3].transpose(-1, -2)
    trace = relative.diagonal(dim1=-2, dim2=-1).sum(-1)
    angle = torch.acos(((trace - 1.0) / 2.0).clamp(-1.0, 1.0))
    centre = [-(m[..., :3, :3].transpose(-1, -2) @ m[..., :3, 3:4])[..., 0] for m in (a, b)]
    return angle, (centre[0] - centre[1]).norm(dim=-1)


def move_splats(splats: Mapping[str, Tensor], viewmat: Tensor, params: Tensor, extent: float):
    """``splats`` moved so that the camera ``viewmat [4, 4]`` sees them as the corrected camera
    ``D @ viewmat`` sees the originals (``params [6]``, see the module docstring).

    ``means`` and ``quats`` are new tensors (differentiable in ``params`` and in the
    originals); the other entries are the same objects.

    Example:
        >>> import torch
        >>> splats = {"means": torch.rand(5, 3), "quats": torch.randn(5, 4)}
        >>> moved = move_splats(splats, torch.eye(4), torch.tensor([0, 0, 0, 0.1, 0, 0]), 1.0)
        >>> torch.allclose(moved["means"], splats["means"] + torch.tensor([0.1, 0, 0]))
        True
    """
    rot_v, t_v = viewmat[:3, :3], viewmat[:3, 3]
    w, u = params[:3], extent * params[3:]
    rot_d = axis_angle_to_matrix(w)
    # M = V^-1 D V: a world-space rigid motion whose rotation turns about R_V^T w.
    rot_m = rot_v.T @ rot_d @ rot_v
    t_m = rot_v.T @ (rot_d @ t_v + u - t_v)
    q_m = axis_angle_to_quat(rot_v.T @ w)
    moved = dict(splats)
    moved["means"] = splats["means"] @ rot_m.T + t_m
    moved["quats"] = quat_multiply(q_m, splats["quats"])
    return moved


class MovedGaussians:
    """A model's Gaussians moved for one view (:func:`move_splats`); renders like the model.

    It has what :func:`gsnb.train.rendering.render_model` reads: ``splats`` (stored
    parameters) and :meth:`activated`.
    """

    def __init__(self, splats: dict[str, Tensor], background: tuple[float, float, float]) -> None:
        self.splats = splats
        self.background = background

    def activated(self) -> dict[str, Tensor]:
        """Render-ready tensors, as :meth:`GaussianModel.activated <gsnb.model.GaussianModel>`."""
        return activate_splats(self.splats)


class PoseRefinement:
    """The learned pose corrections of the training views and their Adam.

    Attributes:
        names: the view each correction belongs to, in training-view order.
        params: ``nn.Parameter [V, 6]``: axis-angle rotation, then translation in
            scene extents, camera frame; zero at the start.
        extent: the scene extent that scales the translations.
        optimizer: Adam over ``params`` (torch's betas and epsilon, as gsplat).

    Example:
        >>> import torch
        >>> poses = PoseRefinement(["a.png", "b.png"], extent=2.0)
        >>> poses.corrected_viewmats(torch.eye(4)[None], torch.tensor([1])).shape
        torch.Size([1, 4, 4])
    """

    def __init__(
        self, names: Sequence[str], extent: float, device: torch.device | str = "cpu"
    ) -> None:
        self.names = list(names)
        self._index = {name: i for i, name in enumerate(self.names)}
        self.extent = float(extent)
        self.params = nn.Parameter(torch.zeros(len(self.names), 6, device=device))
        self.optimizer = Adam([self.params], lr=1e-5)
        # Whether any correction may be non-zero: until then rendering skips the move.
        self.learned = False

    def index_of(self, name: str) -> int | None:
        """The correction of the view ``name``, or None when it has none (not trained)."""
        return self._index.get(name)

    def corrected_viewmats(self, viewmats: Tensor, index: int | Tensor) -> Tensor:
        """``D @ viewmats`` ``[C, 4, 4]`` for views ``index`` ``[C]``; differentiable in ``params``
        (for a backend that differentiates ``viewmats``)."""
        return correction_matrices(self.params[index], self.extent) @ viewmats

    def moved(self, splats: Mapping[str, Tensor], viewmat: Tensor, index: int) -> dict:
        """``splats`` moved for view ``index`` seen from ``viewmat [4, 4]`` (see move_splats)."""
        return move_splats(splats, viewmat.reshape(4, 4), self.params[index], self.extent)

    def step(self, lr: float, weight_decay: float) -> None:
        """One Adam update (when ``params`` has a gradient)."""
        if self.params.grad is None:
            return
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"] = lr, weight_decay
        self.optimizer.step()
        self.learned = True

    def state_dict(self) -> dict[str, Any]:
        """The corrections and Adam's state, on the CPU, for a checkpoint."""
        return {
            "names": list(self.names),
            "params": self.params.detach().to("cpu", copy=True),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "learned": self.learned,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; ``ValueError`` when it belongs to other views."""
        if list(state["names"]) != self.names:
            raise ValueError(
                f"the pose corrections were learned for {len(state['names'])} other views "
                f"({', '.join(list(state['names'])[:3])}, ...); load the same data and split"
            )
        with torch.no_grad():
            self.params.copy_(state["params"])
        self.optimizer.load_state_dict(state["optimizer"])
        # Checkpoints from before "learned" was kept: corrections that are not zero learned.
        learned = state.get("learned")
        self.learned = bool(self.params.detach().abs().sum() > 0) if learned is None else learned
