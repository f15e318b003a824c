"""Write the zTensor fixtures in ``tests/ztensor/fixtures/`` with the reference package.

Run from the repository root (needs ``ztensor==1.0.1``)::

    .venv/bin/python tests/ztensor/make_fixtures.py

:func:`expected` defines every tensor the fixtures hold; the tests import it (without the
reference package) and compare what tensorfile reads against it. Everything is built from
fixed values and seeded generators, so running the script again writes the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MAX_SIZE = 4096
COMPRESSED = {("zstd.zt", "weights")}
"""(file, tensor) pairs the reference writes with ``compress=True``."""


def _csr(dense: np.ndarray[Any, Any]) -> dict[str, Any]:
    rows, cols = np.nonzero(dense)
    indptr = np.zeros(dense.shape[0] + 1, np.uint64)
    np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
    return {
        "format": "sparse_csr",
        "values": dense[rows, cols],
        "indices": cols.astype(np.uint64),
        "indptr": indptr,
        "shape": dense.shape,
        "dense": dense,
    }


def _coo(dense: np.ndarray[Any, Any]) -> dict[str, Any]:
    nz = np.nonzero(dense)
    return {
        "format": "sparse_coo",
        "values": dense[nz],
        "coords": np.array(nz, dtype=np.uint64).reshape(dense.ndim, -1),
        "shape": dense.shape,
        "dense": dense,
    }


def expected() -> dict[str, dict[str, Any]]:
    """file name -> tensor name -> a numpy array (dense) or a dict describing a sparse tensor
    (``format``, ``values``, ``indices``/``indptr`` or ``coords``, ``shape``, ``dense``)."""
    rng = np.random.default_rng(20240115)
    dense = {
        "f32": (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 4,
        "f16": np.array([0.0, -1.5, 65504.0, 6.1e-05, np.inf], np.float16),
        "f64": np.array([[np.pi, -np.e], [1e300, -0.0]], np.float64),
        "bf16": np.array([1.0, -2.5, 3.140625, 0.0078125, -65280.0, np.inf], ml_dtypes.bfloat16),
        "bool": np.array([[True, False, True], [False, False, True]]),
        "i8": np.array([-128, -1, 0, 1, 127], np.int8),
        "i16": np.array([-32768, -2, 300, 32767], np.int16),
        "i32": rng.integers(-(2**31), 2**31, size=(2, 3), dtype=np.int32),
        "i64": np.array([-(2**63), -1, 2**40, 2**63 - 1], np.int64),
        "u8": np.arange(250, 256, dtype=np.uint8),
        "u16": np.array([0, 1, 65535], np.uint16),
        "u32": np.array([0, 2**31, 2**32 - 1], np.uint32),
        "u64": np.array([0, 2**63, 2**64 - 1], np.uint64),
    }
    weights = np.tile(np.arange(8, dtype=np.float32) / 8, 64).reshape(16, 32)
    adjacency = np.where(rng.random((6, 7)) < 0.3, rng.standard_normal((6, 7)), 0.0)
    embeddings = np.where(rng.random((5, 8)) < 0.25, rng.integers(1, 100, (5, 8)), 0)
    cube = np.zeros((3, 4, 5), np.float16)
    cube[0, 1, 2], cube[2, 3, 4], cube[1, 0, 0] = 1.5, -2.0, 0.25
    return {
        "dense.zt": dense,
        "zstd.zt": {"weights": weights, "bias": np.array([0.5, -0.5], np.float32)},
        "csr.zt": {"adjacency": _csr(adjacency.astype(np.float32))},
        "coo.zt": {"embeddings": _coo(embeddings.astype(np.int32)), "cube": _coo(cube)},
        "empty.zt": {
            "empty": np.zeros((0, 4), np.float32),
            "empty_csr": _csr(np.zeros((3, 2), np.float64)),
        },
    }


def write(folder: Path) -> list[Path]:
    """Write every fixture into ``folder`` with the reference package; return the paths."""
    import ztensor  # the reference package, only needed to write

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for file, tensors in expected().items():
        path = folder / file
        with ztensor.Writer(str(path)) as w:
            for name, t in tensors.items():
                if isinstance(t, np.ndarray):
                    w.add_tensor(name, t, compress=(file, name) in COMPRESSED)
                elif t["format"] == "sparse_csr":
                    w.add_sparse_csr(name, t["values"], t["indices"], t["indptr"], t["shape"])
                else:
                    w.add_sparse_coo(name, t["values"], t["coords"], t["shape"])
        size = path.stat().st_size
        if size >= MAX_SIZE:
            raise SystemExit(f"{path} is {size} bytes; fixtures must stay under {MAX_SIZE}")
        paths.append(path)
    return paths


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES
    for path in write(folder):
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
