"""``DefaultStrategy``: the adaptive density control of the original 3DGS paper."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gsnb import kernels
from gsnb.train.health import gate_open
from gsnb.train.knobs import knob
from gsnb.train.strategy import ops
from gsnb.train.strategy.base import Strategy
from gsnb.train.strategy.refine import clone_split_prune


@dataclass
class DefaultStrategy(Strategy):
    """Clone, split and prune (Kerbl et al. 2023) on a schedule measured on real photos.

    Every step it accumulates, per Gaussian, the norm of the screen-space
    gradient of its centre, normalised to image size as gsplat does (x times
    W/2, y times H/2), and counts the views that saw it. Every ``refine_every``
    steps between ``refine_start_iter`` and ``refine_stop_iter`` a Gaussian
    whose mean gradient exceeds ``grow_grad2d`` is cloned when small (largest
    scale at most ``grow_scale3d`` x extent) and split in two when large; then
    Gaussians with opacity below ``prune_opa`` are pruned, and once ``reset_every`` steps
    have passed also those larger than ``prune_scale3d`` x extent. With
    ``opacity_reset``, every ``reset_every`` steps all opacities are clamped to
    ``2 * prune_opa`` as 3DGS does.

    Four defaults differ from 3DGS's, each measured on the fox (``docs/quality.md``): no
    opacity reset (as gsplat 1.5.3 runs, see ``opacity_reset``), ``grow_grad2d`` 1.5e-4
    instead of 2e-4, densification until step 7,000 instead of 15,000 and the means'
    learning rate falling by ``lr_means_final`` every 10,000 steps
    (:attr:`lr_means_decay_steps`, which :class:`~gsnb.train.config.TrainConfig`'s
    ``lr_means_decay_steps = -1`` stands for) instead of once over the run. Beside 3DGS's
    schedule they read +0.07 to +0.38 dB of test PSNR at 7,000 steps (six sweeps) and +0.10
    and +0.29 dB at 30,000 (two), with about twice the Gaussians at 7,000 steps and 1.5
    times at 30,000.
    ``DefaultStrategy(**THREE_DGS_SCHEDULE)`` with ``TrainConfig(lr_means_decay_steps=0)``
    is 3DGS's schedule.

    Two refinements of gsplat's and nerfstudio's, off by default as in gsplat: before
    ``refine_scale2d_stop_iter``, a Gaussian whose screen radius in some view since the last
    refine step exceeded ``grow_scale2d`` of the image's larger side is split whatever its
    gradient, and after ``reset_every`` steps one that exceeded ``prune_scale2d`` is pruned (a
    splat that fills much of a view is too coarse for it, or floats in front of its camera); and
    ``pause_refine_after_reset`` steps after each reset pass without refinement, so that
    opacities recover before the transparent Gaussians are pruned.

    Attributes:
        prune_opa: prune Gaussians with opacity below this (default 0.005, 3DGS).
        grow_grad2d: densify Gaussians whose mean normalised screen-space gradient
            exceeds this (default 1.5e-4; 3DGS's is 2e-4; about 8e-4 suits absgrad).
        grow_scale3d: a densified Gaussian is cloned when its largest scale is at
            most this fraction of the scene extent, else split (default 0.01, 3DGS).
        prune_scale3d: after ``reset_every`` steps, prune Gaussians larger than
            this fraction of the scene extent (default 0.1, 3DGS).
        refine_start_iter: first step that may densify (default 500, 3DGS).
        refine_stop_iter: no densification, pruning or reset from this step on
            (default 7000; 3DGS's is 15000: at 30,000 steps on the fox, 7,000 read 0.28 dB
            higher, standard error 0.18, 9 runs a side).
        refine_every: densify and prune every this many steps (default 100, 3DGS).
        reset_every: the period of opacity resets, with ``opacity_reset`` (default 3000,
            3DGS). With or without them, the large Gaussians are pruned after this many
            steps.
        absgrad: accumulate the sum of absolute per-pixel gradients instead
            (AbsGS, Ye et al. 2024; raise ``grow_grad2d`` to about 8e-4) (default False).
        revised_opacity: give split children ``1 - sqrt(1 - opacity)`` so the pair
            keeps the parent's opacity (Bulò et al. 2024) (default True; gsplat's default is
            False: on the fox at 7,000 steps it measured +0.17 dB of test PSNR (standard error
            0.07), see
            ``benchmarks/results/quality_revised_opacity_7000_h200.json``).
        opacity_reset: clamp opacities every ``reset_every`` steps (default False; 3DGS
            resets). Without resets the rest of the schedule stays (large Gaussians are
            still pruned after ``reset_every`` steps): gsplat 1.5.3's DefaultStrategy never
            resets either, because its reset test reads ``step % reset_every == 0 & step >
            0``, which is always false.
        pixel_weighted: average the gradient over the views weighted by the splat's screen
            extent there (the product of its radii), not by view count, so that a large splat
            seen with small gradients over many pixels grows too (Pixel-GS, Zhang et al. 2024)
            (default False).
        error_densify: grow the Gaussians by their share of the views' error instead of
            their screen-space gradient (Bulò et al. 2024): a Gaussian densifies when,
            in some view since the last refine step, the sum over the pixels of its blending
            weight times the pixel's mean absolute error, divided by the view's pixel
            count, exceeds ``grow_error``; a blurry splat over fine texture, whose pixels'
            gradients cancel at its centre, grows too. The fused GPU step gathers the shares
            in its backward pass; other steps render the view again
            (:mod:`gsnb.train.error_shares`). One view a step (batch size 1, one process)
            (default False).
        grow_error: the share of a view's error above which ``error_densify`` grows a
            Gaussian (default 5e-6).
        cap_max: the most Gaussians densification grows to: when more Gaussians pass the
            threshold than there is room for, those of the highest mean gradient (with
            ``error_densify``: share of the error) grow, as Bulò et al. 2024 bound their
            growth (default 0: no cap).
        grow_scale2d: before ``refine_scale2d_stop_iter``, split Gaussians whose screen
            radius in some view since the last refine step exceeded this fraction of the
            image's larger side, whatever their gradient (default 0.05, gsplat's).
        prune_scale2d: before ``refine_scale2d_stop_iter`` and after ``reset_every`` steps,
            prune Gaussians whose screen radius in some view since the last refine step
            exceeded this fraction of the image's larger side (default 0.15, gsplat's).
        refine_scale2d_stop_iter: refine by screen size (``grow_scale2d``,
            ``prune_scale2d``) before this step (default 0: never, as gsplat; nerfstudio's
            splatfacto uses 4000).
        pause_refine_after_reset: no clone, split or prune for this many steps after each
            opacity reset, the reset step included (default 0, gsplat's; splatfacto uses the
            number of training views plus ``refine_every``). Only with ``opacity_reset``.

    Example:
        >>> from gsnb.train.strategy import DefaultStrategy
        >>> s = DefaultStrategy(grow_grad2d=3e-4)
        >>> s.initialize_state(scene_scale=2.0)
        {'scene_scale': 2.0, 'grad2d': None, 'count': None, 'radii': None}
    """

    name: ClassVar[str] = "default"
    ORDERED: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("refine_start_iter", "<=", "refine_stop_iter"),
        ("refine_every", "<", "reset_every"),
        ("pause_refine_after_reset", "<", "reset_every"),
    )
    init_opacity: ClassVar[float] = 0.1
    init_scale: ClassVar[float] = 1.0
    lr_means_decay_steps: ClassVar[int] = 10_000

    prune_opa: float = knob(0.005, low=0.0, high=1.0, log=True)
    grow_grad2d: float = knob(1.5e-4, low=0.0, high=1.0, log=True)
    grow_scale3d: float = knob(0.01, low=0.0, high=10.0, log=True)
    prune_scale3d: float = knob(0.1, low=0.0, high=100.0, log=True)
    refine_start_iter: int = knob(500, low=0)
    refine_stop_iter: int = knob(7000, low=0)
    refine_every: int = knob(100, low=1)
    reset_every: int = knob(3000, low=1)
    absgrad: bool = knob(False)
    revised_opacity: bool = knob(True)
    opacity_reset: bool = knob(False)
    pixel_weighted: bool = knob(False)
    error_densify: bool = knob(False)
    grow_error: float = knob(5e-6, low=0.0, high=1.0, log=True)
    cap_max: int = knob(0, low=0)
    grow_scale2d: float = knob(0.05, low=0.0, high=10.0, log=True)
    prune_scale2d: float = knob(0.15, low=0.0, high=10.0, log=True)
    refine_scale2d_stop_iter: int = knob(0, low=0)
    pause_refine_after_reset: int = knob(0, low=0)

    def initialize_state(self, scene_scale: float) -> dict[str, Any]:
        """``scene_scale`` and the running sums ``grad2d [N]``, ``count [N]`` (made lazily;
        with ``error_densify`` also ``error [N]``, each Gaussian's largest share of a view's
        error since the last refine step; while refining by screen size ``radii [N]``, its
        largest screen radius since then over the image's larger side)."""
        return {"scene_scale": float(scene_scale), "grad2d": None, "count": None, "radii": None}

    def step_post_backward(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer,
        state: dict[str, Any],
        step: int,
        info: dict[str, Any],
        lr_means: float,
        generator: torch.Generator | None = None,
    ) -> dict[str, int]:
        """Accumulate gradients; clone, split and prune at refine steps; reset opacities."""
        counts = {"cloned": 0, "split": 0, "pruned": 0, "reset": 0}
        if step >= self.refine_stop_iter:
            return counts
        screen = step < self.refine_scale2d_stop_iter
        self.accumulate(params, state, info, screen=screen)
        if self.refines_at(step):
            _running_sums(params, state, screen)
            group = info.get("process_group")
            if group is not None:  # every process decides on the same sums
                group.sum_(state["grad2d"], state["count"])
                if screen:
                    group.max_(state["radii"])
            cloned, split, pruned = self.refine(params, optimizer, state, step, generator)
            counts |= {"cloned": cloned, "split": split, "pruned": pruned}
            for key in ("grad2d", "count", "error", "radii"):
                if state.get(key) is not None:
                    state[key].zero_()
        if self.resets_at(step):
            ops.reset_opacity(params, optimizer, self.prune_opa * 2.0)
            counts["reset"] = 1
        return counts

    def needs_error(self, step: int) -> bool:
        """Whether ``step``'s ``info`` must hold ``error``, each Gaussian's share of the
        view's error (:func:`gsnb.train.error_shares.error_shares`, in pixels).

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy
            >>> on = DefaultStrategy(error_densify=True)
            >>> DefaultStrategy().needs_error(600), on.needs_error(600), on.needs_error(15_000)
            (False, True, False)
        """
        return self.error_densify and step < self.refine_stop_iter

    def densifies_at(self, step: int) -> bool:
        """Whether ``step`` clones, splits, prunes or resets (see :meth:`step_post_backward`).

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy
            >>> [DefaultStrategy().densifies_at(s) for s in (100, 600, 3000, 20000)]
            [False, True, True, False]
        """
        return self.refines_at(step) or self.resets_at(step)

    def refines_at(self, step: int) -> bool:
        """Whether ``step`` clones, splits and prunes: every ``refine_every`` steps after
        ``refine_start_iter`` and before ``refine_stop_iter``, except within
        ``pause_refine_after_reset`` steps of an opacity reset.

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy
            >>> paused = DefaultStrategy(pause_refine_after_reset=200, opacity_reset=True)
            >>> [paused.refines_at(s) for s in (2900, 3000, 3100, 3200)]
            [True, False, False, True]
            >>> DefaultStrategy().refines_at(3000), DefaultStrategy().refines_at(500)
            (True, False)
        """
        if step >= self.refine_stop_iter:
            return False
        if not (step > self.refine_start_iter and step % self.refine_every == 0):
            return False
        last_reset = step - step % self.reset_every
        paused = step - last_reset < self.pause_refine_after_reset
        return not (paused and self.resets_at(last_reset))

    def gates_at(self, step: int) -> bool:
        """Whether ``step`` only accumulates (gated by ``info["gate"]``: see
        :meth:`Strategy.gates_at`), so that the trainer may run it before it reads the
        step's numbers back.

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy
            >>> [DefaultStrategy().gates_at(s) for s in (100, 600, 20000)]
            [True, False, True]
        """
        return not self.densifies_at(step)

    def resets_at(self, step: int) -> bool:
        """Whether ``step`` clamps the opacities (before ``refine_stop_iter``).

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy
            >>> reset, kept = DefaultStrategy(opacity_reset=True), DefaultStrategy()
            >>> reset.resets_at(3000), kept.resets_at(3000), kept.densifies_at(3000)
            (True, False, True)
        """
        if not self.opacity_reset or step >= self.refine_stop_iter:
            return False
        return step > 0 and step % self.reset_every == 0

    @torch.no_grad()
    def accumulate(
        self,
        params: MutableMapping[str, nn.Parameter],
        state: dict,
        info: dict,
        screen: bool = False,
    ) -> None:
        """Add this step's normalised screen-space gradient norms to ``grad2d`` (no host sync);
        with ``screen``, also keep each Gaussian's largest screen radius in ``radii``.

        ``info["groups"]`` (views of several sizes in one step) adds each group's;
        ``info["gate"]`` (:meth:`Strategy.gates_at`) adds nothing on a step it closes.
        """
        if "groups" in info:
            for group in info["groups"]:
                self.accumulate(params, state, group | {"gate": info.get("gate")}, screen)
            return
        if self.error_densify:
            self._keep_error(params, state, info)
        grads = info.get("absgrad") if self.absgrad else info["means2d"].grad
        if grads is None:
            if self.absgrad:
                raise RuntimeError(
                    "absgrad=True needs a renderer that fills meta.absgrad; this one does not"
                )
            return  # nothing was visible, so no Gaussian received a gradient
        _running_sums(params, state, screen)
        cams, radii = info["n_cameras"], info["radii"]
        sx, sy = info["width"] / 2.0 * cams, info["height"] / 2.0 * cams
        gate = info.get("gate")
        if screen:
            _keep_radii(state["radii"], radii, max(info["width"], info["height"]), gate)
        if (
            not self.pixel_weighted
            and _fused(grads, radii)
            and (gate is None or gate.device == grads.device)
        ):
            kernels.accumulate_grad2d(
                grads=grads, radii=radii, sx=sx, sy=sy, grad2d=state["grad2d"],
                count=state["count"], gate=gate,
            )  # fmt: skip
            return
        norm = grads.new_tensor([sx, sy])
        visible = (radii > 0).all(-1)  # [C, N]
        if gate is not None:
            visible = visible & gate_open(gate).to(visible.device)
        # A view counts once, or (pixel_weighted) by the pixels the splat covers there.
        weight = visible.to(grads.dtype)
        if self.pixel_weighted:
            weight = weight * radii.to(grads.dtype).prod(-1)
        grad = (grads * norm).norm(dim=-1)
        state["grad2d"] += torch.where(visible, weight * grad, 0.0).sum(0)
        state["count"] += weight.sum(0)

    @staticmethod
    def _keep_error(params: MutableMapping[str, nn.Parameter], state: dict, info: dict) -> None:
        """Keep in ``state["error"] [N]`` each Gaussian's largest share of a view's error
        (nothing from a step ``info["gate"]`` closes)."""
        shares = info.get("error")
        if shares is None:
            raise RuntimeError(
                "error_densify needs each Gaussian's share of the view's error, which a step "
                "of one view in one process gives: train with batch_size 1 and one process, "
                "or turn error_densify off"
            )
        n = params["means"].shape[0]
        if shares.shape != (n,):
            raise ValueError(f"info['error'] must be [N] = [{n}], got {tuple(shares.shape)}")
        shares = shares / float(info["width"] * info["height"])
        gate = info.get("gate")
        if gate is not None:
            shares = torch.where(gate_open(gate).to(shares.device), shares, 0.0)
        kept = state.get("error")
        if kept is None or kept.shape != shares.shape:
            state["error"] = shares.clone()
        else:
            torch.maximum(kept, shares, out=kept)

    @torch.no_grad()
    def refine(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer | None,
        state: dict,
        step: int,
        generator: torch.Generator | None = None,
    ) -> tuple[int, int, int]:
        """Clone small and split large Gaussians of high mean gradient (with
        ``error_densify``: of a large share of a view's error), then prune the
        transparent (after ``reset_every`` steps also the too large) ones, the children
        included; returns ``(cloned, split, pruned)``. Every tensor is rebuilt once
        (:func:`gsnb.train.strategy.refine.clone_split_prune`)."""
        if self.error_densify:  # accumulate kept this step's shares, so they exist
            score, threshold = state["error"], self.grow_error
        else:
            score, threshold = state["grad2d"] / state["count"].clamp_min(1), self.grow_grad2d
        high = score > threshold
        # By screen size: the largest radius since the last refine step, over the image side.
        screen = state.get("radii") if step < self.refine_scale2d_stop_iter else None
        wide = torch.zeros_like(high) if screen is None else screen > self.grow_scale2d
        prune = None
        if screen is not None and step > self.reset_every:  # these go, and grow no more
            prune = screen > self.prune_scale2d
            high, wide = high & ~prune, wide & ~prune
        if self.cap_max:  # the splats too wide on screen first, then by score
            ranked = torch.where(wide, torch.inf, score)
            high = within_cap(high | wide, ranked, self.cap_max - params["means"].shape[0])
            wide = wide & high
        high = high | wide
        small = torch.exp(params["scales"]).amax(-1) <= self.grow_scale3d * state["scene_scale"]
        small = small & ~wide
        too_big = self.prune_scale3d * state["scene_scale"]

        def doomed(opacities: Tensor, scales: Tensor) -> Tensor:
            out = torch.sigmoid(opacities) < self.prune_opa
            if step > self.reset_every:
                out |= torch.exp(scales).amax(-1) > too_big
            return out

        return clone_split_prune(
            params, optimizer, state, high & small, high & ~small, doomed, generator,
            revised_opacity=self.revised_opacity, prune=prune,
        )  # fmt: skip


THREE_DGS_SCHEDULE: dict[str, Any] = {
    "opacity_reset": True,
    "grow_grad2d": 2e-4,
    "refine_stop_iter": 15_000,
}
"""The :class:`DefaultStrategy` settings of 3DGS's schedule, where today's defaults differ
(with ``TrainConfig(lr_means_decay_steps=0)``), and the defaults until 2026-12-05.

Example:
    >>> DefaultStrategy(**THREE_DGS_SCHEDULE).resets_at(3000)
    True
"""


def within_cap(grow: Tensor, score: Tensor, room: int) -> Tensor:
    """``grow [N]`` (bool) limited to the ``room`` Gaussians of highest ``score [N]`` among
    those it holds: each clone or split adds one Gaussian.

    Example:
        >>> import torch
        >>> grow = torch.tensor([True, True, False, True])
        >>> score = torch.tensor([3.0, 1.0, 9.0, 2.0])
        >>> within_cap(grow, score, 2).tolist(), within_cap(grow, score, 0).tolist()
        ([True, False, False, True], [False, False, False, False])
    """
    if int(grow.sum()) <= room:  # a refine step synchronises anyway
        return grow
    out = torch.zeros_like(grow)
    if room > 0:
        ranked = torch.where(grow, score, torch.full_like(score, -torch.inf))
        out[torch.topk(ranked, room).indices] = True
    return out


def _fused(grads: Tensor, radii: Tensor) -> bool:
    """Whether the one-launch ``accumulate`` of ``csrc/densify.cu`` takes these tensors."""
    if radii.dtype != torch.int32 or not radii.is_contiguous() or radii.shape != grads.shape:
        return False
    return radii.device == grads.device and kernels.applies("accumulate_grad2d", grads)


def _running_sums(
    params: MutableMapping[str, nn.Parameter], state: dict, screen: bool = False
) -> None:
    """Create ``grad2d`` and ``count`` (and with ``screen``, ``radii``) as zeros when missing
    or not sized for the Gaussians."""
    means = params["means"]
    n = means.shape[0]
    if state["grad2d"] is None or state["grad2d"].shape[0] != n:
        state["grad2d"] = means.new_zeros(n)
        state["count"] = means.new_zeros(n)
    if screen and (state.get("radii") is None or state["radii"].shape[0] != n):
        state["radii"] = means.new_zeros(n)


def _keep_radii(kept: Tensor, radii: Tensor, side: int, gate: Tensor | None) -> None:
    """Raise ``kept [N]`` in place to each Gaussian's largest screen radius in ``radii
    [C, N, 2]`` (pixels) over ``side``, the image's larger side; the views where it is not
    visible, and a step ``gate`` closes, count as zero.

    Example:
        >>> import torch
        >>> kept = torch.tensor([0.5, 0.0, 0.0])
        >>> radii = torch.tensor([[[4, 8], [0, 30], [20, 10]]], dtype=torch.int32)
        >>> _keep_radii(kept, radii, 80, None)  # the second is not visible
        >>> kept.tolist()
        [0.5, 0.0, 0.25]
    """
    visible = (radii > 0).all(-1)  # [C, N]
    if gate is not None:
        visible = visible & gate_open(gate).to(visible.device)
    largest = torch.where(visible, radii.amax(-1).to(kept.dtype), 0.0).amax(0) / float(side)
    torch.maximum(kept, largest, out=kept)
