"""Read and write Gaussians as PLY files in the layout of the original 3DGS code (INRIA).

One ``vertex`` element, binary little-endian, float32 properties in this order::

    x y z nx ny nz f_dc_0 f_dc_1 f_dc_2 f_rest_0 ... f_rest_{3(K-1)-1}
    opacity scale_0 scale_1 scale_2 rot_0 rot_1 rot_2 rot_3

``f_rest`` is channel-major (all red coefficients, then green, then blue),
``opacity`` is a logit, ``scale_*`` are log standard deviations and ``rot_*``
a quaternion ``(w, x, y, z)``: exactly :class:`gsnb.model.GaussianModel`'s
parameters, so a round trip is exact. Normals are written as zeros.

Reading also accepts files without normals (gsplat's exporter), extra
properties (editors; ignored), double-precision properties and big-endian or
ASCII files; the SH degree is inferred from the number of ``f_rest``
properties. Both directions work in chunks of rows, so a file of millions of
Gaussians costs its tensors plus one chunk, never several full copies.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from plyfile import PlyData, PlyElement, PlyElementParseError, PlyHeaderParseError, PlyProperty
from torch import Tensor

from gsnb.raster.sh import sh_degree_from_bases
from gsnb.utils.atomic import atomic_write

CHUNK_ROWS = 1 << 18
MAX_HEADER_BYTES = 1 << 20
_F_REST = re.compile(r"f_rest_(\d+)$")
# Byte sizes of PLY scalar types (both spellings), for the body-size check.
_TYPE_BYTES = {
    "char": 1, "uchar": 1, "int8": 1, "uint8": 1,
    "short": 2, "ushort": 2, "int16": 2, "uint16": 2,
    "int": 4, "uint": 4, "int32": 4, "uint32": 4, "float": 4, "float32": 4,
    "double": 8, "float64": 8,
}  # fmt: skip


def property_names(sh_degree: int, normals: bool = True) -> list[str]:
    """The vertex properties of the INRIA layout for ``sh_degree``, in file order.

    Example:
        >>> names = property_names(1)
        >>> len(names), names[:6], names[-1]
        (26, ['x', 'y', 'z', 'nx', 'ny', 'nz'], 'rot_3')
    """
    num_rest = 3 * ((sh_degree + 1) ** 2 - 1)
    return (
        ["x", "y", "z"]
        + (["nx", "ny", "nz"] if normals else [])
        + [f"f_dc_{i}" for i in range(3)]
        + [f"f_rest_{i}" for i in range(num_rest)]
        + ["opacity"]
        + [f"scale_{i}" for i in range(3)]
        + [f"rot_{i}" for i in range(4)]
    )


def write_ply(path: str | os.PathLike[str], splats: Mapping[str, Tensor]) -> None:
    """Write Gaussians to ``path`` in the INRIA PLY layout, atomically.

    Args:
        path: the ``.ply`` file to write; its folder must exist. The file
            appears only once it is complete (temporary file, then rename).
        splats: :class:`gsnb.model.GaussianModel` parameters (``model.splats``
            works): ``means [N, 3]``, ``quats [N, 4]`` (wxyz), ``scales [N, 3]``
            (log), ``opacities [N]`` (logit), ``sh0 [N, 1, 3]``,
            ``shN [N, K-1, 3]``; any device, written as float32.

    Raises:
        ValueError: a tensor is missing or has the wrong shape.
        OSError: the file cannot be written (the message names the folder).

    Example:
        >>> import tempfile, torch
        >>> from gsnb.model import GaussianModel
        >>> from gsnb.export.ply import read_ply, write_ply
        >>> model = GaussianModel.from_points(torch.rand(10, 3), torch.rand(10, 3), sh_degree=2)
        >>> out = tempfile.mkdtemp() + "/scene.ply"
        >>> write_ply(out, model.splats)
        >>> back = read_ply(out)
        >>> bool(torch.equal(back["shN"], model.splats["shN"].detach()))
        True
    """
    n, num_rest = _check_splats(splats)
    degree = sh_degree_from_bases(num_rest + 1)
    names = property_names(degree)
    element = PlyElement("vertex", [PlyProperty(name, "f4") for name in names], n)
    header = PlyData([element], byte_order="<", comments=["written by gsnb"]).header
    row = np.dtype([(name, "<f4") for name in names])
    with atomic_write(path, "wb") as handle:
        handle.write(header.encode("ascii") + b"\n")
        for start in range(0, n, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, n)
            rows = np.zeros(stop - start, dtype=row)  # normals stay 0
            for group, columns in _columns(degree).items():
                if not columns:
                    continue
                values = _chunk_numpy(splats[group], start, stop)
                for name, column in zip(columns, values.T, strict=True):
                    rows[name] = column
            handle.write(rows.view(np.uint8).data)


def read_ply(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Read Gaussians from a 3DGS PLY file into :class:`~gsnb.model.GaussianModel` parameters.

    Rows holding NaN or Inf in any used property are dropped, with one warning
    that counts them.

    Args:
        path: a PLY file written by gsnb, INRIA 3DGS, gsplat or an editor.
        device: where the returned tensors live.

    Returns:
        ``{"means": [N, 3], "quats": [N, 4], "scales": [N, 3], "opacities": [N],
        "sh0": [N, 1, 3], "shN": [N, K-1, 3]}`` float32, in the file's
        parameterisation (log scales, logit opacities, wxyz quaternions);
        ``GaussianModel(read_ply(path))`` builds a model.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a PLY file, is truncated, lacks a
            property, has a property of the wrong type, or its header claims
            more data than the file holds (checked before anything is allocated).

    Example:
        >>> import tempfile, torch
        >>> from gsnb.model import GaussianModel
        >>> out = tempfile.mkdtemp() + "/scene.ply"
        >>> write_ply(out, GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3)).splats)
        >>> GaussianModel(read_ply(out)).sh_degree
        3
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no PLY file at {path}")
    _check_body_size(path)
    try:
        ply = PlyData.read(str(path), mmap="r")
    except PlyHeaderParseError as err:
        raise ValueError(f"{path} is not a valid PLY file: {err}") from err
    except PlyElementParseError as err:
        raise ValueError(f"{path} is truncated or corrupt ({err}); export it again") from err
    if "vertex" not in ply:
        raise ValueError(f"{path} has no 'vertex' element; it does not hold Gaussians")
    vertex = ply["vertex"]
    degree = _check_properties(path, vertex)
    splats, kept = _convert(vertex, degree)
    dropped = vertex.count - kept
    if dropped:
        warnings.warn(
            f"{path}: dropped {dropped} of {vertex.count} Gaussians holding NaN or Inf values",
            stacklevel=2,
        )
    return {key: value[:kept].to(device) for key, value in splats.items()}


def _columns(degree: int) -> dict[str, list[str]]:
    """Splat tensor -> its PLY properties, in the order of the tensor's flattened row."""
    num_rest = (degree + 1) ** 2 - 1
    # shN [N, K-1, 3] flattened row-major is coefficient-major; the file is channel-major.
    rest = [f"f_rest_{c * num_rest + j}" for j in range(num_rest) for c in range(3)]
    return {
        "means": ["x", "y", "z"],
        "sh0": [f"f_dc_{i}" for i in range(3)],
        "shN": rest,
        "opacities": ["opacity"],
        "scales": [f"scale_{i}" for i in range(3)],
        "quats": [f"rot_{i}" for i in range(4)],
    }


def _check_splats(splats: Mapping[str, Tensor]) -> tuple[int, int]:
    missing = [
        key for key in ("means", "quats", "scales", "opacities", "sh0", "shN") if key not in splats
    ]
    if missing:
        raise ValueError(f"splats lack {missing}; pass GaussianModel.splats or read_ply's result")
    n = splats["means"].shape[0]
    shn = splats["shN"]
    if shn.dim() != 3 or shn.shape[2] != 3:
        raise ValueError(f"shN has shape {list(shn.shape)}; expected [{n}, K-1, 3]")
    expected = {
        "means": (n, 3), "quats": (n, 4), "scales": (n, 3), "opacities": (n,),
        "sh0": (n, 1, 3), "shN": (n, shn.shape[1], 3),
    }  # fmt: skip
    for key, shape in expected.items():
        if tuple(splats[key].shape) != shape:
            raise ValueError(f"{key} has shape {list(splats[key].shape)}; expected {list(shape)}")
    return n, shn.shape[1]


def _chunk_numpy(tensor: Tensor, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` as a float32 ``[rows, columns]`` numpy array on the CPU."""
    chunk = tensor[start:stop].detach().to("cpu", torch.float32)
    return chunk.reshape(stop - start, chunk[0].numel()).numpy()


def _check_body_size(path: Path) -> None:
    """Refuse a header whose element counts need more bytes than the file has.

    Runs before plyfile allocates anything, so a header claiming billions of
    rows cannot make the reader allocate memory for them.
    """
    with open(path, "rb") as handle:
        head = handle.read(MAX_HEADER_BYTES)
    if not head.startswith(b"ply"):
        raise ValueError(f"{path} is not a PLY file (it does not start with 'ply')")
    end = re.search(rb"end_header\r?\n", head)
    if end is None:
        raise ValueError(f"{path} has no 'end_header' line in its first {MAX_HEADER_BYTES} bytes")
    lines = head[: end.start()].decode("ascii", errors="replace").splitlines()
    ascii_format = any(line.split()[:2] == ["format", "ascii"] for line in lines)
    needed = 0
    count = 0
    for line in lines:
        words = line.split()
        if words[:1] == ["element"] and len(words) == 3 and words[2].isdigit():
            count = int(words[2])
        elif words[:1] == ["property"] and len(words) >= 3:
            # ASCII: at least one character and one separator per value; lists: their length field.
            size = 2 if ascii_format else _TYPE_BYTES.get(words[2 if words[1] == "list" else 1], 1)
            needed += count * size
    available = path.stat().st_size - end.end()
    if needed > available:
        raise ValueError(
            f"{path} is truncated: its header needs at least {needed} bytes of data but the file "
            f"holds {available}; export it again"
        )


def _check_properties(path: Path, vertex: PlyElement) -> int:
    """Check names and types of the vertex properties; returns the SH degree."""
    by_name = {prop.name: prop for prop in vertex.properties}
    rest_ids = sorted(int(m.group(1)) for name in by_name if (m := _F_REST.match(name)))
    num_rest, leftover = divmod(len(rest_ids), 3)
    try:
        degree = sh_degree_from_bases(num_rest + 1)
    except ValueError:
        leftover = 1
    if leftover or rest_ids != list(range(len(rest_ids))):
        raise ValueError(
            f"{path} has {len(rest_ids)} f_rest properties; a 3DGS file has 0, 9, 24 or 45 "
            "numbered from f_rest_0 without gaps"
        )
    needed = property_names(degree, normals=False)
    missing = [name for name in needed if name not in by_name]
    if missing:
        raise ValueError(
            f"{path} lacks the properties {missing}; a 3DGS PLY needs x y z, f_dc_0..2, "
            "opacity, scale_0..2 and rot_0..3"
        )
    for name in needed:
        prop = by_name[name]
        kind = np.dtype(prop.val_dtype).kind if type(prop) is PlyProperty else "list"
        if kind != "f":
            raise ValueError(
                f"{path}: property '{name}' is stored as {prop}; 3DGS properties must be "
                "'float' or 'double' scalars"
            )
    return degree


def _convert(vertex: PlyElement, degree: int) -> tuple[dict[str, Tensor], int]:
    """Fill float32 tensors from the vertex rows chunk by chunk; returns them and the kept count."""
    n = vertex.count
    num_rest = (degree + 1) ** 2 - 1
    out = {
        "means": torch.empty(n, 3),
        "quats": torch.empty(n, 4),
        "scales": torch.empty(n, 3),
        "opacities": torch.empty(n),
        "sh0": torch.empty(n, 1, 3),
        "shN": torch.empty(n, num_rest, 3),
    }
    flat = {key: value.view(n, len(_columns(degree)[key])).numpy() for key, value in out.items()}
    kept = 0
    for start in range(0, n, CHUNK_ROWS):
        rows = _rows(vertex.data, start, min(start + CHUNK_ROWS, n))
        chunk = {key: _stack(rows, names) for key, names in _columns(degree).items()}
        finite = np.logical_and.reduce([np.isfinite(v).all(axis=1) for v in chunk.values()])
        good = int(finite.sum())
        for key, values in chunk.items():
            flat[key][kept : kept + good] = values if good == len(finite) else values[finite]
        kept += good
    return out, kept


def _stack(rows: np.ndarray, names: list[str]) -> np.ndarray:
    """Columns ``names`` of structured ``rows`` as a ``[rows, len(names)]`` array."""
    if not names:
        return np.empty((len(rows), 0), dtype=np.float32)
    return np.stack([rows[name] for name in names], axis=1)


def _rows(data: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a vertex table; a memory map is mapped per chunk to free its pages."""
    if isinstance(data, np.memmap) and data.filename is not None:
        offset = data.offset + start * data.dtype.itemsize
        return np.memmap(data.filename, data.dtype, "r", offset, (stop - start,))
    return data[start:stop]
