"""The kernel warm-up of gsnb train: a refine step of made-up Gaussians, nothing of a run's."""

from __future__ import annotations

import torch

from gsnb.train.warm import start_warming, warm_refine


def test_the_warm_up_clones_splits_and_prunes_without_touching_the_global_random_stream() -> None:
    before = torch.get_rng_state()
    cloned, split, pruned = warm_refine(torch.device("cpu"))
    assert cloned > 0 and split > 0 and pruned > 0  # every path of the refine step ran
    assert torch.equal(torch.get_rng_state(), before)


def test_no_thread_for_the_cpu() -> None:
    assert start_warming("cpu") is None
