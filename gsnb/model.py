"""``GaussianModel``: the trainable parameters of a scene, stored as the INRIA PLY stores them."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gsnb.raster import RenderResult, activate_splats, render_splats
from gsnb.raster.sh import C0, num_sh_bases, rgb_to_sh0, sh_degree_from_bases
from gsnb.utils.atomic import atomic_write
from gsnb.utils.tensor_file import MalformedTensorFile, file_kind, load_failure, load_tensor_file

SPLAT_KEYS = ("means", "quats", "scales", "opacities", "sh0", "shN")
CHECKPOINT_FORMATS = ("gsnb-model-1", "gsnb-trainer-1")
"""Format tags of files :meth:`GaussianModel.load` reads: a model, or a whole training state."""


class SplatDict(nn.ParameterDict):
    """An ``nn.ParameterDict`` whose lookups read the parameter table directly.

    ``ParameterDict[key]`` goes through ``nn.Module.__getattr__``; a training step looks
    the splat tensors up some thirty times, which cost more host time than several kernel
    launches. Keys and values not in the table (``None`` entries, anything that is not a
    parameter) take the usual path, so it behaves as ``nn.ParameterDict`` otherwise.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> d = SplatDict({"means": nn.Parameter(torch.zeros(2, 3))})
        >>> d["means"] is d.means, isinstance(d, nn.ParameterDict), list(d.keys())
        (True, True, ['means'])
    """

    def __getitem__(self, key: str) -> Any:
        """The parameter stored under ``key``."""
        found = self._parameters.get(key) if isinstance(key, str) else None
        return found if found is not None else super().__getitem__(key)


class GaussianModel(nn.Module):
    """A set of 3D Gaussians with INRIA's parameterisation.

    ``model.splats`` is a :class:`SplatDict` (an ``nn.ParameterDict``) holding

    - ``means [N, 3]`` centres,
    - ``quats [N, 4]`` raw rotations (wxyz, unnormalised),
    - ``scales [N, 3]`` log standard deviations,
    - ``opacities [N]`` logits,
    - ``sh0 [N, 1, 3]`` degree-0 SH coefficients,
    - ``shN [N, K - 1, 3]`` higher SH coefficients, ``K = (sh_degree + 1) ** 2``.

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(100, 3), torch.rand(100, 3), sh_degree=1)
        >>> model.num_gaussians, model.sh_degree, tuple(model.splats["shN"].shape)
        (100, 1, (100, 3, 3))
    """

    def __init__(
        self,
        splats: dict[str, Tensor],
        background: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> None:
        super().__init__()
        # The colour it was trained over: renders without a dataset use it (video, viewer).
        self.background = checked_background(background)
        missing = [k for k in SPLAT_KEYS if k not in splats]
        if missing:
            raise ValueError(f"GaussianModel needs tensors {SPLAT_KEYS}; missing {missing}")
        n = splats["means"].shape[0]
        expected = {"means": (n, 3), "quats": (n, 4), "scales": (n, 3), "opacities": (n,)}
        for key, shape in expected.items():
            if tuple(splats[key].shape) != shape:
                raise ValueError(
                    f"{key} has shape {list(splats[key].shape)}; expected {list(shape)}"
                )
        if tuple(splats["sh0"].shape) != (n, 1, 3):
            raise ValueError(f"sh0 has shape {list(splats['sh0'].shape)}; expected [{n}, 1, 3]")
        shn = splats["shN"]
        if shn.dim() != 3 or shn.shape[0] != n or shn.shape[2] != 3:
            raise ValueError(f"shN has shape {list(shn.shape)}; expected [{n}, K-1, 3]")
        sh_degree_from_bases(shn.shape[1] + 1)
        self.splats = SplatDict({k: nn.Parameter(splats[k].detach().clone()) for k in SPLAT_KEYS})

    @classmethod
    def from_points(
        cls,
        points: Tensor,
        rgb: Tensor,
        sh_degree: int = 3,
        init_opacity: float = 0.1,
        init_scale: float = 1.0,
        knn: int = 3,
    ) -> GaussianModel:
        """Gaussians centred on ``points [P, 3]`` with colours ``rgb [P, 3]`` in [0, 1].

        Each scale is ``init_scale`` times the RMS distance to the ``knn`` nearest
        neighbours (isotropic), rotations are identity and opacities ``init_opacity``.
        """
        points = torch.as_tensor(points, dtype=torch.float32)
        rgb = torch.as_tensor(rgb, dtype=torch.float32)
        if points.dim() != 2 or points.shape[1] != 3 or points.shape[0] == 0:
            raise ValueError(f"points has shape {list(points.shape)}; expected a non-empty [P, 3]")
        if rgb.shape != points.shape:
            raise ValueError(f"rgb has shape {list(rgb.shape)}; expected {list(points.shape)}")
        if not bool(torch.isfinite(points).all()):
            raise ValueError("points hold NaN or Inf values; clean the point cloud first")
        n = points.shape[0]
        dist = knn_distances(points, knn)
        scales = torch.log(dist.clamp_min(1e-7) * init_scale)[:, None].repeat(1, 3)
        quats = torch.zeros(n, 4)
        quats[:, 0] = 1.0
        opac = torch.full((n,), math.log(init_opacity / (1.0 - init_opacity)))
        sh0 = rgb_to_sh0(rgb.clamp(0.0, 1.0))[:, None, :]
        shn = torch.zeros(n, num_sh_bases(sh_degree) - 1, 3)
        splats = {"means": points, "quats": quats, "scales": scales, "opacities": opac}
        return cls(splats | {"sh0": sh0, "shN": shn})

    @property
    def num_gaussians(self) -> int:
        """Number of Gaussians ``N``."""
        return self.splats["means"].shape[0]

    @property
    def sh_degree(self) -> int:
        """The SH degree the coefficients can hold."""
        return sh_degree_from_bases(self.splats["shN"].shape[1] + 1)

    def activated(self) -> dict[str, Tensor]:
        """Render-ready tensors: linear ``scales``, opacities in [0, 1], SH ``colors [N, K, 3]``."""
        return activate_splats(self.splats)

    def render(
        self, viewmats: Tensor, Ks: Tensor, width: int, height: int, **kwargs: Any
    ) -> RenderResult:
        """Render through :func:`gsnb.render_splats`; ``kwargs`` (``sh_degree``, ...) go along."""
        return render_splats(self.splats, viewmats, Ks, width, height, **kwargs)

    def save(self, path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> None:
        """Write a checkpoint atomically (``torch.save`` into a temporary file, then rename)."""
        payload = {
            "format": "gsnb-model-1",
            "splats": {k: v.detach().cpu().contiguous() for k, v in self.splats.items()},
            "background": list(self.background),
        }
        if extra:
            payload["extra"] = extra
        with atomic_write(path, "wb") as handle:
            torch.save(payload, handle)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        map_location: str | torch.device = "cpu",
        *,
        exported: bool = False,
    ) -> GaussianModel:
        """Read the Gaussians of a model checkpoint (:meth:`save`) or a trainer checkpoint.

        The file is read as data only (``weights_only=True``): no code in it runs. With
        ``exported``, a trainer checkpoint's Gaussians come as the run's exports show them
        (what a PLY file or a video needs; the parameters as stored are what a resume
        needs): a run trained with the 3D filter (``filter3d``) with the filter baked into
        its scales and opacities (:func:`bake_filter3d`), and a run with exposure
        compensation (``exposure``) with the mean of its learned colour transforms baked
        into its colours (:func:`bake_exposure`), the transform its held-out views are
        evaluated through.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is corrupt, truncated, or holds no Gaussians.

        Example:
            >>> import tempfile, torch
            >>> path = tempfile.mkdtemp() + "/model.pt"
            >>> GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3)).save(path)
            >>> GaussianModel.load(path).num_gaussians
            5
        """
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint {path} does not exist")
        kind = file_kind(path)
        if kind is not None:
            raise ValueError(f"{path} is not a gsnb checkpoint: it is {kind}")
        try:
            payload = load_tensor_file(path, map_location)
        except MalformedTensorFile:
            raise
        except Exception as err:
            raise ValueError(
                f"{path} is not a readable gsnb checkpoint (truncated or corrupt: "
                f"{load_failure(err)})"
            ) from err
        fmt = payload.get("format") if isinstance(payload, dict) else None
        if fmt not in CHECKPOINT_FORMATS:
            raise ValueError(
                f"{path} is not a gsnb checkpoint (format tag {fmt!r}, expected one of "
                f"{list(CHECKPOINT_FORMATS)})"
            )
        splats = payload.get("splats")
        if not isinstance(splats, dict) or not all(
            isinstance(splats.get(k), Tensor) for k in SPLAT_KEYS
        ):
            raise ValueError(f"{path} holds no complete set of Gaussians {SPLAT_KEYS}")
        try:  # files from before gsnb recorded it were trained over black
            background = checked_background(payload.get("background", (0.0, 0.0, 0.0)))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path} records a bad background colour: {err}") from err
        if exported:
            splats = _exposure_baked(payload, _filtered(payload, splats, path), path)
        return cls(splats, background)


def _exposure_baked(payload: Mapping[str, Any], splats: dict[str, Tensor], path: Any) -> dict:
    """``splats`` with the mean of the run's learned exposures baked into their colours,
    when the checkpoint's run learned them."""
    config = payload.get("config")
    if not isinstance(config, Mapping) or not config.get("exposure"):
        return splats
    corrections = payload.get("corrections")
    exposure = corrections.get("exposure") if isinstance(corrections, Mapping) else None
    matrices = exposure.get("matrices") if isinstance(exposure, Mapping) else None
    names = exposure.get("names") if isinstance(exposure, Mapping) else None
    colours = [splats.get(k) for k in ("sh0", "shN")]
    if not all(isinstance(c, Tensor) and c.dim() == 3 and c.shape[-1] == 3 for c in colours):
        return splats  # GaussianModel says what is wrong with them
    if (
        isinstance(matrices, Tensor)
        and isinstance(names, list)
        and matrices.is_floating_point()  # dense: load_tensor_file refuses other layouts
        and matrices.shape == (len(names), 3, 4)  # one transform per named image
        and len(names) > 0
    ):
        mean = matrices.mean(0)
        if bool(torch.isfinite(mean).all()):
            return bake_exposure(splats, mean)
    warnings.warn(
        f"{path}: the run learned exposures (exposure), but the checkpoint holds no usable "
        "colour transforms, so its colours are read as stored (not through their mean)",
        stacklevel=3,
    )
    return splats


def _filtered(payload: Mapping[str, Any], splats: dict[str, Tensor], path: Any) -> dict:
    """``splats`` with the run's 3D filter baked in, when the checkpoint's run used one."""
    config = payload.get("config")
    if not isinstance(config, Mapping) or not config.get("filter3d"):
        return splats
    state = payload.get("filter3d")
    variances = state.get("variances") if isinstance(state, Mapping) else None
    count = splats["means"].shape[0]
    if isinstance(variances, Tensor) and state.get("current") and variances.shape == (count,):
        return bake_filter3d(splats, variances.to(splats["means"]))
    warnings.warn(
        f"{path}: the run used the 3D filter (filter3d), but the checkpoint holds no filter "
        "for its current Gaussians, so they are read without it; the PLY file the run wrote "
        "has it baked in",
        stacklevel=3,
    )
    return splats


def checked_background(colour: Any) -> tuple[float, float, float]:
    """``colour`` as three floats in [0, 1] (RGB), or ValueError saying what is wrong.

    Example:
        >>> checked_background([1, 1, 1])
        (1.0, 1.0, 1.0)
    """
    values = tuple(float(c) for c in colour)
    if len(values) != 3 or not all(0.0 <= c <= 1.0 for c in values):
        raise ValueError(f"a background is 3 values in [0, 1] (RGB), got {list(values)}")
    return values  # type: ignore[return-value]


def knn_distances(points: Tensor, k: int = 3) -> Tensor:
    """RMS distance ``[P]`` from each point to its ``k`` nearest other points (scipy cKDTree)."""
    from scipy.spatial import cKDTree

    pts = points.detach().cpu().double().numpy()
    k_eff = min(k, max(len(pts) - 1, 0))
    if k_eff == 0:
        return torch.ones(len(pts), dtype=points.dtype)
    dist, _ = cKDTree(pts).query(pts, k=k_eff + 1)
    rms = np.sqrt(np.mean(np.asarray(dist)[:, 1:] ** 2, axis=1))
    return torch.as_tensor(rms, dtype=points.dtype)


def bake_filter3d(splats: Mapping[str, Tensor], variances: Tensor) -> dict[str, Tensor]:
    """Stored parameters (log-scales, opacity logits, ...) with the filter applied, detached:
    what a PLY file holds so that other viewers draw what gsnb draws.

    Example:
        >>> import torch
        >>> splats = {"means": torch.zeros(1, 3), "quats": torch.tensor([[1.0, 0, 0, 0]]),
        ...     "scales": torch.full((1, 3), -4.0), "opacities": torch.zeros(1),
        ...     "sh0": torch.zeros(1, 1, 3), "shN": torch.zeros(1, 0, 3)}
        >>> baked = bake_filter3d(splats, torch.tensor([1e-3]))
        >>> baked["scales"][0, 0].item() > -4.0, baked["opacities"].item() < 0.0
        (True, True)
    """
    with torch.no_grad():
        baked = {k: splats[k].detach().clone() for k in SPLAT_KEYS}
        log_scales, logits = baked["scales"], baked["opacities"]
        # In log space: the logit of a saturated opacity (sigmoid rounds to 1) and the log of
        # a tiny scale (its square rounds to 0) stay finite. log(0) = -inf: no filter.
        log_var = torch.log(variances.detach()).to(log_scales)[:, None]
        scales = 0.5 * torch.logaddexp(2.0 * log_scales, log_var)
        log_coef = (log_scales - scales).sum(-1)  # log sqrt(prod(s^2 / (s^2 + v)))
        # logit(p c) = log(p c) - log(1 - p c), with 1 - p c = (1 - p) + p (1 - c).
        rest = torch.sigmoid(-logits) - torch.sigmoid(logits) * torch.expm1(log_coef)
        opacities = F.logsigmoid(logits) + log_coef - torch.log(rest)
        filtered = variances.detach() > 0  # the others keep their parameters exactly
        baked["scales"] = torch.where(filtered[:, None], scales, log_scales)
        baked["opacities"] = torch.where(filtered, opacities, logits)
    return baked


def bake_exposure(splats: Mapping[str, Tensor], matrix: Tensor) -> dict[str, Tensor]:
    """Stored parameters with the affine colour transform ``matrix [3, 4]`` baked into the
    SH colours, detached: every Gaussian's colour ``c`` becomes ``M c + b`` (``M = matrix[:,
    :3]``, ``b = matrix[:, 3]``), as :func:`gsnb.train.exposure.apply_exposure` maps a render.

    SH colours are linear in their coefficients (``c = C0 sh0 + sum_k Y_k shN_k + 0.5``), so
    ``M`` maps every coefficient's RGB and the constant ``M 0.5 + b - 0.5`` goes into the DC
    term. A render of the result equals the transformed render wherever the Gaussians cover
    the pixel (where the background shows through, it shows unchanged) and no colour is
    clamped at 0 (``max(c, 0)`` before the transform, ``max(M c + b, 0)`` after).

    Example:
        >>> import torch
        >>> from gsnb.raster.sh import sh0_to_rgb
        >>> splats = {"means": torch.zeros(1, 3), "quats": torch.tensor([[1.0, 0, 0, 0]]),
        ...     "scales": torch.zeros(1, 3), "opacities": torch.zeros(1),
        ...     "sh0": torch.zeros(1, 1, 3), "shN": torch.zeros(1, 0, 3)}  # grey 0.5
        >>> gain = torch.cat([2.0 * torch.eye(3), torch.full((3, 1), -0.25)], dim=1)
        >>> [round(v, 4) for v in sh0_to_rgb(bake_exposure(splats, gain)["sh0"]).flatten().tolist()]
        [0.75, 0.75, 0.75]
    """
    if tuple(matrix.shape) != (3, 4):
        raise ValueError(f"a colour transform is a [3, 4] matrix, got {list(matrix.shape)}")
    with torch.no_grad():
        baked = {k: splats[k].detach().clone() for k in SPLAT_KEYS}
        sh0 = baked["sh0"]
        gain = matrix[:, :3].detach().to(sh0)
        offset = matrix[:, 3].detach().to(sh0)
        constant = gain.sum(-1) * 0.5 + offset - 0.5  # M 0.5 + b - 0.5, per channel
        baked["sh0"] = sh0 @ gain.T + constant / C0
        baked["shN"] = baked["shN"] @ gain.T
    return baked
