"""The one-launch refine step (csrc/refine.cu) against clone_split_prune's PyTorch path.

Copied rows and Adam moments must be equal bit for bit, the split children's drawn means,
log-scales and revised opacities equal to float32 rounding (relative error below 1e-6), the
counts, the strategy's state and the generator's draws the same.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gsnb import kernels
from gsnb.train.optim import make_optimizer
from gsnb.train.strategy import refine
from gsnb.train.strategy.refine import clone_split_prune

DRAWN = ("means", "scales", "opacities")


def cloud(n: int, seed: int) -> nn.ParameterDict:
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape: int, shift: float = 0.0) -> nn.Parameter:
        return nn.Parameter(torch.randn(*shape, generator=g, device="cuda") + shift)

    return nn.ParameterDict(
        {
            "means": rand(n, 3), "quats": rand(n, 4), "scales": rand(n, 3, shift=-3.0),
            "opacities": rand(n), "sh0": rand(n, 1, 3), "shN": rand(n, 15, 3),
        }
    )  # fmt: skip


def doomed_rule(opacities: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return (torch.sigmoid(opacities) < 0.3) | (torch.exp(scales).amax(-1) > 0.08)


def run(
    fused: bool,
    n: int,
    rates: tuple[float, float],
    revised: bool,
    adam: bool,
    monkeypatch,
    prune: bool = False,
):
    params = cloud(n, seed=3)
    opt = None
    if adam:
        opt = make_optimizer(params, dict.fromkeys(params.keys(), 0.01))
        g = torch.Generator(device="cuda").manual_seed(7)
        for p in params.values():
            p.grad = torch.randn(p.shape, generator=g, device="cuda")
        opt.step()
    state = {
        "grad2d": torch.arange(n, dtype=torch.float32, device="cuda"),
        "count": torch.ones(n, device="cuda"),
        "scene_scale": 2.0,
    }
    draw = torch.rand(n, generator=torch.Generator(device="cuda").manual_seed(5), device="cuda")
    clone = draw < rates[0]
    split = (draw >= rates[0]) & (draw < rates[0] + rates[1])
    pruned = (torch.arange(n, device="cuda") % 3 == 0) if prune else None
    gen = torch.Generator(device="cuda").manual_seed(11)
    launches = []
    with monkeypatch.context() as patch:
        if not fused:
            patch.setattr(refine, "_fused_moments", lambda params, optimizer: None)
        real = kernels.refine_rows
        patch.setattr(kernels, "refine_rows", lambda **kw: launches.append(1) or real(**kw))
        counts = clone_split_prune(
            params, opt, state, clone, split, doomed_rule, gen, revised_opacity=revised,
            prune=pruned,
        )  # fmt: skip
    assert len(launches) == (1 if fused else 0)
    return params, opt, state, counts, gen


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(
        (a.detach().double() - b.detach().double()).norm()
        / max(float(b.detach().double().norm()), 1e-12)
    )


@pytest.mark.parametrize("n", [64, 200_003])
@pytest.mark.parametrize("revised", [True, False])
@pytest.mark.parametrize("rates", [(0.2, 0.3), (0.0, 0.5), (0.4, 0.0), (0.0, 0.0)])
@pytest.mark.parametrize("adam", [True, False])
@pytest.mark.parametrize("prune", [False, True])
def test_the_kernel_gives_what_the_pytorch_path_gives(
    cuda_ext, monkeypatch, n, revised, rates, adam, prune
):
    a, opt_a, state_a, counts_a, gen_a = run(False, n, rates, revised, adam, monkeypatch, prune)
    b, opt_b, state_b, counts_b, gen_b = run(True, n, rates, revised, adam, monkeypatch, prune)
    assert counts_a == counts_b
    assert counts_b[2] > 0  # the rule pruned some
    for name in a:
        assert a[name].shape == b[name].shape and b[name].requires_grad, name
        if name in DRAWN:
            assert rel_err(b[name], a[name]) < 1e-6, name
        else:
            assert torch.equal(a[name], b[name]), name
        if adam:
            assert (
                opt_b.param_groups[[g["name"] for g in opt_b.param_groups].index(name)]["params"][0]
                is b[name]
            )
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(opt_a.state[a[name]][key], opt_b.state[b[name]][key]), name
            assert opt_a.state[a[name]]["step"] == opt_b.state[b[name]]["step"]
    for key in ("grad2d", "count"):
        assert torch.equal(state_a[key], state_b[key]), key
    assert state_b["scene_scale"] == 2.0
    assert torch.equal(gen_a.get_state(), gen_b.get_state())


def test_a_plan_past_the_outputs_writes_nothing_out_of_bounds(cuda_ext):
    # A plan that claims more rows than the outputs have: the kernel skips them.
    n = 8
    p = torch.arange(n * 3, dtype=torch.float32, device="cuda").reshape(n, 3)
    quats = torch.tensor([[1.0, 0, 0, 0]], device="cuda").repeat(n, 1)
    pos = torch.arange(1, n + 1, dtype=torch.int32, device="cuda").repeat(4, 1)  # all flags set
    buffer = torch.full((n, 3), -1.0, device="cuda")
    out = buffer[:2]  # the rows past it are the buffer's: they must stay as they are
    kernels.refine_rows(
        pos=pos, kept=2, cloned=0, children=0, quats=quats, log_scales=p,
        noise=p.new_zeros(2, 0, 3), shrink=1.6, sources=[p], outputs=[out], kinds=[0],
        rows=torch.empty(0, dtype=torch.int64),
    )  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(out, p[:2])
    assert bool((buffer[2:] == -1.0).all())


def test_mismatched_outputs_are_refused(cuda_ext):
    p = torch.zeros(4, 3, device="cuda")
    pos = torch.zeros(4, 4, dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError, match="output 0 must hold 3 rows"):
        kernels.refine_rows(
            pos=pos, kept=3, cloned=0, children=0, quats=torch.zeros(4, 4, device="cuda"),
            log_scales=p, noise=p.new_zeros(2, 0, 3), shrink=1.6, sources=[p],
            outputs=[torch.zeros(2, 3, device="cuda")], kinds=[0],
            rows=torch.empty(0, dtype=torch.int64),
        )  # fmt: skip
