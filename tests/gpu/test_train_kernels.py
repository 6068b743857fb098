"""The trainer's fused kernels (csrc/adam.cu, csrc/health.cu) against PyTorch.

Adam: the one-launch update of several tensors against ``torch.optim.Adam`` run
in float64 on the same gradients (relative L2 error per tensor after 5 steps).
Health: the kernel's sums against the PyTorch path of ``health_sums`` in float64.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from gsnb import kernels
from gsnb.train import health
from gsnb.train.optim import GaussianAdam, make_optimizer

ADAM_TOL = 1e-6
SUM_TOL = 1e-9


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / max(float(b.norm()), 1e-12))


def splats(n: int, seed: int = 0) -> dict[str, nn.Parameter]:
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape: int, shift: float = 0.0) -> nn.Parameter:
        return nn.Parameter(torch.randn(*shape, generator=gen, device="cuda") + shift)

    return {
        "means": rand(n, 3), "quats": rand(n, 4), "scales": rand(n, 3, shift=-4.0),
        "opacities": rand(n), "sh0": rand(n, 1, 3), "shN": rand(n, 15, 3),
    }  # fmt: skip


RATES = {"means": 1e-3, "quats": 1e-3, "scales": 5e-3, "opacities": 5e-2, "sh0": 2.5e-3,
         "shN": 1.25e-4}  # fmt: skip


@pytest.mark.parametrize("n", [1, 1000, 300_001])
def test_adam_kernel_matches_float64_torch_adam(cuda_ext, n):
    # Float32 Adam drifts from float64 by rounding; the kernel may drift no more than
    # torch's own float32 Adam (fused) does on the same gradients.
    ours = splats(n)
    ref = {k: nn.Parameter(v.detach().double().clone()) for k, v in ours.items()}
    torch32 = {k: nn.Parameter(v.detach().clone()) for k, v in ours.items()}
    opt = make_optimizer(ours, RATES)
    assert opt._fused()

    def adam(params, **kw):
        groups = [{"params": [p], "lr": RATES[k]} for k, p in params.items()]
        return torch.optim.Adam(groups, eps=1e-15, **kw)

    ref_opt, torch32_opt = adam(ref), adam(torch32, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for step in range(5):
        for name, p in ours.items():
            if name == "quats" and step == 2:  # a group without gradient is left alone
                p.grad = ref[name].grad = torch32[name].grad = None
                continue
            g = torch.randn(p.shape, generator=gen, device="cuda") * 10.0 ** (step - 3)
            p.grad, ref[name].grad, torch32[name].grad = g, g.double(), g.clone()
        for o in (opt, ref_opt, torch32_opt):
            o.step()
    for name in ours:
        err, torch_err = rel_err(ours[name], ref[name]), rel_err(torch32[name], ref[name])
        assert err < max(2.0 * torch_err, ADAM_TOL), (name, err, torch_err)
        state, ref_state = opt.state[ours[name]], ref_opt.state[ref[name]]
        assert float(state["step"]) == float(ref_state["step"])
        assert rel_err(state["exp_avg_sq"], ref_state["exp_avg_sq"]) < ADAM_TOL, name


def test_adam_step_counts_follow_replaced_loaded_and_taken_back_states(cuda_ext):
    # The fused update keeps its step counts in one buffer that each state's "step" views;
    # states a densification replaced or a checkpoint loaded are linked anew, counts kept.
    from gsnb.train.strategy import ops

    params = nn.ParameterDict(splats(100))
    opt = make_optimizer(params, RATES)
    gen = torch.Generator(device="cuda").manual_seed(3)

    def step(n: int) -> None:
        for _ in range(n):
            for p in params.values():
                p.grad = torch.randn(p.shape, generator=gen, device="cuda")
            assert opt.launch()

    def counts() -> list[float]:
        return [float(opt.state[p]["step"]) for p in params.values()]

    step(3)
    assert counts() == [3.0] * 6
    # Densification swaps a tensor: its state dict is new, its "step" the old tensor.
    grown = torch.cat([params["means"].detach(), params["means"].detach()[:1]])
    ops.replace_param(params, opt, "means", grown, lambda m: torch.cat([m, m[:1] * 0]))
    step(2)
    assert counts() == [5.0] * 6
    opt.uncount()
    assert counts() == [4.0] * 6
    saved = copy.deepcopy(opt.state_dict())
    step(1)
    opt.load_state_dict(saved)  # back to 4: new step tensors, linked at the next update
    assert counts() == [4.0] * 6
    step(1)
    assert counts() == [5.0] * 6
    for p in params.values():
        assert opt.state[p]["step"].dtype == torch.float32 and not opt.state[p]["step"].is_cuda
    # One more update beside torch's Adam from the same state: the bias corrections use
    # the counts the states hold.
    twin = {k: nn.Parameter(p.detach().clone()) for k, p in params.items()}
    ref = torch.optim.Adam([{"params": [p], "lr": RATES[k]} for k, p in twin.items()], eps=1e-15)
    ref.load_state_dict(copy.deepcopy(opt.state_dict()))
    for p, q in zip(params.values(), twin.values(), strict=True):
        q.grad = torch.randn(p.shape, generator=gen, device="cuda")
        p.grad = q.grad.clone()
    assert opt.launch()
    ref.step()
    for k in params:
        assert rel_err(params[k], twin[k]) < ADAM_TOL, k
    assert counts() == [6.0] * 6


def test_adam_takes_a_fused_torch_adam_state(cuda_ext):
    params = splats(500)
    fused = torch.optim.Adam(
        [{"params": [p], "lr": RATES[k], "name": k} for k, p in params.items()],
        eps=1e-15,
        fused=True,
    )
    for p in params.values():
        p.grad = torch.ones_like(p)
    fused.step()
    twin = {k: nn.Parameter(v.detach().clone()) for k, v in params.items()}
    ours = make_optimizer(twin, RATES)
    ours.load_state_dict(copy.deepcopy(fused.state_dict()))
    assert ours._fused()
    for p, q in zip(params.values(), twin.values(), strict=True):
        p.grad = q.grad = torch.full_like(p, 0.5)
    fused.step()
    ours.step()
    for k in params:
        assert rel_err(twin[k], params[k]) < ADAM_TOL, k


def test_adam_falls_back_for_options_the_kernel_lacks(cuda_ext):
    p = nn.Parameter(torch.ones(4, device="cuda"))
    opt = GaussianAdam([{"params": [p], "lr": 0.1, "name": "x", "weight_decay": 0.1}])
    assert not opt._fused()
    p.grad = torch.ones(4, device="cuda")
    opt.step()
    assert torch.all(p < 1.0)


def torch_sums(s: dict[str, torch.Tensor], grads: list[torch.Tensor]) -> torch.Tensor:
    as64 = {k: v.detach().double() for k, v in s.items()}
    return health.health_sums(as64, [g.double() for g in grads])


@pytest.mark.parametrize("n", [1, 7, 5000, 1_000_003])
def test_health_kernel_matches_float64(cuda_ext, n):
    s = splats(n, seed=n)
    grads = [torch.randn_like(p) * 1e-3 for p in s.values()]
    got = health.health_sums(s, grads)
    assert got.dtype == torch.float64 and got.is_cuda and got.shape == (health.SUMS,)
    want = torch_sums(s, grads)
    for i, (a, b) in enumerate(zip(got.tolist(), want.tolist(), strict=True)):
        assert a == pytest.approx(b, rel=SUM_TOL, abs=1e-6), (i, a, b)
    ours = health.signals_from_sums(got.tolist(), n, 3.0)
    ref = health.signals_from_sums(want.tolist(), n, 3.0)
    assert ours == pytest.approx(ref, rel=1e-6)
    norm = torch.nn.utils.get_total_norm([g.double() for g in grads]).item()
    assert ours["grad_norm"] == pytest.approx(norm, rel=1e-9)


def test_health_kernel_appends_its_tail_as_float64(cuda_ext):
    # A step's loss terms (float32) and its count of intersections (int64) follow the sums:
    # one tensor for the step's read-back, as torch.cat of them would make it.
    s = splats(3000, seed=4)
    grads = [torch.randn_like(p) for p in s.values()]
    stats = torch.tensor([0.125, -3.5e-8, float("nan"), 7.0], device="cuda")
    count = torch.tensor([2**40 + 3], device="cuda")  # exact in float64
    got = health.health_sums(s, grads, tail=[stats, count])
    want = torch.cat([health.health_sums(s, grads), stats.double(), count.double()])
    assert got.shape == (health.SUMS + 5,)
    torch.testing.assert_close(got, want, rtol=SUM_TOL, atol=1e-6, equal_nan=True)
    assert got[-1].item() == 2**40 + 3
    # A tail the kernel does not take goes through PyTorch; the op itself refuses it.
    odd = torch.tensor([1.5], dtype=torch.float64, device="cuda")
    assert health.health_sums(s, grads, tail=[odd])[-1].item() == 1.5
    with pytest.raises(RuntimeError, match="tail 0 must be a contiguous float32"):
        kernels.health_sums(scales=s["scales"], opacities=s["opacities"], params=list(s.values()),
                            grads=grads, tail=[odd])  # fmt: skip


def test_health_kernel_copies_its_result_to_the_host(cuda_ext):
    # A step read behind gets its numbers through a pinned copy queued by the op itself;
    # a long GPU wait before the sums are made shows the copy follows them on the stream.
    s = splats(3000, seed=5)
    grads = [torch.randn_like(p) for p in s.values()]
    stats = torch.tensor([0.125, 2.0, 0.5, 7.0], device="cuda")
    host = torch.full((health.SUMS + 4,), float("nan"), dtype=torch.float64).pin_memory()
    torch.cuda._sleep(2_000_000)
    got = health.health_sums(s, grads, tail=[stats], host=host)
    done = torch.cuda.Event()
    done.record()
    done.synchronize()
    assert torch.equal(host, got.cpu())
    # The PyTorch path (a tail the kernel does not take) fills it as well.
    odd = torch.tensor([1.5, 2.5, 3.5, 4.5], dtype=torch.float64, device="cuda")
    host.fill_(float("nan"))
    got = health.health_sums(s, grads, tail=[odd], host=host)
    torch.cuda.synchronize()
    assert torch.equal(host, got.cpu())
    args = {"scales": s["scales"], "opacities": s["opacities"], "params": list(s.values()),
            "grads": grads, "tail": [stats]}  # fmt: skip
    for bad in (torch.empty(3, dtype=torch.float64), torch.empty(13), host.cuda()):
        with pytest.raises(RuntimeError, match="host must be a contiguous float64 CPU tensor"):
            kernels.health_sums(**args, host=bad)
    with pytest.raises(ValueError, match="host must be a float64 CPU tensor"):
        health.health_sums(s, grads, tail=[odd], host=torch.empty(3, dtype=torch.float64))


def test_health_kernel_reads_unaligned_tensors_and_their_leftovers(cuda_ext):
    # Tensors that start off a 16-byte boundary are read value by value, an aligned one's last
    # numel % 4 values too; a NaN or Inf counts wherever it sits.
    def shifted(t: torch.Tensor) -> torch.Tensor:  # the same values, one float further on
        flat = torch.empty(t.numel() + 1, device=t.device)
        flat[1:] = t.reshape(-1)
        return flat[1:].view(t.shape)

    s = splats(1001, seed=8)
    grads = [torch.randn_like(p) * 1e-2 for p in s.values()]
    want = torch_sums(s, grads).tolist()
    moved = {k: shifted(v.detach()) if k in ("means", "shN") else v for k, v in s.items()}
    moved_grads = [shifted(g) if i % 2 else g for i, g in enumerate(grads)]
    assert moved["means"].data_ptr() % 16 and moved_grads[1].data_ptr() % 16
    got = health.health_sums(moved, moved_grads).tolist()
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == pytest.approx(b, rel=SUM_TOL, abs=1e-6), (i, a, b)
    with torch.no_grad():
        moved["means"][1000, 2] = math.nan  # unaligned
        moved["quats"][1000, 3] = math.inf  # an aligned tensor's float4 run
        moved["opacities"][1000] = -math.inf  # 1001 values: the last is a leftover
        moved_grads[1][3, 1] = math.nan  # unaligned gradient
        moved_grads[2][1000, 2] = math.inf  # an aligned gradient's leftover (3003 values)
    sums = health.health_sums(moved, moved_grads).tolist()
    assert sums[0] == 3.0 and sums[-1] == 2.0


def test_health_kernel_counts_non_finite_values(cuda_ext):
    s = splats(2000, seed=3)
    with torch.no_grad():
        s["means"][10, 1] = math.nan
        s["shN"][5, 3, 2] = math.inf
    grads = [torch.ones_like(p) for p in s.values()]
    grads[3][11] = -math.inf
    sums = health.health_sums(s, grads).tolist()
    assert sums[0] == 2.0 and sums[-1] == 1.0
    signals = health.signals_from_sums(sums, 2000, 1.0)
    assert signals["params_finite"] == 0.0 and math.isfinite(signals["scale_max"])
    assert signals["grads_finite"] == 0.0 and math.isnan(signals["grad_norm"])
    with torch.no_grad():
        s["scales"][7, 0] = math.nan
        s["opacities"][8] = math.nan
    signals = health.signals_from_sums(health.health_sums(s).tolist(), 2000, 1.0)
    assert math.isnan(signals["scale_max"]) and math.isnan(signals["mean_opacity"])
    with torch.no_grad():
        s["scales"][7, 0] = math.inf
        s["opacities"][8] = 0.0
    signals = health.signals_from_sums(health.health_sums(s).tolist(), 2000, 1.0)
    assert signals["scale_max"] == math.inf and signals["anisotropy_max"] == math.inf


@pytest.mark.parametrize(("cams", "n"), [(1, 1), (1, 20_000), (3, 5000)])
def test_accumulate_kernel_matches_pytorch(cuda_ext, monkeypatch, cams, n):
    from gsnb.train.strategy import default

    gen = torch.Generator(device="cuda").manual_seed(cams)
    grads = torch.randn(cams, n, 2, generator=gen, device="cuda") * 1e-4
    radii = torch.randint(-1, 3, (cams, n, 2), generator=gen, device="cuda", dtype=torch.int32)
    means2d = torch.zeros(cams, n, 2, device="cuda", requires_grad=True)
    means2d.grad = grads
    info = {"means2d": means2d, "radii": radii, "width": 640, "height": 480, "n_cameras": cams}
    params = {"means": torch.zeros(n, 3, device="cuda")}
    strategy = default.DefaultStrategy()
    fused = strategy.initialize_state(1.0)
    assert default._fused(grads, radii)
    for _ in range(2):
        strategy.accumulate(params, fused, info)
    monkeypatch.setattr(default, "_fused", lambda *_: False)
    plain = strategy.initialize_state(1.0)
    for _ in range(2):
        strategy.accumulate(params, plain, info)
    assert torch.equal(fused["count"], plain["count"])
    assert rel_err(fused["grad2d"], plain["grad2d"]) < 1e-6


GATES = [
    ((0.5, 0.0, 0.25), True),
    ((0.5, 1.0, 0.25), False),  # a non-finite gradient value
    ((0.5, 0.0, math.nan), False),  # a NaN loss
    ((0.5, 0.0, math.inf), False),
    ((1e39, 0.0, 0.25), False),  # a gradient norm past float32's range
    ((math.nan, 0.0, 0.25), False),
]


@pytest.mark.parametrize(("gate", "updates"), GATES)
@pytest.mark.parametrize("fused", [True, False])
def test_accumulate_gate_decides_on_the_device(cuda_ext, monkeypatch, gate, updates, fused):
    # The kernel and the PyTorch path read the gate as Adam's kernel does.
    from gsnb.train.strategy import default

    gen = torch.Generator(device="cuda").manual_seed(3)
    grads = torch.randn(2, 3000, 2, generator=gen, device="cuda") * 1e-4
    radii = torch.randint(-1, 3, (2, 3000, 2), generator=gen, device="cuda", dtype=torch.int32)
    means2d = torch.zeros(2, 3000, 2, device="cuda", requires_grad=True)
    means2d.grad = grads
    info = {"means2d": means2d, "radii": radii, "width": 64, "height": 48, "n_cameras": 2}
    params = {"means": torch.zeros(3000, 3, device="cuda")}
    if not fused:
        monkeypatch.setattr(default, "_fused", lambda *_: False)
    strategy = default.DefaultStrategy()
    gated, plain = strategy.initialize_state(1.0), strategy.initialize_state(1.0)
    strategy.accumulate(params, plain, info)
    strategy.accumulate(params, gated, info)  # the sums exist: the gate alone decides
    strategy.accumulate(
        params, gated, info | {"gate": torch.tensor(gate, dtype=torch.float64, device="cuda")}
    )
    factor = 2 if updates else 1
    assert torch.equal(gated["count"], plain["count"] * factor)
    assert rel_err(gated["grad2d"], plain["grad2d"] * factor) < 1e-6
    if not fused:
        return
    with pytest.raises(RuntimeError, match="3 values"):
        strategy.accumulate(
            params, gated, info | {"gate": torch.zeros(2, dtype=torch.float64, device="cuda")}
        )


@pytest.mark.parametrize(("gate", "updates"), GATES)
def test_adam_gate_decides_on_the_device(cuda_ext, gate, updates):
    params = splats(1000)
    twin = {k: nn.Parameter(v.detach().clone()) for k, v in params.items()}
    gated, plain = make_optimizer(params, RATES), make_optimizer(twin, RATES)
    for p, q in zip(params.values(), twin.values(), strict=True):
        p.grad = q.grad = torch.full_like(p, 0.5)
    before = {k: v.detach().clone() for k, v in params.items()}
    gated.update(torch.tensor(gate, dtype=torch.float64, device="cuda"))
    plain.update()
    for k in params:
        want = twin[k] if updates else before[k]
        assert torch.equal(params[k], want), k
        moment = gated.state[params[k]]["exp_avg"]
        assert bool((moment != 0).all()) == updates, k
    if not updates:
        gated.uncount()  # the first update, skipped: as if it had never run
        assert not any(gated.state.get(p) for p in params.values())
    counts = {k: gated.state.get(p, {}).get("step") for k, p in params.items()}
    with pytest.raises(RuntimeError, match="3 values"):
        gated.update(torch.zeros(2, dtype=torch.float64, device="cuda"))
    for k, p in params.items():  # a refused update counts nothing
        assert gated.state.get(p, {}).get("step") == counts[k], k


def test_adam_updates_only_the_leading_values_it_is_given(cuda_ext):
    # shN [N, 15, 3] at SH degree 1: the first 9 values of each row; the rest stay as they
    # are. Where their gradients and moments are zero that is the full update (to the
    # rounding of the kernel's other code path: float4 loads there, one value here).
    full, part = splats(1001, seed=4), splats(1001, seed=4)
    opt_full, opt_part = make_optimizer(full, RATES), make_optimizer(part, RATES)
    gen = torch.Generator(device="cuda").manual_seed(2)
    for _ in range(3):
        for k in full:
            g = torch.randn(full[k].shape, generator=gen, device="cuda")
            if k == "shN":
                g[:, 3:] = 0.0
            full[k].grad, part[k].grad = g, g.clone()
        assert opt_full.launch() and opt_part.launch(active={"shN": 9})
    for k in full:
        assert rel_err(part[k], full[k]) < ADAM_TOL, k
        for key in ("exp_avg", "exp_avg_sq"):
            ours, theirs = opt_part.state[part[k]][key], opt_full.state[full[k]][key]
            assert rel_err(ours, theirs) < ADAM_TOL, (k, key)
    assert torch.equal(part["shN"][:, 3:], full["shN"][:, 3:])
    assert not opt_part.state[part["shN"]]["exp_avg"][:, 3:].any()
    before = part["shN"].detach().clone()
    part["shN"].grad = torch.ones_like(part["shN"])
    for k in part:
        if k != "shN":
            part[k].grad = None
    opt_part.launch(active={"shN": 9})
    changed = (part["shN"] != before).reshape(1001, 45)
    assert changed[:, :9].float().mean() > 0.99  # a few may move by less than their rounding
    assert not changed[:, 9:].any()
