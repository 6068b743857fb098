"""Files of tensors read as data, with the memory a copy of them takes bounded by the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gsnb.utils.tensor_file import MalformedTensorFile, load_tensor_file, overlapping_tensor


def test_dense_tensors_and_views_within_their_storage_load(tmp_path: Path) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    rows, turned = torch.arange(8.0).reshape(2, 4)[1:], torch.ones(3, 2).t()
    every_other = torch.arange(6.0)[::2]
    payload = {"a": base, "b": [rows, turned], "c": (every_other, 5), "d": "text"}
    payload["e"] = [torch.zeros(0), torch.tensor(3), torch.ones(2, dtype=torch.bool)]
    torch.save(payload, tmp_path / "ok.pt")
    back = load_tensor_file(tmp_path / "ok.pt")
    assert torch.equal(back["a"], base) and torch.equal(back["b"][0], rows)
    assert torch.equal(back["b"][1], turned) and torch.equal(back["c"][0], every_other)
    assert back["c"][1] == 5 and back["d"] == "text" and back["e"][1].item() == 3


@pytest.mark.parametrize(
    ("tensor", "where"),
    [
        (torch.zeros(1).expand(10_000_000, 3), "['splats']['means']"),  # stride 0: 4 bytes
        (torch.zeros(8191).as_strided((4096, 4096), (1, 1)), "['splats']['means']"),  # overlap
        (torch.zeros(2, 2).to_sparse(), "['splats']['means']"),  # not a dense tensor
    ],
)
def test_tensors_that_repeat_their_storage_are_refused_before_any_copy(
    tmp_path: Path, tensor: torch.Tensor, where: str
) -> None:
    torch.save({"splats": {"means": tensor}}, tmp_path / "bad.pt")
    assert overlapping_tensor(torch.load(tmp_path / "bad.pt", weights_only=True)) == where
    with pytest.raises(MalformedTensorFile, match=r"bad\.pt is malformed: the tensor at"):
        load_tensor_file(tmp_path / "bad.pt")


def test_many_tensors_reading_one_stored_block_are_refused(tmp_path: Path) -> None:
    # each passes alone; moved one by one they would take 2,000 times the file's bytes
    block = torch.zeros(10_000)
    torch.save({"state": [block] * 2000}, tmp_path / "shared.pt")
    with pytest.raises(MalformedTensorFile, match=r"read the same stored bytes more than once"):
        load_tensor_file(tmp_path / "shared.pt", map_location="cpu")
    torch.save({"parts": list(block.split(2500))}, tmp_path / "parts.pt")  # disjoint views
    assert len(load_tensor_file(tmp_path / "parts.pt")["parts"]) == 4


def test_deeply_nested_payloads_are_refused() -> None:
    payload: list = []
    for _ in range(80):
        payload = [payload]
    assert overlapping_tensor(payload) is not None
    assert overlapping_tensor([[[torch.zeros(2)]]]) is None


def test_the_docstring_examples_run() -> None:
    import doctest

    import gsnb.utils.tensor_file as module

    result = doctest.testmod(module)
    assert result.attempted >= 4 and result.failed == 0
