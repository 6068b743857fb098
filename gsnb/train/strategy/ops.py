"""Tensor surgery on the Gaussians that keeps the Adam state in step.

Every function edits ``params`` (``model.splats``, an ``nn.ParameterDict``) in
place, gives the optimizer the new parameters with their Adam moments carried
over (zeros for new Gaussians) and edits the per-Gaussian tensors of the
strategy's running ``state`` the same way. The optimizer's parameter groups
carry a ``"name"`` equal to the key in ``params``, one group per key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, MutableMapping

import torch
from torch import Tensor, nn

from gsnb.raster.projection import covariances_3d, quat_to_rotmat

Params = MutableMapping[str, nn.Parameter]
MAX_RELOCATION_RATIO = 51
"""Largest number of copies one Gaussian is split into by MCMC relocation (as in 3DGS-MCMC)."""


def _group(optimizer: torch.optim.Optimizer, name: str) -> dict:
    for group in optimizer.param_groups:
        if group.get("name") == name:
            return group
    raise KeyError(f"the optimizer has no parameter group named {name!r}")


@torch.no_grad()
def replace_param(
    params: Params,
    optimizer: torch.optim.Optimizer | None,
    name: str,
    value: Tensor,
    moments: Callable[[Tensor], Tensor],
) -> None:
    """Swap ``params[name]`` for ``value``; ``moments`` maps each old Adam moment to the new one.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.ParameterDict({"x": nn.Parameter(torch.zeros(2))})
        >>> opt = torch.optim.Adam([{"params": [p["x"]], "name": "x"}])
        >>> replace_param(p, opt, "x", torch.ones(3), lambda m: torch.zeros(3))
        >>> p["x"].tolist(), opt.param_groups[0]["params"][0] is p["x"]
        ([1.0, 1.0, 1.0], True)
    """
    old = params[name]
    new = nn.Parameter(value, requires_grad=old.requires_grad)
    params[name] = new
    if optimizer is None:
        return
    group = _group(optimizer, name)
    group["params"] = [new]
    state = optimizer.state.pop(old, None)
    if state:
        optimizer.state[new] = {
            k: v if k == "step" or not isinstance(v, Tensor) or v.dim() == 0 else moments(v)
            for k, v in state.items()
        }


def _edit_state(state: MutableMapping[str, object], fn: Callable[[Tensor], Tensor]) -> None:
    for key, value in list(state.items()):
        if isinstance(value, Tensor) and value.dim() > 0:
            state[key] = fn(value)


def _zeros_like_rows(v: Tensor, n: int) -> Tensor:
    return v.new_zeros((n, *v.shape[1:]))


@torch.no_grad()
def duplicate(
    params: Params, optimizer: torch.optim.Optimizer | None, state: MutableMapping, mask: Tensor
) -> int:
    """Clone the Gaussians in ``mask [N]`` (appended at the end); returns how many.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.ParameterDict({"means": nn.Parameter(torch.zeros(3, 3))})
        >>> duplicate(p, None, {}, torch.tensor([True, False, True])), p["means"].shape[0]
        (2, 5)
    """
    sel = torch.where(mask)[0]
    for name in list(params.keys()):
        p = params[name]
        replace_param(
            params,
            optimizer,
            name,
            torch.cat([p, p[sel]]),
            lambda m: torch.cat([m, _zeros_like_rows(m, len(sel))]),
        )
    _edit_state(state, lambda v: torch.cat([v, v[sel]]))
    return len(sel)


def revised_logits(logits: Tensor) -> Tensor:
    """The opacity logits of a split's two children that together keep the parent's opacity
    ``o``: each ``1 - sqrt(1 - o)`` (Bulò et al. 2024).

    Example:
        >>> import torch
        >>> o = torch.sigmoid(revised_logits(torch.logit(torch.tensor([0.75]))))
        >>> round(float(1 - (1 - o) ** 2), 4)
        0.75
    """
    return torch.logit(1.0 - torch.sqrt(1.0 - torch.sigmoid(logits)))


def child_offsets(rot: Tensor, scales: Tensor, noise: Tensor) -> Tensor:
    """``[2, S, 3]`` offsets of split children: ``rot [S, 3, 3] @ (scales [S, 3] * noise
    [2, S, 3])``, as elementwise products and a sum (a batched matmul would start cuBLAS,
    hundreds of milliseconds at the first refine step of a run that uses it nowhere else).

    Example:
        >>> import torch
        >>> child_offsets(torch.eye(3)[None], torch.tensor([[1.0, 2, 3]]), torch.ones(2, 1, 3))
        tensor([[[1., 2., 3.]],
        <BLANKLINE>
                [[1., 2., 3.]]])
    """
    return (noise[:, :, None, :] * (rot * scales[:, None, :])[None]).sum(-1)


@torch.no_grad()
def split(
    params: Params,
    optimizer: torch.optim.Optimizer | None,
    state: MutableMapping,
    mask: Tensor,
    generator: torch.Generator | None = None,
    shrink: float = 1.6,
    revised_opacity: bool = False,
) -> int:
    """Replace each Gaussian in ``mask [N]`` by two, sampled from it, ``shrink`` times smaller.

    The two children are drawn from the parent's own distribution (3DGS); with
    ``revised_opacity`` each child gets ``1 - sqrt(1 - opacity)`` so the pair
    matches the parent's opacity (Bulò et al. 2024). Children go to the end.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> keys = {"means": (3,), "quats": (4,), "scales": (3,), "opacities": ()}
        >>> p = nn.ParameterDict({k: nn.Parameter(torch.zeros(2, *s)) for k, s in keys.items()})
        >>> split(p, None, {}, torch.tensor([True, False])), p["means"].shape[0]
        (1, 3)
    """
    sel = torch.where(mask)[0]
    rest = torch.where(~mask)[0]
    scales = torch.exp(params["scales"][sel])
    rot = quat_to_rotmat(params["quats"][sel])
    noise = torch.randn(
        (2, len(sel), 3), generator=generator, device=scales.device, dtype=scales.dtype
    )
    offsets = child_offsets(rot, scales, noise)
    for name in list(params.keys()):
        p = params[name]
        if name == "means":
            children = (p[sel][None] + offsets).reshape(-1, 3)
        elif name == "scales":
            children = torch.log(scales / shrink).repeat(2, 1)
        elif name == "opacities" and revised_opacity:
            children = revised_logits(p[sel]).repeat(2)
        else:
            children = p[sel].repeat(2, *([1] * (p.dim() - 1)))
        replace_param(
            params,
            optimizer,
            name,
            torch.cat([p[rest], children]),
            lambda m: torch.cat([m[rest], _zeros_like_rows(m, 2 * len(sel))]),
        )
    _edit_state(state, lambda v: torch.cat([v[rest], v[sel].repeat(2, *([1] * (v.dim() - 1)))]))
    return len(sel)


@torch.no_grad()
def remove(
    params: Params, optimizer: torch.optim.Optimizer | None, state: MutableMapping, mask: Tensor
) -> int:
    """Delete the Gaussians in ``mask [N]``; returns how many.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.ParameterDict({"means": nn.Parameter(torch.zeros(3, 3))})
        >>> remove(p, None, {}, torch.tensor([True, False, False])), p["means"].shape[0]
        (1, 2)
    """
    keep = torch.where(~mask)[0]
    for name in list(params.keys()):
        replace_param(params, optimizer, name, params[name][keep], lambda m: m[keep])
    _edit_state(state, lambda v: v[keep])
    return int(mask.numel() - keep.numel())


@torch.no_grad()
def reset_opacity(params: Params, optimizer: torch.optim.Optimizer | None, value: float) -> None:
    """Clamp every opacity to at most ``value`` (in [0, 1]) and zero its Adam moments (3DGS).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.ParameterDict({"opacities": nn.Parameter(torch.tensor([5.0, -5.0]))})
        >>> reset_opacity(p, None, 0.01)
        >>> [round(v, 4) for v in torch.sigmoid(p["opacities"]).tolist()]
        [0.01, 0.0067]
    """
    limit = math.log(value / (1.0 - value))
    p = params["opacities"]
    replace_param(params, optimizer, "opacities", p.clamp_max(limit), torch.zeros_like)


def sample_by_weight(weights: Tensor, n: int, generator: torch.Generator | None = None) -> Tensor:
    """``n`` indices drawn with replacement, with probability proportional to ``weights [N] >= 0``.

    Inverse-CDF sampling, so it has no size limit (``torch.multinomial`` stops at 2^24).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> sample_by_weight(torch.tensor([0.0, 1.0, 0.0]), 4, g).tolist()
        [1, 1, 1, 1]
    """
    cdf = torch.cumsum(weights.double(), 0)
    device = weights.device
    u = torch.rand(n, generator=generator, device=device, dtype=torch.float64) * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_max(len(weights) - 1)


def relocation_params(opacities: Tensor, scales: Tensor, ratios: Tensor) -> tuple[Tensor, Tensor]:
    """Opacity and scale of ``n`` copies that together render like one Gaussian (3DGS-MCMC).

    ``o' = 1 - (1 - o)^(1/n)`` and ``s' = s * o / sum_{m=1..n} C(n, m) (-1)^(m-1) o'^m / sqrt(m)``.

    Args:
        opacities: ``[B]`` in (0, 1); scales: ``[B, 3]`` linear; ratios: ``[B]`` copies per
            Gaussian (clamped to 1..51).

    Example:
        >>> import torch
        >>> o, s = relocation_params(torch.tensor([0.5]), torch.ones(1, 3), torch.tensor([1]))
        >>> o.item(), s.tolist()
        (0.5, [[1.0, 1.0, 1.0]])
    """
    n = ratios.clamp(1, MAX_RELOCATION_RATIO).to(torch.float64)
    o = opacities.double()
    new_o = 1.0 - torch.pow(1.0 - o, 1.0 / n)
    m = torch.arange(1, MAX_RELOCATION_RATIO + 1, device=o.device, dtype=torch.float64)
    log_binom = (
        torch.lgamma(n[:, None] + 1) - torch.lgamma(m + 1) - torch.lgamma(n[:, None] - m + 1)
    )
    binom = torch.where(m <= n[:, None], torch.exp(log_binom), torch.zeros_like(log_binom))
    sign = torch.where(m % 2 == 1, 1.0, -1.0)
    terms = binom * sign * torch.pow(new_o[:, None], m) / torch.sqrt(m)
    denom = terms.sum(-1)
    new_s = scales.double() * (o / denom)[:, None]
    return new_o.to(opacities.dtype), new_s.to(scales.dtype)


def _with_sources_rescaled(
    params: Params, name: str, src: Tensor, logits: Tensor, log_scales: Tensor
) -> Tensor:
    """A copy of ``params[name]`` in which the sources ``src`` carry their shared opacity/scale."""
    p = params[name].detach().clone()
    if name == "opacities":
        p[src] = logits
    elif name == "scales":
        p[src] = log_scales
    return p


def _copies_params(params: Params, src: Tensor, min_opacity: float) -> tuple[Tensor, Tensor]:
    """New opacity logits and log-scales for the sources ``src`` (indices, repeats allowed)."""
    ratios = torch.bincount(src, minlength=params["means"].shape[0])[src] + 1
    opac, scales = relocation_params(
        torch.sigmoid(params["opacities"][src]), torch.exp(params["scales"][src]), ratios
    )
    eps = torch.finfo(torch.float32).eps
    opac = opac.clamp(min_opacity, 1.0 - eps)
    return torch.logit(opac), torch.log(scales)


@torch.no_grad()
def relocate(
    params: Params,
    optimizer: torch.optim.Optimizer | None,
    state: MutableMapping,
    dead: Tensor,
    min_opacity: float = 0.005,
    generator: torch.Generator | None = None,
) -> int:
    """Move the Gaussians in ``dead [N]`` onto live ones sampled by opacity (3DGS-MCMC).

    Each sampled live Gaussian and its new copies share its opacity and scale
    as :func:`relocation_params` divides them; their Adam moments restart at zero.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> keys = {"means": (3,), "scales": (3,), "opacities": ()}
        >>> p = nn.ParameterDict({k: nn.Parameter(torch.zeros(3, *s)) for k, s in keys.items()})
        >>> relocate(p, None, {}, torch.tensor([True, False, False])), p["means"].shape[0]
        (1, 3)
    """
    dead_ids = torch.where(dead)[0]
    alive_ids = torch.where(~dead)[0]
    if len(dead_ids) == 0 or len(alive_ids) == 0:
        return 0
    probs = torch.sigmoid(params["opacities"][alive_ids])
    src = alive_ids[sample_by_weight(probs, len(dead_ids), generator)]
    logits, log_scales = _copies_params(params, src, min_opacity)
    touched = torch.cat([src, dead_ids])
    for name in list(params.keys()):
        p = _with_sources_rescaled(params, name, src, logits, log_scales)
        p[dead_ids] = p[src]
        replace_param(params, optimizer, name, p, lambda m: m.index_fill(0, touched, 0))
    _edit_state(state, lambda v: v.index_fill(0, touched, 0))
    return len(dead_ids)


@torch.no_grad()
def sample_add(
    params: Params,
    optimizer: torch.optim.Optimizer | None,
    state: MutableMapping,
    n: int,
    min_opacity: float = 0.005,
    generator: torch.Generator | None = None,
) -> int:
    """Add ``n`` Gaussians as copies of existing ones sampled by opacity (3DGS-MCMC growth).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> keys = {"means": (3,), "scales": (3,), "opacities": ()}
        >>> p = nn.ParameterDict({k: nn.Parameter(torch.zeros(4, *s)) for k, s in keys.items()})
        >>> sample_add(p, None, {}, 2), p["means"].shape[0]
        (2, 6)
    """
    if n <= 0:
        return 0
    src = sample_by_weight(torch.sigmoid(params["opacities"]), n, generator)
    logits, log_scales = _copies_params(params, src, min_opacity)
    for name in list(params.keys()):
        p = _with_sources_rescaled(params, name, src, logits, log_scales)
        replace_param(
            params,
            optimizer,
            name,
            torch.cat([p, p[src]]),
            lambda m: torch.cat([m, _zeros_like_rows(m, n)]),
        )
    _edit_state(state, lambda v: torch.cat([v, _zeros_like_rows(v, n)]))
    return n


@torch.no_grad()
def inject_noise(params: Params, scale: float, generator: torch.Generator | None = None) -> None:
    """Perturb the means by noise shaped by each covariance, mostly where transparent (3DGS-MCMC).

    ``means += Sigma @ eps * sigmoid(100 * (1 - opacity - 0.995)) * scale``, ``eps ~ N(0, I)``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.ParameterDict({"means": nn.Parameter(torch.zeros(2, 3)),
        ...     "quats": nn.Parameter(torch.tensor([[1.0, 0, 0, 0]] * 2)),
        ...     "scales": nn.Parameter(torch.zeros(2, 3)),
        ...     "opacities": nn.Parameter(torch.tensor([-10.0, 10.0]))})
        >>> inject_noise(p, 1.0, torch.Generator().manual_seed(0))
        >>> bool(p["means"][0].abs().sum() > 0), bool(p["means"][1].abs().sum() < 1e-6)
        (True, True)
    """
    means = params["means"]
    opac = torch.sigmoid(params["opacities"])
    cov = covariances_3d(params["quats"], torch.exp(params["scales"]))
    gate = torch.sigmoid(100.0 * ((1.0 - opac) - 0.995))
    eps = torch.randn(means.shape, generator=generator, device=means.device, dtype=means.dtype)
    means.add_(torch.einsum("nij,nj->ni", cov, eps * (gate * scale)[:, None]))
