"""Interoperability of ``tensorfile.ztensor`` with the reference implementation, the PyPI
package ``ztensor`` 1.0.1: files either one writes load in the other with equal values, and
the committed fixtures (written by the reference, see ``fixtures/README.md``) load in
tensorfile with the values ``make_fixtures.py`` defines.

The reference's Python sparse read path frees its buffers too early (values come back as
garbage), so sparse tensors are read from it component by component, copying each array while
the handle that owns it is alive.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorfile
from tensorfile import ztensor as zt
from tensorfile.errors import InvalidArgumentError
from tensorfile.ops import content_hash
from tests.helpers.samples import assert_same
from tests.ztensor import make_fixtures

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
ZT_DTYPES = [
    "float32", "float16", "float64", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
]  # fmt: skip
COMPRESSIONS = [None, "zstd"]
CHECKSUMS = [None, "crc32c", "sha256"]


# -- helpers -----------------------------------------------------------------------------------


def np_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """A deterministic array of zTensor dtype ``name`` (bool as 0/1, finite floats)."""
    rng = np.random.default_rng(seed)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if name in ("float16", "float32", "float64", "bfloat16"):
        return np.asarray(rng.standard_normal(size=shape) * 100).astype(np_dtype(name))
    dt = np.dtype(name)
    n = int(np.prod(shape, dtype=np.int64))
    return rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def arrays(name: str, shapes: Any) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    if name in ("bfloat16", "float16"):
        return hnp.arrays(np.uint16, shapes).map(lambda a: a.view(np_dtype(name)))
    return hnp.arrays(np.dtype(name), shapes)


def manifest_of(path: Path) -> tuple[dict[str, Any], int]:
    raw = path.read_bytes()
    assert raw[:8] == b"ZTEN1000"
    (size,) = struct.unpack("<Q", raw[-8:])
    start = len(raw) - 8 - size
    return cbor2.loads(raw[start:-8]), start


@pytest.fixture
def ref() -> Any:
    return pytest.importorskip("ztensor")


def ref_dense(ref: Any, path: Path, name: str) -> np.ndarray[Any, Any]:
    """A dense tensor read by the reference, copied out of its buffer."""
    reader = ref.Reader(str(path))
    out = np.array(reader.read_tensor(name), copy=True)
    return out.view(np.ndarray)


def ref_component(ref: Any, path: Path, name: str, role: str, dtype: Any) -> np.ndarray[Any, Any]:
    """One component read by the reference (copied while the owning handle is alive)."""
    reader = ref.Reader(str(path))
    arr, keep = reader._read_component(name, role, lambda: np.dtype(dtype))
    out = arr.copy()
    del keep
    return out


# -- tensorfile writes, the reference reads ------------------------------------------------------


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", ZT_DTYPES)
def test_tensorfile_dense_reads_in_reference(
    ref: Any, tmp_path: Path, dtype: str, compression: str | None, checksum: str | None
) -> None:
    tensors = {
        "matrix": sample(dtype, (3, 4), seed=1),
        "vector": sample(dtype, (7,), seed=2),
        "cube": sample(dtype, (2, 3, 2), seed=3),
        "scalar": sample(dtype, (), seed=4),
        "empty": sample(dtype, (0, 3)),
    }
    path = tmp_path / "tf.zt"
    zt.save_file(tensors, path, compression=compression, checksum=checksum)
    reader = ref.Reader(str(path))
    assert sorted(reader.tensor_names) == sorted(tensors)
    with zt.open(path) as f:
        digests = {n: f.info(n).data.digest for n in tensors}
    for name, arr in tensors.items():
        meta = reader.metadata(name)
        assert meta.dtype_str == dtype
        assert meta.layout == "dense"
        assert tuple(meta.shape) == arr.shape
        if checksum == "crc32c":
            assert meta.checksum == digests[name]
        assert_same(ref_dense(ref, path, name), arr)


@given(
    data=st.data(),
    dtype=st.sampled_from(ZT_DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    checksum=st.sampled_from(CHECKSUMS),
)
@SETTINGS
def test_tensorfile_dense_reads_in_reference_hypothesis(
    ref: Any, tmp_path: Path, data: Any, dtype: str, compression: str | None, checksum: str | None
) -> None:
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)
    arr = data.draw(arrays(dtype, shapes), label="array")
    path = tmp_path / "h.zt"
    zt.save_file({"t": arr}, path, compression=compression, checksum=checksum)
    assert_same(ref_dense(ref, path, "t"), arr)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_reference_verifies_tensorfile_crc32c(
    ref: Any, tmp_path: Path, compression: str | None
) -> None:
    arr = np.arange(256, dtype=np.float32)
    path = tmp_path / "crc.zt"
    zt.save_file({"a": arr, "b": arr}, path, compression=compression, checksum="crc32c")
    assert_same(ref_dense(ref, path, "a"), arr)  # the digest tensorfile wrote is accepted
    manifest, _ = manifest_of(path)
    comp = manifest["tensors"]["a"]["components"]["data"]
    raw = bytearray(path.read_bytes())
    raw[comp["offset"] + comp["length"] // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ref.ZTensorError, match=r"(?i)checksum"):
        ref_dense(ref, path, "a")
    assert_same(ref_dense(ref, path, "b"), arr)
    with pytest.raises(zt.ZTensorChecksumError):
        zt.load_file(path)


def test_reference_reads_sha256_files(ref: Any, tmp_path: Path) -> None:
    arr = np.arange(30, dtype=np.int16).reshape(5, 6)
    path = tmp_path / "sha.zt"
    zt.save_file({"a": arr}, path, checksum="sha256", compression="zstd")
    assert_same(ref_dense(ref, path, "a"), arr)
    assert ref.Reader(str(path)).metadata("a").checksum.startswith("sha256:")


SPARSE_DTYPES = ["float32", "float64", "bfloat16", "int8", "int64", "uint16", "bool"]


@pytest.mark.parametrize("checksum", CHECKSUMS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", SPARSE_DTYPES)
def test_tensorfile_sparse_reads_in_reference(
    ref: Any, tmp_path: Path, dtype: str, compression: str | None, checksum: str | None
) -> None:
    rng = np.random.default_rng(5)
    dense2 = (rng.integers(1, 9, (6, 9)) * (rng.random((6, 9)) < 0.3)).astype(np_dtype(dtype))
    dense3 = (rng.integers(1, 9, (3, 4, 5)) * (rng.random((3, 4, 5)) < 0.2)).astype(np_dtype(dtype))
    tensors = {
        "csr": zt.CSRTensor.from_dense(dense2),
        "coo": zt.COOTensor.from_dense(dense2),
        "coo3": zt.COOTensor.from_dense(dense3),
        "csr_empty": zt.CSRTensor.from_dense(np.zeros((4, 3), np_dtype(dtype))),
        "coo_empty": zt.COOTensor.from_dense(np.zeros((2, 2, 2), np_dtype(dtype))),
    }
    path = tmp_path / "sp.zt"
    zt.save_file(tensors, path, compression=compression, checksum=checksum)
    reader = ref.Reader(str(path))
    vdt = np_dtype(dtype)
    for name, t in tensors.items():
        meta = reader.metadata(name)
        assert meta.dtype_str == dtype
        assert tuple(meta.shape) == t.shape
        values = ref_component(ref, path, name, "values", vdt)
        assert_same(values, t.values)
        if isinstance(t, zt.CSRTensor):
            assert meta.layout == "sparse_csr"
            assert_same(ref_component(ref, path, name, "indices", np.uint64), t.indices)
            assert_same(ref_component(ref, path, name, "indptr", np.uint64), t.indptr)
        else:
            assert meta.layout == "sparse_coo"
            coords = ref_component(ref, path, name, "coords", np.uint64)
            assert_same(coords, t.coords.reshape(-1))
    # and the dense picture the reference would build agrees
    coords = ref_component(ref, path, "coo3", "coords", np.uint64).reshape(3, -1)
    rebuilt = np.zeros(dense3.shape, vdt)
    rebuilt[tuple(coords.astype(np.int64))] = ref_component(ref, path, "coo3", "values", vdt)
    assert_same(rebuilt, dense3)


# -- the reference writes, tensorfile reads ------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", ZT_DTYPES)
def test_reference_dense_reads_in_tensorfile(
    ref: Any, tmp_path: Path, dtype: str, compress: bool
) -> None:
    tensors = {
        "matrix": sample(dtype, (3, 4), seed=1),
        "vector": sample(dtype, (7,), seed=2),
        "cube": sample(dtype, (2, 3, 2), seed=3),
        "empty": sample(dtype, (0, 3)),
    }
    scalar = sample(dtype, (), seed=4)
    path = tmp_path / "ref.zt"
    with ref.Writer(str(path)) as w:
        for name, arr in tensors.items():
            w.add_tensor(name, arr, compress=compress)
        w.add_tensor("scalar", scalar, compress=compress)
    with zt.open(path) as f:
        assert f.catalog.extra["generator"].startswith("zTensor-Rust")
        assert sorted(f.keys()) == sorted([*tensors, "scalar"])
        for name, arr in tensors.items():
            info = f.info(name)
            assert info.dtype.ztensor_name == dtype
            assert info.data.encoding == ("zstd" if compress else "raw")
            assert_same(f.get_tensor(name), arr)
            if not compress and arr.size:
                assert_same(f.view(name), arr)
                assert_same(f.read_slice(name, (slice(1, None),)), arr[1:])
        # the reference stores a 0-d array with shape [1]
        assert_same(f.get_tensor("scalar"), scalar.reshape(1))
    got = zt.load_file(path, framework="pt")
    for name, arr in tensors.items():
        assert tuple(got[name].shape) == arr.shape
        flat = got[name].contiguous().reshape(-1)
        assert flat.view(torch.uint8).numpy().tobytes() == arr.tobytes()


@given(data=st.data(), dtype=st.sampled_from(ZT_DTYPES), compress=st.booleans())
@SETTINGS
def test_reference_dense_reads_in_tensorfile_hypothesis(
    ref: Any, tmp_path: Path, data: Any, dtype: str, compress: bool
) -> None:
    shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6)
    arr = data.draw(arrays(dtype, shapes), label="array")
    path = tmp_path / "rh.zt"
    with ref.Writer(str(path)) as w:
        w.add_tensor("t", arr, compress=compress)
    assert_same(zt.load_file(path)["t"], arr)


@pytest.mark.parametrize("dtype", SPARSE_DTYPES)
def test_reference_sparse_reads_in_tensorfile(ref: Any, tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(9)
    vdt = np_dtype(dtype)
    dense2 = (rng.integers(1, 9, (7, 5)) * (rng.random((7, 5)) < 0.35)).astype(vdt)
    dense3 = (rng.integers(1, 9, (2, 3, 4)) * (rng.random((2, 3, 4)) < 0.3)).astype(vdt)
    csr = zt.CSRTensor.from_dense(dense2)
    coo = zt.COOTensor.from_dense(dense2)
    coo3 = zt.COOTensor.from_dense(dense3)
    empty = np.empty(0, vdt)
    path = tmp_path / "rsp.zt"
    with ref.Writer(str(path)) as w:
        w.add_sparse_csr("csr", csr.values, csr.indices, csr.indptr, csr.shape)
        w.add_sparse_coo("coo", coo.values, coo.coords, coo.shape)
        w.add_sparse_coo("coo3", coo3.values, coo3.coords, coo3.shape)
        w.add_sparse_csr("csr_empty", empty, np.empty(0, np.uint64), np.zeros(4, np.uint64), (3, 6))
        w.add_sparse_coo("coo_empty", empty, np.empty((3, 0), np.uint64), (2, 2, 2))
    got = zt.load_file(path)
    assert isinstance(got["csr"], zt.CSRTensor)
    assert got["csr"].indptr.tolist() == csr.indptr.tolist()
    assert got["csr"].indices.tolist() == csr.indices.tolist()
    assert_same(got["csr"].to_dense(), dense2)
    assert isinstance(got["coo"], zt.COOTensor)
    assert got["coo"].coords.tolist() == coo.coords.tolist()
    assert_same(got["coo"].to_dense(), dense2)
    assert got["coo3"].shape == (2, 3, 4)
    assert_same(got["coo3"].to_dense(), dense3)
    assert got["csr_empty"].nnz == 0
    assert_same(got["csr_empty"].to_dense(), np.zeros((3, 6), vdt))
    assert got["coo_empty"].coords.shape == (3, 0)
    assert_same(got["coo_empty"].to_dense(), np.zeros((2, 2, 2), vdt))
    pt = zt.load_file(path, framework="pt")
    assert pt["csr"].layout == torch.sparse_csr
    assert pt["coo3"].layout == torch.sparse_coo
    assert pt["coo3"].shape == dense3.shape
    assert pt["coo3"]._indices().tolist() == coo3.coords.astype(np.int64).tolist()
    values = pt["coo3"]._values().contiguous().view(torch.uint8).numpy()
    assert values.tobytes() == coo3.values.tobytes()


def _ref_csr(ref: Any, path: Path, indices: list[int]) -> dict[str, Any]:
    """A 2x3 CSR tensor ``w`` written by the reference: row 0 holds 1.0, 2.0 at ``indices``,
    row 1 holds 4.0 at column 2; the arrays as given, and torch's dense form of them."""
    values, index = np.array([1.0, 2.0, 4.0], np.float32), np.array([*indices, 2], np.uint64)
    indptr = np.array([0, 2, 3], np.uint64)
    with ref.Writer(str(path)) as w:
        w.add_sparse_csr("w", values, index, indptr, (2, 3))
    assert ref_component(ref, path, "w", "indices", np.uint64).tolist() == index.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        t = torch.sparse_csr_tensor(
            torch.from_numpy(indptr.astype(np.int64)),
            torch.from_numpy(index.astype(np.int64)),
            torch.from_numpy(values),
            size=(2, 3),
        )
    return {"values": values, "indices": index, "indptr": indptr, "dense": t.to_dense().numpy()}


def _get(opener: Callable[[Path], Any], path: Path) -> Any:
    with opener(path) as f:
        return f.get_tensor("w")


CSR_READS: dict[str, Callable[[Path], Any]] = {
    "open": lambda path: _get(zt.open, path),
    "load_file": zt.load_file,
    "load_file-pt": lambda path: zt.load_file(path, framework="pt"),
    "tensorfile.open": lambda path: _get(tensorfile.open, path),
    "content_hash": content_hash,
}


@pytest.mark.parametrize("read", CSR_READS.values(), ids=CSR_READS.keys())
def test_reference_csr_with_a_cell_twice_is_refused(
    ref: Any, tmp_path: Path, read: Callable[[Path], Any]
) -> None:
    """The reference writes a CSR row naming a column twice as given, and it, torch and
    scipy read that cell as the sum; a plain assignment (the dense form tensorfile hashed)
    keeps one value, so the file had the content id of another tensor. No reading is the
    file's: every way in refuses it, naming the tensor and the row."""
    path = tmp_path / "twice.zt"
    csr = _ref_csr(ref, path, [1, 1])
    assert csr["dense"].tolist() == [[0.0, 3.0, 0.0], [0.0, 0.0, 4.0]]
    with pytest.raises(zt.ZTensorError, match=r"'w'.*row 0 holds column 1 more than once"):
        read(path)


def test_csr_with_a_cell_twice_is_not_written(tmp_path: Path) -> None:
    """tensorfile's v1 writer refuses what its reader refuses; in memory such a tensor's
    dense form is the sum, as its torch and scipy forms are."""
    twice = zt.CSRTensor(np.array([1.0, 2.0]), np.array([1, 1]), np.array([0, 2, 2]), (2, 3))
    assert twice.to_dense().tolist() == [[0.0, 3.0, 0.0], [0.0, 0.0, 0.0]]
    assert twice.to_torch().to_dense().tolist() == twice.to_dense().tolist()
    assert twice.to_scipy().toarray().tolist() == twice.to_dense().tolist()
    with pytest.raises(InvalidArgumentError, match="row 0 holds column 1 more than once"):
        zt.save_file({"w": twice}, tmp_path / "ours.zt")
    assert not (tmp_path / "ours.zt").exists()


def test_reference_csr_with_unsorted_rows_reads_sorted(ref: Any, tmp_path: Path) -> None:
    """zTensor v1.0 does not ask for sorted rows, and the reference writes them as given: a
    row whose columns are out of order reads as the same values with the row sorted (what
    torch's CSR tensors require), and gets the content id of the same dense tensor."""
    path = tmp_path / "unsorted.zt"
    csr = _ref_csr(ref, path, [2, 0])
    assert csr["dense"].tolist() == [[2.0, 0.0, 1.0], [0.0, 0.0, 4.0]]
    got = zt.load_file(path)["w"]
    assert got.indices.tolist() == [0, 2, 2]
    assert got.values.tolist() == [2.0, 1.0, 4.0]
    assert got.to_dense().tolist() == csr["dense"].tolist()
    assert got.to_scipy().toarray().tolist() == csr["dense"].tolist()
    t = got.to_torch()
    torch._validate_sparse_csr_tensor_args(t.crow_indices(), t.col_indices(), t.values(), t.shape)
    dense = tmp_path / "dense.zt"
    zt.save_file({"w": csr["dense"]}, dense)
    assert content_hash(path) == content_hash(dense)


def test_reference_torch_inputs_read_in_tensorfile(ref: Any, tmp_path: Path) -> None:
    tensors = {
        "bf16": torch.linspace(-4, 4, 10, dtype=torch.bfloat16),
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "b": torch.tensor([[True], [False]]),
    }
    path = tmp_path / "rt.zt"
    with ref.Writer(str(path)) as w:
        for name, t in tensors.items():
            w.add_tensor(name, t)
    got = zt.load_file(path, framework="pt")
    for name, t in tensors.items():
        assert got[name].dtype == t.dtype
        assert torch.equal(got[name], t)


def test_same_layout_as_reference(ref: Any, tmp_path: Path) -> None:
    """For raw tensors without digests, tensorfile lays a file out as the reference does: the
    same bytes up to the manifest, and the same manifest apart from the generator."""
    rng = np.random.default_rng(1)
    dense = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": np.arange(3, dtype=np.uint8),
        "c": np.zeros((0, 2), np.float64),
        "d": np.array([1, 2, 3, 4, 5], np.int16).astype(ml_dtypes.bfloat16),
    }
    sparse2 = np.where(rng.random((4, 6)) < 0.4, 1.0, 0.0).astype(np.float32)
    csr = zt.CSRTensor.from_dense(sparse2)
    coo = zt.COOTensor.from_dense(sparse2)
    ours, theirs = tmp_path / "ours.zt", tmp_path / "theirs.zt"
    with zt.Writer(ours) as w:
        for name, arr in dense.items():
            w.add(name, arr)
        w.add("csr", csr)
        w.add("coo", coo)
    with ref.Writer(str(theirs)) as w:
        for name, arr in dense.items():
            w.add_tensor(name, arr)
        w.add_sparse_csr("csr", csr.values, csr.indices, csr.indptr, csr.shape)
        w.add_sparse_coo("coo", coo.values, coo.coords, coo.shape)
    m_ours, start_ours = manifest_of(ours)
    m_theirs, start_theirs = manifest_of(theirs)
    assert start_ours == start_theirs
    assert ours.read_bytes()[:start_ours] == theirs.read_bytes()[:start_theirs]
    assert m_ours["generator"] != m_theirs["generator"]
    del m_ours["generator"], m_theirs["generator"]
    assert m_ours == m_theirs


# -- committed fixtures --------------------------------------------------------------------------


EXPECTED = make_fixtures.expected()


def test_fixture_files_are_present_and_small() -> None:
    present = sorted(p.name for p in FIXTURES.glob("*.zt"))
    assert present == sorted(EXPECTED)
    for name in present:
        size = (FIXTURES / name).stat().st_size
        assert 16 < size < 4096, (name, size)
    assert (FIXTURES / "README.md").is_file()


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_fixture_reads_in_tensorfile(file: str) -> None:
    path = FIXTURES / file
    expected = EXPECTED[file]
    manifest, _ = manifest_of(path)
    assert manifest["generator"].startswith("zTensor-Rust")
    with zt.open(path) as f:
        assert f.catalog.version == "1.0"
        assert sorted(f.keys()) == sorted(expected)
        for name, want in expected.items():
            info = f.info(name)
            got = f.get_tensor(name)
            if isinstance(want, np.ndarray):
                assert info.layout == "dense"
                compressed = (file, name) in make_fixtures.COMPRESSED
                assert info.data.encoding == ("zstd" if compressed else "raw")
                assert_same(got, want)
                if not compressed and want.size:
                    assert_same(f.view(name), want)
                continue
            assert info.layout == want["format"]
            assert got.shape == tuple(want["shape"])
            assert_same(got.values, want["values"])
            if want["format"] == "sparse_csr":
                assert isinstance(got, zt.CSRTensor)
                assert_same(got.indices, want["indices"])
                assert_same(got.indptr, want["indptr"])
            else:
                assert isinstance(got, zt.COOTensor)
                assert_same(got.coords, want["coords"])
            assert_same(got.to_dense(), want["dense"])


def test_fixtures_through_load_file_and_tensorfile_open() -> None:
    dense = zt.load_file(FIXTURES / "dense.zt")
    for name, want in EXPECTED["dense.zt"].items():
        assert_same(dense[name], want)
    pt = zt.load_file(FIXTURES / "zstd.zt", framework="pt")
    assert pt["weights"].numpy().tobytes() == EXPECTED["zstd.zt"]["weights"].tobytes()
    coo = zt.load_file(FIXTURES / "coo.zt", framework="pt")
    assert coo["cube"].to_dense().numpy().tobytes() == EXPECTED["coo.zt"]["cube"]["dense"].tobytes()
    with tensorfile.open(FIXTURES / "csr.zt") as f:
        assert f.format == "ztensor"
        assert_same(f.get_tensor("adjacency").to_dense(), EXPECTED["csr.zt"]["adjacency"]["dense"])
    with tensorfile.open((FIXTURES / "dense.zt").read_bytes()) as f:
        assert_same(f.read_slice("f32", (slice(1, 3), 2)), EXPECTED["dense.zt"]["f32"][1:3, 2])


def test_make_fixtures_reproduces_committed_bytes(ref: Any, tmp_path: Path) -> None:
    for path in make_fixtures.write(tmp_path):
        assert path.read_bytes() == (FIXTURES / path.name).read_bytes(), path.name
