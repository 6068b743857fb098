"""``check_values`` on the CUDA backend: the projection kernel flags bad values on the
device and the call raises the reference backend's error, word for word, once binning has
waited for the GPU, with no sync of its own; a render with no such wait leaves the error to
``result.check()`` or the next render of the thread. Outputs do not depend on the checks.
"""

from __future__ import annotations

import pytest
import torch

import gsnb
from gsnb.raster.scenes import orbit_cameras, random_gaussians

W, H = 64, 48


@pytest.fixture
def inputs(cuda_ext):
    """Render-ready float32 CUDA inputs (SH degree 3, two cameras) and the row of a splat
    visible in camera 0."""
    g = random_gaussians(300, sh_degree=3, seed=3, device="cuda")
    viewmats, Ks = orbit_cameras(2, W, H)
    args = g | {"viewmats": viewmats.cuda(), "Ks": Ks.cuda(), "width": W, "height": H}
    out = gsnb.render(**args, check_values=False)
    # The largest splat: visible in the antialiased mode too (its compensation is near 1).
    visible = int(out.meta.radii[0].prod(-1).argmax())
    assert (out.meta.radii[0, visible] > 0).all()
    return args, visible


def spoiled(args, name, row, value=float("nan")):
    args = dict(args)
    t = args[name].clone()
    t[row].view(-1)[0] = value
    args[name] = t
    return args


def reference_error(args, **kw) -> str:
    cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(ValueError) as info:
        kw.get("fn", gsnb.render)(**cpu, backend="reference")
    return str(info.value)


def cuda_error(fn, *args, **kw) -> str:
    """The error of the CUDA render ``fn(*args, **kw)``, raised by the call itself."""
    with pytest.raises(ValueError) as info:
        fn(*args, **kw)
    return str(info.value).replace("cuda:0", "cpu")


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("name", ["means", "quats", "scales", "opacities", "colors"])
def test_nan_is_raised_by_check_with_the_reference_message(inputs, name, mode) -> None:
    args, row = inputs
    bad = spoiled(args, name, row)
    message = cuda_error(gsnb.render, **bad, rasterize_mode=mode)
    assert message.startswith(f"{name} (shape {list(bad[name].shape)}")
    assert message == reference_error(bad)
    gsnb.render(**args).check()  # raised once: the next render is clean


@pytest.mark.parametrize("name", ["means", "quats", "scales", "opacities"])
def test_nan_in_a_culled_gaussian_is_found(inputs, name) -> None:
    args, _ = inputs
    bad = spoiled(args, name, 0)
    bad["means"] = bad["means"].clone()
    if name != "means":
        bad["means"][0] = 1e12  # out of every view
    assert "non-finite" in cuda_error(gsnb.render, **bad)


@pytest.mark.parametrize(
    ("name", "row", "value", "words"),
    [
        ("opacities", None, 1.5, "must lie in [0, 1]"),
        ("opacities", None, -0.5, "must lie in [0, 1]"),
        ("scales", None, -0.1, "must be >= 0"),
        ("Ks", 1, 0.0, "positive focal lengths"),
        ("viewmats", 1, float("inf"), "non-finite"),
        ("Ks", 0, float("nan"), "non-finite"),
    ],
)
def test_other_problems_match_the_reference(inputs, name, row, value, words) -> None:
    args, visible = inputs
    bad = spoiled(args, name, visible if row is None else row, value)
    message = cuda_error(gsnb.render, **bad)
    assert words in message and message.startswith(name)
    assert message == reference_error(bad)


def test_backgrounds_are_checked_with_and_without_gradient(inputs) -> None:
    args, _ = inputs
    for grad in (False, True):
        bg = torch.tensor([0.0, float("nan"), 0.0], device="cuda", requires_grad=grad)
        assert cuda_error(gsnb.render, **args, backgrounds=bg).startswith("backgrounds")


@pytest.mark.parametrize("name", ["means", "opacities", "sh0", "shN"])
def test_render_splats_names_the_stored_tensor(inputs, name) -> None:
    args, row = inputs
    splats = {
        "means": args["means"],
        "quats": args["quats"],
        "scales": args["scales"].log(),
        "opacities": torch.logit(args["opacities"]),
        "sh0": args["colors"][:, :1].contiguous(),
        "shN": args["colors"][:, 1:].contiguous(),
    }
    splats = spoiled(splats, name, row)
    cams = {k: args[k] for k in ("viewmats", "Ks", "width", "height")}
    message = cuda_error(gsnb.render_splats, splats, **cams)
    assert message.startswith(f"{name} (shape {list(splats[name].shape)}")
    cpu = {k: v.cpu() for k, v in splats.items()}
    with pytest.raises(ValueError) as info:
        gsnb.render_splats(cpu, args["viewmats"].cpu(), args["Ks"].cpu(), W, H, backend="reference")
    assert message == str(info.value)


def test_a_render_without_a_wait_leaves_the_error_to_check_or_the_next_render(inputs) -> None:
    # No Gaussian: binning has nothing to count and the render never waits for the GPU.
    args, _ = inputs
    empty = {k: v[:0] if k in ("means", "quats", "scales", "opacities", "colors") else v
             for k, v in args.items()}  # fmt: skip
    bad = spoiled(empty, "viewmats", 1)
    for raise_by in ("check", "next render"):
        torch.cuda._sleep(200_000_000)  # keeps the GPU busy: the flag is not known at return
        out = gsnb.render(**bad)
        assert out.problems is not None
        if raise_by == "check":
            whole = r"^viewmats .*non-finite values \(NaN or Inf\) in 1 rows$"
            with pytest.raises(ValueError, match=whole):
                out.check()
        else:
            torch.cuda.synchronize()
            with pytest.raises(ValueError, match=r"^viewmats .*non-finite.*earlier render\(\)"):
                gsnb.render(**args)
        gsnb.render(**args).check()  # reported once


def test_a_clean_default_render_does_not_sync(inputs) -> None:
    args, _ = inputs
    params = {k: v.clone().requires_grad_(True) for k, v in args.items() if k in
              ("means", "quats", "scales", "opacities", "colors")}  # fmt: skip
    call = args | params
    gsnb.render(**call).check()  # warm: pinned buffers, events
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = [gsnb.render(**call) for _ in range(3)]
        outs.append(gsnb.render(**call, rasterize_mode="antialiased"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for out in outs:
        out.check()
        assert int(out.problems.item()) == 0
    with pytest.raises(ValueError, match=r"^opacities .*\[0, 1\]"):  # checked all the same
        gsnb.render(**(call | {"opacities": call["opacities"].detach() + 1.0}))


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
@pytest.mark.parametrize("backgrounds", [None, (0.2, 0.4, 0.6)])
def test_outputs_do_not_depend_on_the_checks(inputs, mode, backgrounds) -> None:
    args, _ = inputs
    bg = None if backgrounds is None else torch.tensor(backgrounds, device="cuda")
    results = []
    for check in (True, False):
        params = {k: args[k].clone().requires_grad_(True)
                  for k in ("means", "quats", "scales", "opacities", "colors")}  # fmt: skip
        out = gsnb.render(
            **(args | params), backgrounds=bg, check_values=check, rasterize_mode=mode
        )
        (out.rgb.square().sum() + out.alpha.sum() + out.depth.sum()).backward()
        assert (out.problems is not None) == check
        outputs = [out.rgb, out.alpha, out.depth, out.meta.means2d, out.meta.radii, out.meta.depths]
        results.append((outputs, [p.grad for p in params.values()]))
    (outputs_a, grads_a), (outputs_b, grads_b) = results
    for a, b in zip(outputs_a, outputs_b, strict=True):
        assert torch.equal(a, b)  # bit for bit
    for a, b in zip(grads_a, grads_b, strict=True):
        # The backward passes sum with float atomics, in an order that varies run to run.
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
