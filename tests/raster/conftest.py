"""Shared settings of the renderer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Run each test on one intra-op thread.

    The test scenes are tiny: on a 2-core VM, waking OpenMP/MKL worker threads
    for tensors of a few thousand elements costs milliseconds per op (measured
    here: exp of 5000 doubles, 8 us on one thread, 6-15 ms on two).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
