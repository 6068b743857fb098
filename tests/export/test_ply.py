"""Tests for gsnb/export/ply.py: INRIA layout, other writers' files, bad files."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.lib.recfunctions import repack_fields
from plyfile import PlyData, PlyElement

from gsnb.export import ply as ply_module
from gsnb.export.ply import read_ply, write_ply
from gsnb.model import GaussianModel

from .conftest import random_splats

# The vertex properties of INRIA 3DGS for SH degree 1, spelled out as its code writes them.
INRIA_DEGREE_1 = (
    "x y z nx ny nz f_dc_0 f_dc_1 f_dc_2 " + " ".join(f"f_rest_{i}" for i in range(9))
    + " opacity scale_0 scale_1 scale_2 rot_0 rot_1 rot_2 rot_3"
).split()  # fmt: skip


def _independent_rows(splats, normals=True, extra=(), dtype="<f4"):
    """A structured array in the INRIA layout, built from the layout's definition alone."""
    n, rest = splats["means"].shape[0], splats["shN"].shape[1]
    columns = {"x": splats["means"][:, 0], "y": splats["means"][:, 1], "z": splats["means"][:, 2]}
    if normals:
        columns |= {name: torch.zeros(n) for name in ("nx", "ny", "nz")}
    columns |= {f"f_dc_{c}": splats["sh0"][:, 0, c] for c in range(3)}
    # INRIA: features_rest [N, K-1, 3] -> transpose(1, 2) -> flatten: channel c, coefficient j.
    columns |= {
        f"f_rest_{c * rest + j}": splats["shN"][:, j, c] for c in range(3) for j in range(rest)
    }
    columns |= {"opacity": splats["opacities"]}
    columns |= {f"scale_{i}": splats["scales"][:, i] for i in range(3)}
    columns |= {f"rot_{i}": splats["quats"][:, i] for i in range(4)}
    names = list(columns)
    fields = [(name, dtype) for name in names] + [(name, kind) for name, kind, _ in extra]
    rows = np.empty(n, dtype=fields)
    for name in names:
        rows[name] = columns[name].numpy()
    for name, _, values in extra:
        rows[name] = values
    return rows


def _write_plyfile(path, rows, text=False, byte_order="<"):
    PlyData([PlyElement.describe(rows, "vertex")], text=text, byte_order=byte_order).write(
        str(path)
    )


def _assert_same(read, splats, exact=True):
    for key, value in splats.items():
        assert read[key].shape == value.shape, key
        if exact:
            assert torch.equal(read[key], value), key
        else:
            torch.testing.assert_close(read[key], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_round_trip_is_exact(tmp_path, degree):
    splats = random_splats(257, degree, seed=degree)
    write_ply(tmp_path / "scene.ply", splats)
    read = read_ply(tmp_path / "scene.ply")
    _assert_same(read, splats)
    assert GaussianModel(read).sh_degree == degree


def test_written_file_has_the_inria_header(tmp_path):
    write_ply(tmp_path / "scene.ply", random_splats(5, 1))
    data = PlyData.read(str(tmp_path / "scene.ply"))
    assert data.byte_order == "<" and not data.text
    assert [p.name for p in data["vertex"].properties] == INRIA_DEGREE_1
    assert {p.val_dtype for p in data["vertex"].properties} == {"f4"}
    assert not np.any([data["vertex"][n] for n in ("nx", "ny", "nz")])


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_reads_a_file_in_the_inria_layout(tmp_path, degree):
    splats = random_splats(40, degree, seed=10 + degree)
    _write_plyfile(tmp_path / "inria.ply", _independent_rows(splats))
    _assert_same(read_ply(tmp_path / "inria.ply"), splats)


def test_our_file_matches_the_independent_writer_byte_for_byte(tmp_path):
    splats = random_splats(33, 3, seed=4)
    write_ply(tmp_path / "ours.ply", splats)
    _write_plyfile(tmp_path / "theirs.ply", _independent_rows(splats))
    ours, theirs = (tmp_path / "ours.ply").read_bytes(), (tmp_path / "theirs.ply").read_bytes()
    body = 33 * 62 * 4  # 62 float32 per row at SH degree 3
    assert ours[-body:] == theirs[-body:]


def test_reads_normals_free_file_with_extra_properties(tmp_path):
    splats = random_splats(25, 2, seed=5)
    extra = [("red", "u1", np.arange(25) % 256), ("confidence", "<f4", np.linspace(0, 1, 25))]
    _write_plyfile(tmp_path / "gsplat.ply", _independent_rows(splats, normals=False, extra=extra))
    _assert_same(read_ply(tmp_path / "gsplat.ply"), splats)


def test_reads_double_big_endian_and_ascii_files(tmp_path):
    splats = random_splats(12, 1, seed=6)
    _write_plyfile(tmp_path / "double.ply", _independent_rows(splats, dtype=">f8"), byte_order=">")
    _assert_same(read_ply(tmp_path / "double.ply"), splats)
    _write_plyfile(tmp_path / "ascii.ply", _independent_rows(splats), text=True)
    _assert_same(read_ply(tmp_path / "ascii.ply"), splats, exact=False)


def test_drops_rows_with_nan_or_inf_with_one_counting_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(ply_module, "CHUNK_ROWS", 7)  # the bad rows straddle chunk borders
    splats = random_splats(30, 1, seed=7)
    splats["means"][3, 1] = float("nan")
    splats["shN"][13, 2, 0] = float("inf")
    splats["opacities"][14] = float("-inf")
    write_ply(tmp_path / "scene.ply", splats)
    with pytest.warns(UserWarning, match="dropped 3 of 30 Gaussians") as record:
        read = read_ply(tmp_path / "scene.ply")
    assert len(record) == 1
    keep = torch.ones(30, dtype=torch.bool)
    keep[[3, 13, 14]] = False
    _assert_same(read, {key: value[keep] for key, value in splats.items()})


def test_chunked_read_and_write_match_a_single_chunk(tmp_path, monkeypatch):
    splats = random_splats(50, 3, seed=8)
    write_ply(tmp_path / "one.ply", splats)
    monkeypatch.setattr(ply_module, "CHUNK_ROWS", 16)
    write_ply(tmp_path / "many.ply", splats)
    assert (tmp_path / "one.ply").read_bytes() == (tmp_path / "many.ply").read_bytes()
    _assert_same(read_ply(tmp_path / "one.ply"), splats)


def test_truncated_file_is_refused(tmp_path):
    write_ply(tmp_path / "scene.ply", random_splats(20, 1))
    data = (tmp_path / "scene.ply").read_bytes()
    (tmp_path / "cut.ply").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        read_ply(tmp_path / "cut.ply")


def test_header_claiming_huge_count_is_refused_before_allocating(tmp_path):
    write_ply(tmp_path / "scene.ply", random_splats(3, 0))
    data = (
        (tmp_path / "scene.ply")
        .read_bytes()
        .replace(b"element vertex 3", b"element vertex 900000000000")
    )
    (tmp_path / "huge.ply").write_bytes(data)
    with pytest.raises(ValueError, match=r"truncated: its header needs at least \d+ bytes"):
        read_ply(tmp_path / "huge.ply")
    text = data.replace(b"binary_little_endian", b"ascii")
    (tmp_path / "huge_ascii.ply").write_bytes(text)
    with pytest.raises(ValueError, match="truncated"):
        read_ply(tmp_path / "huge_ascii.ply")


@pytest.mark.parametrize(
    ("degree", "dropped", "message"),
    [
        (0, "rot_3", r"lacks the properties \['rot_3'\]"),
        (2, "x", r"lacks the properties \['x'\]"),
        (1, "f_rest_8", "has 8 f_rest properties"),
        (1, "f_rest_0", "has 8 f_rest properties"),
    ],
)
def test_missing_property_is_named(tmp_path, degree, dropped, message):
    rows = _independent_rows(random_splats(4, degree))
    names = [n for n in rows.dtype.names if n != dropped]
    _write_plyfile(tmp_path / "incomplete.ply", repack_fields(rows[names]))
    with pytest.raises(ValueError, match=message):
        read_ply(tmp_path / "incomplete.ply")


def test_wrong_property_type_is_named(tmp_path):
    splats = random_splats(4, 0)
    rows = _independent_rows(splats)
    fields = [(n, "u1" if n == "opacity" else "<f4") for n in rows.dtype.names]
    _write_plyfile(tmp_path / "uchar.ply", rows.astype(fields))
    with pytest.raises(ValueError, match="property 'opacity' is stored as property uchar opacity"):
        read_ply(tmp_path / "uchar.ply")


def test_not_a_ply_file(tmp_path):
    (tmp_path / "notes.ply").write_text("hello\n")
    with pytest.raises(ValueError, match="not a PLY file"):
        read_ply(tmp_path / "notes.ply")
    with pytest.raises(FileNotFoundError, match="no PLY file"):
        read_ply(tmp_path / "absent.ply")


def test_no_vertex_element(tmp_path):
    rows = np.zeros(2, dtype=[("x", "<f4")])
    PlyData([PlyElement.describe(rows, "face")]).write(str(tmp_path / "faces.ply"))
    with pytest.raises(ValueError, match="no 'vertex' element"):
        read_ply(tmp_path / "faces.ply")


def test_unwritable_path_gives_clear_error_and_no_partial_file(tmp_path):
    splats = random_splats(10, 0)
    with pytest.raises(OSError, match="does not exist"):
        write_ply(tmp_path / "missing" / "scene.ply", splats)
    (tmp_path / "folder.ply").mkdir()
    with pytest.raises(OSError):
        write_ply(tmp_path / "folder.ply", splats)
    assert sorted(os.listdir(tmp_path)) == ["folder.ply"]
    assert os.listdir(tmp_path / "folder.ply") == []


def test_failed_write_keeps_the_old_file(tmp_path):
    write_ply(tmp_path / "scene.ply", random_splats(10, 0))
    before = (tmp_path / "scene.ply").read_bytes()
    bad = random_splats(10, 0) | {"quats": torch.zeros(10, 3)}
    with pytest.raises(ValueError, match=r"quats has shape \[10, 3\]; expected \[10, 4\]"):
        write_ply(tmp_path / "scene.ply", bad)
    assert (tmp_path / "scene.ply").read_bytes() == before
    assert [p.name for p in Path(tmp_path).iterdir()] == ["scene.ply"]


def test_writes_model_parameters_that_require_grad(tmp_path):
    model = GaussianModel(random_splats(8, 2))
    write_ply(tmp_path / "model.ply", model.splats)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read = read_ply(tmp_path / "model.ply")
    _assert_same(read, {k: v.detach() for k, v in model.splats.items()})


def test_empty_scene_round_trips(tmp_path):
    write_ply(tmp_path / "empty.ply", random_splats(0, 2))
    read = read_ply(tmp_path / "empty.ply")
    assert read["means"].shape == (0, 3) and read["shN"].shape == (0, 8, 3)
