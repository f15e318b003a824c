"""Round trips through ``tensorfile.ztensor``: every dtype, encoding and digest, sparse layouts,
attributes, the on-disk layout (alignment, padding), zero-copy views, streaming writes,
atomicity, torch output, slicing and digest verification.

File contents are checked against the spec (shared/seeds/004) with an independent parser
(``cbor2``, ``zstandard``, ``crc32c``, ``hashlib``), not only through tensorfile's reader.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from pathlib import Path
from typing import Any

import cbor2
import crc32c
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse
import torch
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorfile
from tensorfile import ztensor as zt
from tests.helpers.samples import assert_same_array

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FEW = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

ZT_DTYPES = [
    "float32", "float16", "float64", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
]  # fmt: skip
COMPRESSIONS = [None, "zstd"]
CHECKSUMS = [None, "crc32c", "sha256"]
TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "float64": torch.float64,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64, "bool": torch.bool,
}  # fmt: skip
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)
NONEMPTY = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


# -- helpers -----------------------------------------------------------------------------------


def np_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def arrays(name: str, shapes: Any = SHAPES) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    """Arrays of zTensor dtype ``name``; the 16-bit floats cover every bit pattern (NaN
    payloads included) via uint16."""
    if name in ("bfloat16", "float16"):
        return hnp.arrays(np.uint16, shapes).map(lambda a: a.view(np_dtype(name)))
    return hnp.arrays(np.dtype(name), shapes)


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """A deterministic array (bytes from a seeded generator; bool as 0/1, no NaN floats)."""
    rng = np.random.default_rng(seed)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if name in ("float16", "float32", "float64", "bfloat16"):
        return np.asarray(rng.standard_normal(size=shape) * 100).astype(np_dtype(name))
    dt = np.dtype(name)
    n = int(np.prod(shape, dtype=np.int64))
    return rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def torch_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def parse(data: bytes) -> tuple[dict[str, Any], int]:
    """Parse a zTensor file independently: (manifest, manifest start)."""
    assert data[:8] == b"ZTEN1000"
    (size,) = struct.unpack("<Q", data[-8:])
    start = len(data) - 8 - size
    assert start >= 8
    manifest = cbor2.loads(data[start : len(data) - 8])
    assert isinstance(manifest, dict)
    return manifest, start


def stored(data: bytes, comp: dict[str, Any]) -> bytes:
    return data[comp["offset"] : comp["offset"] + comp["length"]]


def decoded(data: bytes, comp: dict[str, Any]) -> bytes:
    """A component's bytes after its encoding is undone (decompressed with zstandard)."""
    raw = stored(data, comp)
    if comp.get("encoding", "raw") == "raw":
        return raw
    assert comp["encoding"] == "zstd"
    return zstandard.ZstdDecompressor().decompressobj().decompress(raw)


def check_digest(data: bytes, comp: dict[str, Any], checksum: str | None) -> None:
    """The component's digest is the spec's ``algorithm:value`` of its stored bytes."""
    if checksum is None:
        assert "digest" not in comp
        return
    algorithm, _, value = comp["digest"].partition(":")
    assert algorithm == checksum
    raw = stored(data, comp)
    if checksum == "crc32c":
        assert value[:2] == "0x"
        assert int(value, 16) == crc32c.crc32c(raw)
    else:
        assert value.lower() == hashlib.sha256(raw).hexdigest()


def check_encoding(comp: dict[str, Any], compression: str | None) -> None:
    assert comp.get("encoding", "raw") == (compression or "raw")


def tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- dense round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", ZT_DTYPES)
@given(data=st.data())
@SETTINGS
def test_dense_roundtrip(
    tmp_path: Path, dtype: str, compression: str | None, checksum: str | None, data: Any
) -> None:
    arr = data.draw(arrays(dtype), label="array")
    path = tmp_path / "t.zt"
    zt.save_file({"t": arr}, path, compression=compression, checksum=checksum)

    raw = path.read_bytes()
    manifest, _ = parse(raw)
    entry = manifest["tensors"]["t"]
    assert entry["dtype"] == dtype
    assert entry["shape"] == list(arr.shape)
    assert entry["format"] == "dense"
    comp = entry["components"]["data"]
    assert comp["offset"] % 64 == 0
    check_encoding(comp, compression)
    check_digest(raw, comp, checksum)
    assert decoded(raw, comp) == arr.tobytes()  # (little-endian host)

    with zt.open(path) as f:
        info = f.info("t")
        assert info.layout == "dense"
        assert info.dtype.ztensor_name == dtype
        assert info.shape == arr.shape
        assert info.data.encoding == (compression or "raw")
        assert (info.data.digest is None) == (checksum is None)
        assert_same_array(f.get_tensor("t"), arr)
    assert_same_array(zt.load_file(path)["t"], arr)
    with zt.open(raw) as f:  # from bytes
        assert_same_array(f.get_tensors()["t"], arr)


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", ZT_DTYPES)
def test_scalar_and_empty(
    tmp_path: Path, dtype: str, compression: str | None, checksum: str | None
) -> None:
    tensors = {
        "scalar": sample(dtype, (), seed=1),
        "empty1": sample(dtype, (0,)),
        "empty3": sample(dtype, (3, 0, 2)),
        "after": sample(dtype, (5,), seed=2),
    }
    path = tmp_path / "e.zt"
    zt.save_file(tensors, path, compression=compression, checksum=checksum)
    raw = path.read_bytes()
    manifest, _ = parse(raw)
    assert manifest["tensors"]["scalar"]["shape"] == []
    assert manifest["tensors"]["empty3"]["shape"] == [3, 0, 2]
    for name, arr in tensors.items():
        comp = manifest["tensors"][name]["components"]["data"]
        check_digest(raw, comp, checksum)
        assert decoded(raw, comp) == arr.tobytes()
    got = zt.load_file(path)
    assert sorted(got) == sorted(tensors)
    for name, arr in tensors.items():
        assert_same_array(got[name], arr)
    with zt.open(path) as f:
        assert f.get_tensor("scalar").ndim == 0
        if compression is None:
            assert_same_array(f.view("scalar"), tensors["scalar"])
            assert_same_array(f.view("empty3"), tensors["empty3"])


def test_big_endian_and_strided_inputs_are_stored_little_endian_row_major(tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    tensors = {
        "be": base.astype(">i4"),
        "be_f64": base.astype(">f8") / 3,
        "transposed": base.T,
        "strided": base[::2, ::3],
    }
    path = tmp_path / "le.zt"
    zt.save_file(tensors, path)
    raw = path.read_bytes()
    manifest, _ = parse(raw)
    for name, arr in tensors.items():
        want = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        assert manifest["tensors"][name]["shape"] == list(arr.shape)
        assert stored(raw, manifest["tensors"][name]["components"]["data"]) == want.tobytes()
    got = zt.load_file(path)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(got[name], arr)
        assert got[name].dtype == arr.dtype.newbyteorder("<")


def test_torch_inputs_roundtrip(tmp_path: Path) -> None:
    tensors = {
        "bf16": torch.linspace(-3, 3, 12, dtype=torch.bfloat16).reshape(3, 4),
        "i64": torch.arange(10, dtype=torch.int64),
        "b": torch.tensor([True, False, True]),
        "nc": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
    }
    path = tmp_path / "pt.zt"
    zt.save_file(tensors, path, compression="zstd", checksum="crc32c")
    got = zt.load_file(path, framework="pt")
    for name, t in tensors.items():
        assert got[name].dtype == t.dtype
        assert tuple(got[name].shape) == tuple(t.shape)
        assert torch.equal(got[name], t)
    with zt.open(path) as f:
        assert f.info("bf16").dtype.ztensor_name == "bfloat16"
        assert f.get_tensor("bf16").dtype == np.dtype(ml_dtypes.bfloat16)


# -- sparse round trips --------------------------------------------------------------------------

SPARSE_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int64", "uint32", "bool"]


def sparse_dense(name: str, shapes: Any) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    """Dense arrays with many zeros (values in -3..3, so zeros are frequent)."""
    small = hnp.arrays(np.int8, shapes, elements=st.integers(-3, 3))
    if name.startswith("uint"):
        return small.map(lambda a: np.abs(a).astype(name))
    return small.map(lambda a: a.astype(np_dtype(name)))


def check_csr(got: Any, dense: np.ndarray[Any, Any]) -> None:
    assert isinstance(got, zt.CSRTensor), type(got)
    assert got.shape == dense.shape
    assert got.values.dtype == dense.dtype
    assert got.indices.dtype == np.uint64
    assert got.indptr.dtype == np.uint64
    assert got.indptr.shape == (dense.shape[0] + 1,)
    assert got.nnz == np.count_nonzero(dense)
    assert_same_array(got.to_dense(), dense)


def check_coo(got: Any, dense: np.ndarray[Any, Any]) -> None:
    assert isinstance(got, zt.COOTensor), type(got)
    assert got.shape == dense.shape
    assert got.values.dtype == dense.dtype
    assert got.coords.dtype == np.uint64
    assert got.coords.shape == (dense.ndim, np.count_nonzero(dense))
    assert_same_array(got.to_dense(), dense)


@given(
    data=st.data(),
    dtype=st.sampled_from(SPARSE_DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    checksum=st.sampled_from(CHECKSUMS),
)
@SETTINGS
def test_csr_roundtrip(
    tmp_path: Path, data: Any, dtype: str, compression: str | None, checksum: str | None
) -> None:
    shape = hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=7)
    dense = data.draw(sparse_dense(dtype, shape), label="dense")
    csr = zt.CSRTensor.from_dense(dense)
    path = tmp_path / "csr.zt"
    zt.save_file({"m": csr}, path, compression=compression, checksum=checksum)

    raw = path.read_bytes()
    manifest, _ = parse(raw)
    entry = manifest["tensors"]["m"]
    assert entry["format"] == "sparse_csr"
    assert entry["dtype"] == dtype
    assert entry["shape"] == list(dense.shape)
    comps = entry["components"]
    assert set(comps) == {"values", "indices", "indptr"}
    for comp in comps.values():
        assert comp["offset"] % 64 == 0
        check_encoding(comp, compression)
        check_digest(raw, comp, checksum)
    assert decoded(raw, comps["values"]) == csr.values.tobytes()
    assert decoded(raw, comps["indices"]) == csr.indices.astype("<u8").tobytes()
    assert decoded(raw, comps["indptr"]) == csr.indptr.astype("<u8").tobytes()

    got = zt.load_file(path)["m"]
    check_csr(got, dense)
    assert got.indices.tolist() == csr.indices.tolist()
    assert got.indptr.tolist() == csr.indptr.tolist()
    with zt.open(path) as f:
        assert f.info("m").layout == "sparse_csr"
        assert f.read_component("m", "indptr").tolist() == csr.indptr.tolist()
        assert f.read_component("m", "values", dtype=np.uint8).tobytes() == csr.values.tobytes()


@given(
    data=st.data(),
    dtype=st.sampled_from(SPARSE_DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    checksum=st.sampled_from(CHECKSUMS),
)
@SETTINGS
def test_coo_roundtrip(
    tmp_path: Path, data: Any, dtype: str, compression: str | None, checksum: str | None
) -> None:
    shape = hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5)
    dense = data.draw(sparse_dense(dtype, shape), label="dense")
    coo = zt.COOTensor.from_dense(dense)
    path = tmp_path / "coo.zt"
    zt.save_file({"c": coo}, path, compression=compression, checksum=checksum)

    raw = path.read_bytes()
    manifest, _ = parse(raw)
    entry = manifest["tensors"]["c"]
    assert entry["format"] == "sparse_coo"
    assert entry["shape"] == list(dense.shape)
    comps = entry["components"]
    assert set(comps) == {"values", "coords"}
    for comp in comps.values():
        check_encoding(comp, compression)
        check_digest(raw, comp, checksum)
    # coords: ndim x nnz, row-major: all dimension-0 indices first
    nz = np.nonzero(dense)
    want_coords = np.array(nz, dtype="<u8").reshape(dense.ndim, -1)
    assert decoded(raw, comps["coords"]) == want_coords.tobytes()
    assert decoded(raw, comps["values"]) == dense[nz].tobytes()

    got = zt.load_file(path)["c"]
    check_coo(got, dense)
    assert got.coords.tolist() == want_coords.tolist()


def test_coo_3d_explicit(tmp_path: Path) -> None:
    coords = np.array([[0, 1, 1, 2], [3, 0, 2, 1], [4, 4, 0, 1]])
    values = np.array([1.5, -2.0, 3.25, 8.0], np.float32)
    coo = zt.COOTensor(values, coords, (3, 4, 5))
    path = tmp_path / "c3.zt"
    zt.save_file({"c": coo}, path, checksum="sha256")
    got = zt.load_file(path)["c"]
    assert got.shape == (3, 4, 5)
    assert got.coords.tolist() == coords.tolist()
    assert got.values.tolist() == values.tolist()
    dense = got.to_dense()
    assert dense[2, 1, 1] == 8.0
    assert dense[0, 3, 4] == 1.5
    assert np.count_nonzero(dense) == 4
    pt = zt.load_file(path, framework="pt")["c"]
    assert pt.layout == torch.sparse_coo
    assert torch.equal(pt.to_dense(), torch.from_numpy(dense))


NO_INDEX = np.empty(0, np.int64)


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_empty_sparse(tmp_path: Path, compression: str | None, checksum: str | None) -> None:
    tensors = {
        "csr": zt.CSRTensor(np.empty(0, np.float32), NO_INDEX, np.zeros(4, np.uint64), (3, 5)),
        "csr0": zt.CSRTensor(np.empty(0, np.int16), NO_INDEX, np.zeros(1, np.int64), (0, 0)),
        "coo": zt.COOTensor(np.empty(0, np.float64), np.empty((3, 0), np.uint64), (2, 3, 4)),
        "coo1": zt.COOTensor(np.empty(0, np.uint8), np.empty((1, 0), np.uint64), (0,)),
        "scipy": scipy.sparse.csr_array((4, 2), dtype=np.float32),
        "torch": torch.sparse_coo_tensor(
            torch.empty((2, 0), dtype=torch.int64), torch.empty(0), (3, 3), check_invariants=True
        ),
    }
    path = tmp_path / "empty.zt"
    zt.save_file(tensors, path, compression=compression, checksum=checksum)
    raw = path.read_bytes()
    manifest, _ = parse(raw)
    for name in tensors:
        for comp in manifest["tensors"][name]["components"].values():
            check_encoding(comp, compression)
            check_digest(raw, comp, checksum)
    got = zt.load_file(path)
    check_csr(got["csr"], np.zeros((3, 5), np.float32))
    check_csr(got["csr0"], np.zeros((0, 0), np.int16))
    check_coo(got["coo"], np.zeros((2, 3, 4), np.float64))
    check_coo(got["coo1"], np.zeros((0,), np.uint8))
    check_csr(got["scipy"], np.zeros((4, 2), np.float32))
    check_coo(got["torch"], np.zeros((3, 3), np.float32))
    pt = zt.load_file(path, framework="pt")
    assert pt["csr"].layout == torch.sparse_csr
    assert pt["coo"].layout == torch.sparse_coo
    assert pt["coo"].to_dense().shape == (2, 3, 4)
    assert int(pt["coo"].to_dense().count_nonzero()) == 0


@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "coo_array", "coo_matrix"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scipy_sparse_roundtrip(tmp_path: Path, kind: str, dtype: str) -> None:
    rng = np.random.default_rng(7)
    dense = rng.integers(1, 100, size=(9, 13)).astype(dtype)
    dense[rng.random((9, 13)) > 0.2] = 0
    matrix = getattr(scipy.sparse, kind)(dense)
    path = tmp_path / "sp.zt"
    zt.save_file({"m": matrix}, path, compression="zstd", checksum="crc32c")
    got = zt.load_file(path)["m"]
    expected_type = zt.CSRTensor if kind.startswith("csr") else zt.COOTensor
    assert isinstance(got, expected_type)
    assert got.dtype == np.dtype(dtype)
    want = matrix.toarray()
    assert_same_array(got.to_dense(), want)
    back = got.to_scipy()
    assert back.format == kind[:3]
    assert_same_array(back.toarray(), want)
    if kind.startswith("csr"):
        assert got.indptr.tolist() == matrix.indptr.tolist()
        assert got.indices.tolist() == matrix.indices.tolist()


def test_scipy_other_formats_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "csc.zt"
    with pytest.raises(tensorfile.InvalidArgumentError):
        zt.save_file({"m": scipy.sparse.csc_array(np.eye(3))}, path)
    assert not path.exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.float16])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch_sparse_roundtrip(tmp_path: Path, layout: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    dense = torch.randint(-4, 5, (6, 7), generator=gen).to(dtype)
    dense[dense.abs() < 2] = 0
    sp = dense.to_sparse_csr() if layout == "csr" else dense.to_sparse_coo()
    path = tmp_path / "tsp.zt"
    zt.save_file({"s": sp}, path, checksum="sha256")

    got = zt.load_file(path)["s"]
    assert isinstance(got, zt.CSRTensor if layout == "csr" else zt.COOTensor)
    assert got.shape == (6, 7)
    assert got.nnz == int(dense.count_nonzero())

    pt = zt.load_file(path, framework="pt")["s"]
    assert pt.layout == (torch.sparse_csr if layout == "csr" else torch.sparse_coo)
    assert pt.dtype == dtype
    assert torch.equal(pt.to_dense(), dense)
    assert torch.equal(got.to_torch().to_dense(), dense)


def test_torch_sparse_coo_3d_uncoalesced(tmp_path: Path) -> None:
    idx = torch.tensor([[1, 0, 1], [2, 0, 2], [3, 1, 3]])
    vals = torch.tensor([1.0, 2.0, 5.0])
    sp = torch.sparse_coo_tensor(idx, vals, (2, 3, 4), check_invariants=True)  # (1,2,3) twice
    path = tmp_path / "u.zt"
    zt.save_file({"s": sp}, path)
    pt = zt.load_file(path, framework="pt")["s"]
    assert pt.layout == torch.sparse_coo
    assert torch.equal(pt.to_dense(), sp.to_dense())
    assert float(pt.to_dense()[1, 2, 3]) == 6.0


def test_sparse_conversions_from_layout_classes() -> None:
    dense = np.array([[0, 2, 0], [3, 0, 4]], np.float32)
    csr = zt.CSRTensor.from_dense(dense)
    assert csr.indptr.tolist() == [0, 1, 3]
    assert csr.indices.tolist() == [1, 0, 2]
    assert_same_array(zt.CSRTensor.from_scipy(csr.to_scipy()).to_dense(), dense)
    assert_same_array(zt.CSRTensor.from_torch(csr.to_torch()).to_dense(), dense)
    coo = zt.COOTensor.from_dense(dense)
    assert coo.coords.tolist() == [[0, 1, 1], [1, 0, 2]]
    assert_same_array(zt.COOTensor.from_scipy(coo.to_scipy()).to_dense(), dense)
    assert_same_array(zt.COOTensor.from_torch(coo.to_torch()).to_dense(), dense)


# -- attributes ----------------------------------------------------------------------------------


@given(attrs=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6))
@SETTINGS
def test_attributes_roundtrip(tmp_path: Path, attrs: dict[str, str]) -> None:
    path = tmp_path / "a.zt"
    zt.save_file({"x": np.zeros(2, np.float32)}, path, attributes=attrs)
    manifest, _ = parse(path.read_bytes())
    assert manifest["version"] == "1.0"
    assert isinstance(manifest["generator"], str)
    assert manifest["attributes"] == attrs
    with zt.open(path) as f:
        assert dict(f.metadata) == attrs
        assert f.attributes == attrs


def test_attributes_recommended_keys_and_no_tensors(tmp_path: Path) -> None:
    attrs = {
        "license": "Apache-2.0",
        "description": "ResNet-50 Checkpoint ✓",
        "framework": "PyTorch",
        "created_at": "2024-01-15T10:30:00Z",
    }
    path = tmp_path / "none.zt"
    zt.save_file({}, path, attributes=attrs)
    manifest, start = parse(path.read_bytes())
    assert start == 8
    assert manifest["tensors"] == {}
    with tensorfile.open(path) as f:
        assert f.keys() == []
        assert dict(f.metadata) == attrs


def test_attributes_must_be_text(tmp_path: Path) -> None:
    with pytest.raises(tensorfile.InvalidArgumentError):
        zt.save_file({}, tmp_path / "bad.zt", attributes={"n": 3})  # type: ignore[dict-item]
    assert tmp_files(tmp_path) == []


# -- layout on disk ------------------------------------------------------------------------------


def check_layout(raw: bytes) -> None:
    """Every component 64-byte aligned, every byte outside a component zero, padding minimal
    (0-63 bytes) and the manifest straight after the last component."""
    manifest, start = parse(raw)
    spans = sorted(
        (c["offset"], c["offset"] + c["length"])
        for t in manifest["tensors"].values()
        for c in t["components"].values()
    )
    covered = np.zeros(len(raw), bool)
    pos = 8
    for lo, hi in spans:
        assert lo % 64 == 0, lo
        assert lo >= pos, "components overlap"
        assert lo - pos < 64, "more padding than alignment needs"
        covered[lo:hi] = True
        pos = max(pos, hi)
    assert start == pos, "the manifest does not follow the last component"
    region = np.frombuffer(raw[8:start], np.uint8)
    gaps = region[~covered[8:start]]
    assert not gaps.any(), "padding is not zero"


@given(
    parts=st.lists(
        st.tuples(
            st.sampled_from(ZT_DTYPES),
            st.integers(0, 40),
            st.sampled_from(COMPRESSIONS),
            st.sampled_from(CHECKSUMS),
        ),
        min_size=1,
        max_size=6,
    )
)
@SETTINGS
def test_alignment_and_zero_padding(tmp_path: Path, parts: list[Any]) -> None:
    path = tmp_path / "pad.zt"
    expected = {}
    with zt.Writer(path) as w:
        for i, (dtype, n, compression, checksum) in enumerate(parts):
            arr = sample(dtype, (n,), seed=i)
            expected[f"t{i}"] = arr
            w.add(f"t{i}", arr, compression=compression, checksum=checksum)
        sparse = zt.CSRTensor.from_dense(np.diag(np.arange(1, 4, dtype=np.int8)))
        w.add("sparse", sparse)
    raw = path.read_bytes()
    check_layout(raw)
    got = zt.load_file(path)
    for name, arr in expected.items():
        assert_same_array(got[name], arr)


def test_layout_is_in_order_given(tmp_path: Path) -> None:
    path = tmp_path / "order.zt"
    with zt.Writer(path) as w:
        w.add("z", np.ones(3, np.uint8))
        w.add("a", np.ones(100, np.float32))
        w.add("m", zt.COOTensor.from_dense(np.eye(2, dtype=np.float64)))
    raw = path.read_bytes()
    manifest, _ = parse(raw)
    comps = {
        (t, r): c["offset"]
        for t, e in manifest["tensors"].items()
        for r, c in e["components"].items()
    }
    assert comps[("z", "data")] == 64
    assert comps[("a", "data")] == 128
    assert comps[("m", "values")] == 128 + 448
    assert comps[("m", "coords")] == 128 + 448 + 64
    check_layout(raw)
    with zt.open(path) as f:
        assert f.keys() == ["z", "a", "m"]  # file order


# -- zero-copy views -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ZT_DTYPES)
@given(data=st.data())
@FEW
def test_view_is_zero_copy_and_aligned(tmp_path: Path, dtype: str, data: Any) -> None:
    arrs = data.draw(st.lists(arrays(dtype, NONEMPTY), min_size=1, max_size=4), label="arrays")
    tensors = {f"v{i}": a for i, a in enumerate(arrs)}
    path = tmp_path / "v.zt"
    zt.save_file(tensors, path, checksum="crc32c")
    with zt.open(path) as f:
        for name, arr in tensors.items():
            v = f.view(name)
            assert_same_array(v, arr)
            assert v.flags.owndata is False
            assert v.flags.writeable is False
            assert v.ctypes.data % 64 == 0
            with pytest.raises(ValueError):
                v.reshape(-1)[0] = v.reshape(-1)[0]


def test_view_refuses_compressed_and_sparse(tmp_path: Path) -> None:
    path = tmp_path / "nv.zt"
    zt.save_file(
        {
            "z": np.arange(10, dtype=np.float32),
            "s": zt.CSRTensor.from_dense(np.eye(2, dtype=np.float32)),
        },
        path,
        compression="zstd",
    )
    with zt.open(path) as f:
        with pytest.raises(zt.ZTensorUnsupportedError):
            f.view("z")
        with pytest.raises(zt.ZTensorUnsupportedError):
            f.view("s")
        with pytest.raises(zt.ZTensorMissingError):
            f.view("nope")


def test_view_survives_close(tmp_path: Path) -> None:
    arr = np.arange(1000, dtype=np.int64)
    path = tmp_path / "c.zt"
    zt.save_file({"a": arr}, path)
    f = zt.open(path)
    v = f.view("a")
    f.close()
    assert_same_array(v, arr)


# -- streaming writes ----------------------------------------------------------------------------


def split_points(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, n), max_size=60).map(lambda c: sorted(set(c)))


@given(data=st.data(), dtype=st.sampled_from(ZT_DTYPES), checksum=st.sampled_from(CHECKSUMS))
@SETTINGS
def test_add_stream_raw_equals_save_file(
    tmp_path: Path, data: Any, dtype: str, checksum: str | None
) -> None:
    arr = data.draw(arrays(dtype, SHAPES), label="array")
    blob = arr.tobytes()
    cuts = data.draw(split_points(len(blob)), label="cuts")
    bounds = [0, *cuts, len(blob)]
    chunks = [memoryview(blob)[a:b] for a, b in itertools.pairwise(bounds)]
    attrs = {"k": "v"}
    a, b = tmp_path / "a.zt", tmp_path / "b.zt"
    zt.save_file({"head": np.ones(3, np.uint8), "t": arr}, a, checksum=checksum, attributes=attrs)
    with zt.Writer(b, checksum=checksum, attributes=attrs) as w:
        w.add("head", np.ones(3, np.uint8))
        w.add_stream("t", dtype, arr.shape, iter(chunks))
    assert b.read_bytes() == a.read_bytes()


@given(data=st.data(), dtype=st.sampled_from(ZT_DTYPES))
@SETTINGS
def test_add_stream_array_chunks(tmp_path: Path, data: Any, dtype: str) -> None:
    arr = data.draw(arrays(dtype, NONEMPTY), label="array")
    flat = arr.reshape(-1)
    cuts = data.draw(split_points(flat.size), label="cuts")
    bounds = [0, *cuts, flat.size]
    chunks = [flat[a:b] for a, b in itertools.pairwise(bounds)]
    a, b = tmp_path / "a.zt", tmp_path / "b.zt"
    zt.save_file({"t": arr}, a)
    with zt.Writer(b) as w:
        w.add_stream("t", np_dtype(dtype), arr.shape, (c for c in chunks))
    assert b.read_bytes() == a.read_bytes()


@pytest.mark.parametrize("checksum", CHECKSUMS)
def test_add_stream_many_chunks(tmp_path: Path, checksum: str | None) -> None:
    arr = sample("float32", (500, 33), seed=5)
    rows = [arr[i : i + 1] for i in range(arr.shape[0])]
    a, b, c = tmp_path / "a.zt", tmp_path / "b.zt", tmp_path / "c.zt"
    zt.save_file({"w": arr}, a, checksum=checksum)
    with zt.Writer(b, checksum=checksum) as w:
        w.add_stream("w", "float32", arr.shape, rows)
    assert b.read_bytes() == a.read_bytes()

    # zstd: a different (streamed) frame, the same values, a valid digest
    with zt.Writer(c, compression="zstd", checksum=checksum) as w:
        w.add_stream("w", "float32", arr.shape, (bytes(r.tobytes()) for r in rows))
    raw = c.read_bytes()
    manifest, _ = parse(raw)
    comp = manifest["tensors"]["w"]["components"]["data"]
    assert comp["encoding"] == "zstd"
    assert comp["length"] < arr.nbytes
    check_digest(raw, comp, checksum)
    assert decoded(raw, comp) == arr.tobytes()
    assert_same_array(zt.load_file(c)["w"], arr)


@pytest.mark.parametrize("total", [-1, +1])
def test_add_stream_wrong_size_leaves_nothing(tmp_path: Path, total: int) -> None:
    path = tmp_path / "s.zt"
    path.write_bytes(b"previous")
    arr = np.arange(12, dtype=np.int16)
    chunk = np.arange(12 + total, dtype=np.int16)
    with pytest.raises(tensorfile.InvalidArgumentError):
        with zt.Writer(path) as w:
            w.add("ok", arr)
            w.add_stream("bad", "int16", (12,), [chunk])
    assert path.read_bytes() == b"previous"
    assert tmp_files(tmp_path) == ["s.zt"]


def test_add_stream_wrong_chunk_dtype(tmp_path: Path) -> None:
    path = tmp_path / "d.zt"
    with pytest.raises(tensorfile.InvalidArgumentError):
        with zt.Writer(path) as w:
            w.add_stream("t", "int32", (4,), [np.zeros(4, np.float32)])
    assert tmp_files(tmp_path) == []


# -- per-tensor options --------------------------------------------------------------------------


def test_per_tensor_overrides(tmp_path: Path) -> None:
    arr = np.zeros(4096, np.float32)
    path = tmp_path / "o.zt"
    with zt.Writer(path, compression="zstd", checksum="sha256") as w:
        w.add("default", arr)
        w.add("raw", arr, compression=None)
        w.add("nodigest", arr, checksum=None)
        w.add("crc", arr, compression=None, checksum="crc32c")
        w.add("level", arr, level=19)
        w.add("sp", zt.CSRTensor.from_dense(np.eye(3, dtype=np.float32)), compression=None)
        w.add_stream("stream", "float32", arr.shape, [arr], compression=None, checksum="crc32c")
    raw = path.read_bytes()
    manifest, _ = parse(raw)
    t = {name: e["components"] for name, e in manifest["tensors"].items()}
    expect = {
        "default": ("zstd", "sha256"),
        "raw": (None, "sha256"),
        "nodigest": ("zstd", None),
        "crc": (None, "crc32c"),
        "level": ("zstd", "sha256"),
        "stream": (None, "crc32c"),
    }
    for name, (compression, checksum) in expect.items():
        check_encoding(t[name]["data"], compression)
        check_digest(raw, t[name]["data"], checksum)
    assert t["raw"]["data"]["length"] == arr.nbytes
    assert t["default"]["data"]["length"] < 1000
    for comp in t["sp"].values():
        check_encoding(comp, None)
        check_digest(raw, comp, "sha256")
    got = zt.load_file(path)
    for name in expect:
        assert_same_array(got[name], arr)
    check_layout(raw)

    path2 = tmp_path / "o2.zt"
    with zt.Writer(path2) as w:
        w.add("plain", arr)
        w.add("z", arr, compression="zstd", checksum="crc32c")
    manifest, _ = parse(path2.read_bytes())
    assert "encoding" not in manifest["tensors"]["plain"]["components"]["data"]
    assert "digest" not in manifest["tensors"]["plain"]["components"]["data"]
    assert manifest["tensors"]["z"]["components"]["data"]["encoding"] == "zstd"


def test_writer_rejects_bad_options_and_names(tmp_path: Path) -> None:
    with pytest.raises(zt.ZTensorUnsupportedError):
        zt.Writer(tmp_path / "x.zt", compression="lz4")
    with pytest.raises(zt.ZTensorUnsupportedError):
        zt.Writer(tmp_path / "x.zt", checksum="md5")
    with pytest.raises(tensorfile.InvalidArgumentError):
        with zt.Writer(tmp_path / "x.zt") as w:
            w.add("a", np.zeros(1, np.float32))
            w.add("a", np.zeros(1, np.float32))
    with pytest.raises(zt.ZTensorUnsupportedError):
        zt.save_file({"c": np.zeros(2, np.complex64)}, tmp_path / "x.zt")
    assert tmp_files(tmp_path) == []


# -- atomicity -----------------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_exception_in_writer_keeps_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "keep.zt"
    zt.save_file({"old": np.arange(5, dtype=np.int32)}, path)
    before = path.read_bytes()
    with pytest.raises(Boom):
        with zt.Writer(path, checksum="crc32c") as w:
            w.add("new", np.ones(100_000, np.float64))
            w.add_stream("s", "uint8", (10,), [b"0123456789"])
            raise Boom
    assert path.read_bytes() == before
    assert tmp_files(tmp_path) == ["keep.zt"]
    assert_same_array(zt.load_file(path)["old"], np.arange(5, dtype=np.int32))


def test_exception_in_writer_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.zt"
    with pytest.raises(Boom):
        with zt.Writer(path) as w:
            w.add("a", np.ones(10, np.float32))
            assert not path.exists()  # nothing at the destination before close
            raise Boom
    assert tmp_files(tmp_path) == []


def test_abort_and_failing_save_file(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    path.write_bytes(b"not a ztensor file")
    w = zt.Writer(path)
    w.add("a", np.ones(10, np.float32))
    w.abort()
    assert path.read_bytes() == b"not a ztensor file"
    assert tmp_files(tmp_path) == ["m.zt"]
    with pytest.raises(zt.ZTensorUnsupportedError):
        zt.save_file({"good": np.ones(3), "bad": np.ones(3, np.complex128)}, path)
    assert path.read_bytes() == b"not a ztensor file"
    assert tmp_files(tmp_path) == ["m.zt"]


def test_file_appears_on_close(tmp_path: Path) -> None:
    path = tmp_path / "late.zt"
    w = zt.Writer(path)
    w.add("a", np.arange(3, dtype=np.uint16))
    assert not path.exists()
    w.close()
    assert path.exists()
    assert tmp_files(tmp_path) == ["late.zt"]
    w.close()  # idempotent
    assert_same_array(zt.load_file(path)["a"], np.arange(3, dtype=np.uint16))
    with pytest.raises(tensorfile.InvalidArgumentError):
        w.add("b", np.zeros(1, np.uint8))


# -- torch output --------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", ZT_DTYPES)
def test_load_file_pt(tmp_path: Path, dtype: str, compression: str | None) -> None:
    tensors = {
        "m": sample(dtype, (3, 5), seed=11),
        "s": sample(dtype, (), seed=12),
        "e": sample(dtype, (0, 2)),
    }
    path = tmp_path / "pt.zt"
    zt.save_file(tensors, path, compression=compression, checksum="crc32c")
    got = zt.load_file(path, framework="pt")
    assert sorted(got) == sorted(tensors)
    for name, arr in tensors.items():
        t = got[name]
        assert isinstance(t, torch.Tensor)
        assert t.dtype == TORCH_DTYPES[dtype]
        assert tuple(t.shape) == arr.shape
        assert torch_bytes(t) == arr.tobytes()


def test_load_file_pt_bf16_values(tmp_path: Path) -> None:
    values = [0.0, -1.5, 3.140625, 65280.0, float("inf")]
    arr = np.array(values, dtype=ml_dtypes.bfloat16)
    path = tmp_path / "bf.zt"
    zt.save_file({"b": arr}, path)
    t = zt.load_file(path, framework="pt")["b"]
    assert t.dtype == torch.bfloat16
    assert t.float().tolist() == values


def test_load_file_pt_mixed(tmp_path: Path) -> None:
    dense = np.array([[0, 1.5], [2.5, 0]], np.float32)
    path = tmp_path / "mix.zt"
    zt.save_file(
        {
            "d": dense,
            "csr": zt.CSRTensor.from_dense(dense),
            "coo": zt.COOTensor.from_dense(dense),
        },
        path,
        compression="zstd",
    )
    got = zt.load_file(path, framework="pt")
    assert got["d"].layout == torch.strided
    assert got["csr"].layout == torch.sparse_csr
    assert got["coo"].layout == torch.sparse_coo
    for t in got.values():
        assert torch.equal(t.to_dense(), torch.from_numpy(dense))
    with pytest.raises(zt.ZTensorUnsupportedError):
        zt.load_file(path, framework="jax")


# -- slicing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
@given(data=st.data(), dtype=st.sampled_from(ZT_DTYPES), checksum=st.sampled_from(CHECKSUMS))
@SETTINGS
def test_read_slice(
    tmp_path: Path, compression: str | None, data: Any, dtype: str, checksum: str | None
) -> None:
    arr = data.draw(arrays(dtype, SHAPES), label="array")
    key = data.draw(
        hnp.basic_indices(arr.shape, min_dims=0, allow_newaxis=True, allow_ellipsis=True),
        label="key",
    )
    path = tmp_path / "sl.zt"
    zt.save_file({"a": arr}, path, compression=compression, checksum=checksum)
    want = np.asarray(arr[key])
    with zt.open(path) as f:
        got = f.read_slice("a", key)
    assert_same_array(np.asarray(got), want)


def test_read_slice_explicit(tmp_path: Path) -> None:
    arr = np.arange(7 * 5 * 3, dtype=np.int32).reshape(7, 5, 3)
    path = tmp_path / "sl.zt"
    with zt.Writer(path) as w:
        w.add("raw", arr)
        w.add("z", arr, compression="zstd")
    keys = [
        (slice(1, 4),),
        (slice(None, None, -2),),
        (2, slice(None), 1),
        (Ellipsis, 0),
        (slice(6, 100), None),
        (-1,),
        (slice(3, 3),),
    ]
    with zt.open(path) as f:
        for name in ("raw", "z"):
            for key in keys:
                assert_same_array(f.read_slice(name, key), arr[key])


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_read_slice_to_scalar(tmp_path: Path, compression: str | None) -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "sc.zt"
    zt.save_file({"m": arr, "s": np.float32(7)}, path, compression=compression)
    with zt.open(path) as f:
        assert_same_array(np.asarray(f.read_slice("m", (1, 2))), np.asarray(arr[1, 2]))  # shape ()
        assert_same_array(np.asarray(f.read_slice("s", ())), np.asarray(np.float32(7)))


# -- tensorfile.open ------------------------------------------------------------------------------


def test_tensorfile_open_detects_ztensor(tmp_path: Path) -> None:
    arr = np.arange(12, dtype=np.float16).reshape(3, 4)
    path = tmp_path / "model.zt"
    zt.save_file({"w": arr}, path, attributes={"license": "MIT"}, checksum="crc32c")
    for src in (path, str(path), path.read_bytes()):
        with tensorfile.open(src) as f:
            assert isinstance(f, zt.ZTensorReader)
            assert f.format == "ztensor"
            assert f.catalog.version == "1.0"
            assert f.keys() == ["w"]
            assert dict(f.metadata) == {"license": "MIT"}
            assert f.info("w").shape == (3, 4)
            assert_same_array(f.get_tensor("w"), arr)
            assert_same_array(f.read_slice("w", (slice(1, None),)), arr[1:])
    with tensorfile.open(path, format="ztensor") as f:
        assert_same_array(f.view("w"), arr)


# -- digests -------------------------------------------------------------------------------------


def corrupt_data(path: Path, name: str, role: str = "data", at: int = 3) -> int:
    raw = bytearray(path.read_bytes())
    manifest, _ = parse(bytes(raw))
    offset: int = manifest["tensors"][name]["components"][role]["offset"] + at
    raw[offset] ^= 0x5A
    path.write_bytes(bytes(raw))
    return offset


@pytest.mark.parametrize("checksum", ["crc32c", "sha256"])
def test_verify_detects_corruption(tmp_path: Path, checksum: str) -> None:
    arr = np.arange(64, dtype=np.uint8)
    path = tmp_path / "bad.zt"
    zt.save_file({"a": arr, "ok": arr}, path, checksum=checksum)
    corrupt_data(path, "a", at=3)
    expected = arr.copy()
    expected[3] ^= 0x5A

    with zt.open(path) as f:
        with pytest.raises(zt.ZTensorChecksumError):
            f.get_tensor("a")
        with pytest.raises(zt.ZTensorChecksumError):
            f.view("a")
        with pytest.raises(zt.ZTensorChecksumError):
            f.read_slice("a", (slice(10, 12),))
        with pytest.raises(zt.ZTensorChecksumError):
            f.read_component("a", "data")
        assert_same_array(f.get_tensor("ok"), arr)  # other tensors still read
    with pytest.raises(zt.ZTensorChecksumError):
        zt.load_file(path)
    with pytest.raises(zt.ZTensorChecksumError):
        zt.load_file(path, framework="pt")
    assert issubclass(zt.ZTensorChecksumError, tensorfile.ChecksumError)

    with zt.open(path, verify=False) as f:
        assert_same_array(f.get_tensor("a"), expected)
        assert_same_array(f.view("a"), expected)
        assert_same_array(f.read_slice("a", (slice(2, 5),)), expected[2:5])
    assert_same_array(zt.load_file(path, verify=False)["a"], expected)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_verify_detects_corrupt_sparse_component(tmp_path: Path, compression: str | None) -> None:
    csr = zt.CSRTensor.from_dense(np.diag(np.arange(1, 40, dtype=np.float64)))
    path = tmp_path / "sp.zt"
    zt.save_file({"s": csr}, path, checksum="crc32c", compression=compression)
    corrupt_data(path, "s", role="values", at=0)
    with zt.open(path) as f:
        with pytest.raises(zt.ZTensorChecksumError):
            f.get_tensor("s")
        assert f.read_component("s", "indptr").tolist() == csr.indptr.tolist()
    if compression is None:
        got = zt.load_file(path, verify=False)["s"]
        assert got.values[1:].tolist() == csr.values[1:].tolist()
        assert got.values[0] != csr.values[0]


def test_verify_detects_corrupt_zstd_stream(tmp_path: Path) -> None:
    arr = np.arange(4096, dtype=np.int32)
    path = tmp_path / "z.zt"
    zt.save_file({"a": arr}, path, checksum="sha256", compression="zstd")
    corrupt_data(path, "a", at=8)
    with zt.open(path) as f:
        with pytest.raises(zt.ZTensorChecksumError):
            f.get_tensor("a")
