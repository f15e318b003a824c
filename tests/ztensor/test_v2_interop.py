"""zTensor v2 interoperability with the reference, ztensor 2.1.2 (run in its own interpreter,
see ``zt2.py``): files tensorfile writes read back in ztensor 2.1.2 part for part and byte for
byte, files ztensor 2.1.2 writes load in tensorfile value for value, on every storage and
logical type, dense, CSR and COO, raw and ``zt.zstd-seekable/1``, with xxh3 and sha256
digests and attributes of every CBOR type; and canonical form is the same file in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile import ztensor
from tests.ztensor import zt2

ATTRIBUTES: dict[str, Any] = {
    "license": "MIT",
    "epoch": 3,
    "loss": -1.25,
    "tags": ["a", 2, None, True, 1.1],
    "nested": {"k": {"deep": [1, 2, 3]}, "raw": b"\x00\x01\xff"},
    "neg": -(2**63),
    "big": 2**64 - 1,
}

REF_ATTRIBUTES: dict[str, Any] = {
    **ATTRIBUTES,
    "nested": {"k": {"deep": [1, 2, 3]}},  # (the reference's Python writer takes no bytes)
}

TYPES: dict[str, tuple[str, str | None, Any]] = {
    # name: (storage dtype, logical type, numpy dtype)
    "f64": ("f64", None, np.float64),
    "f32": ("f32", None, np.float32),
    "f16": ("f16", None, np.float16),
    "bf16": ("bf16", None, ml_dtypes.bfloat16),
    "i64": ("i64", None, np.int64),
    "i32": ("i32", None, np.int32),
    "i16": ("i16", None, np.int16),
    "i8": ("i8", None, np.int8),
    "u64": ("u64", None, np.uint64),
    "u32": ("u32", None, np.uint32),
    "u16": ("u16", None, np.uint16),
    "u8": ("u8", None, np.uint8),
    "bool": ("u8", "bool", np.bool_),
    "f8_e4m3fn": ("u8", "f8_e4m3fn", ml_dtypes.float8_e4m3fn),
    "f8_e5m2": ("u8", "f8_e5m2", ml_dtypes.float8_e5m2),
    "f8_e4m3fnuz": ("u8", "f8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
    "f8_e5m2fnuz": ("u8", "f8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
    "f8_e8m0": ("u8", "f8_e8m0", ml_dtypes.float8_e8m0fnu),
    "f4_e2m1": ("u8", "f4_e2m1", ml_dtypes.float4_e2m1fn),
    "complex64": ("f32", "complex64", np.complex64),
    "complex128": ("f64", "complex128", np.complex128),
}


def sample(kind: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """A deterministic array of ``kind`` (every bit pattern for the integer types)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(TYPES[kind][2])
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if kind == "f4_e2m1":
        return rng.integers(0, 16, size=shape).astype(np.uint8).view(dt)
    if kind in ("complex64", "complex128"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if kind.startswith(("f8", "bf16", "f16", "f32", "f64")):
        values = rng.standard_normal(n) * 4
        return values.astype(dt).reshape(shape)
    return rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def stored(arr: np.ndarray[Any, Any]) -> bytes:
    """The decoded bytes zTensor v2 gives an array (written independently of tensorfile:
    f4 two codes a byte, low nibble first; bool 0/1; little-endian)."""
    if arr.dtype == ml_dtypes.float4_e2m1fn:
        codes = arr.reshape(-1).view(np.uint8) & 0x0F
        if codes.size % 2:
            codes = np.append(codes, np.uint8(0))
        return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).tobytes()
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8).tobytes()
    return arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def samples() -> dict[str, Any]:
    out: dict[str, Any] = {kind: sample(kind, (3, 5), i) for i, kind in enumerate(TYPES)}
    out["f4_odd"] = sample("f4_e2m1", (7,), 99)
    out["scalar"] = np.float64(2.5)
    out["empty"] = np.zeros((0, 3), np.int32)
    out["big"] = sample("f32", (700_000,), 7)  # 2.8 MB: three seekable frames
    out["tied"] = out["f32"].copy()
    dense = np.where(sample("f32", (6, 9), 5) > 0.5, sample("f32", (6, 9), 6), 0).astype(np.float32)
    out["csr"] = ztensor.CSRTensor.from_dense(dense)
    out["csr_bf16"] = ztensor.CSRTensor.from_dense(dense.astype(ml_dtypes.bfloat16))
    out["coo"] = ztensor.COOTensor.from_dense((sample("i16", (4, 3, 5), 8) % 3).astype(np.int16))
    return out


def expected_parts(value: Any) -> tuple[str, dict[str, tuple[str, str | None, bytes]]]:
    """(layout id, {part: (dtype, logical, decoded bytes)}) zTensor v2 stores for ``value``."""

    def names(arr: np.ndarray[Any, Any]) -> tuple[str, str | None]:
        kind = next(k for k, v in TYPES.items() if np.dtype(v[2]) == arr.dtype)
        return TYPES[kind][0], TYPES[kind][1]

    if isinstance(value, ztensor.CSRTensor):
        return "zt.sparse_csr/1", {
            "values": (*names(value.values), stored(value.values)),
            "indices": ("u64", None, value.indices.astype("<u8").tobytes()),
            "indptr": ("u64", None, value.indptr.astype("<u8").tobytes()),
        }
    if isinstance(value, ztensor.COOTensor):
        return "zt.sparse_coo/1", {
            "values": (*names(value.values), stored(value.values)),
            "coords": ("u64", None, value.coords.astype("<u8").tobytes()),  # (ndim, nnz): SoA
        }
    arr = np.asarray(value)
    return "dense", {"data": (*names(arr), stored(arr))}


def shape_of(value: Any) -> list[int]:
    return list(value.shape) if hasattr(value, "shape") else []


def assert_equal_values(got: Any, want: Any, name: str) -> None:
    if isinstance(want, ztensor.CSRTensor | ztensor.COOTensor):
        assert type(got) is type(want), name
        assert got.values.dtype == want.values.dtype, name
        assert np.array_equal(got.to_dense(), want.to_dense(), equal_nan=True), name
        return
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
    assert got.tobytes() == want.tobytes(), name


# -- tensorfile writes, ztensor 2.1.2 reads ------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"checksum": "xxh3"},
        {"checksum": "sha256", "align": 4096},
        {"compression": "zstd", "checksum": "xxh3"},
        {"compression": "zstd", "checksum": "sha256", "align": 12288, "level": 9},
        {"compression": "zstd"},
    ],
    ids=["raw", "raw-xxh3", "raw-sha256-4k", "zstd-xxh3", "zstd-sha256-12k", "zstd"],
)
def test_reference_reads_what_tensorfile_writes(tmp_path: Path, options: dict[str, Any]) -> None:
    tensors = samples()
    path = tmp_path / "tf.zt"
    ztensor.save_file(tensors, path, version=2, attributes=ATTRIBUTES, **options)
    got = zt2.read(path)
    assert got["attributes"] == zt2.to_json(ATTRIBUTES)
    assert sorted(got["objects"]) == sorted(tensors)
    parts = 0
    for name, value in tensors.items():
        obj = got["objects"][name]
        layout, want = expected_parts(value)
        assert obj["layout"] == layout and obj["shape"] == shape_of(value), name
        assert sorted(obj["parts"]) == sorted(want), name
        for role, (dtype, logical, data) in want.items():
            part = obj["parts"][role]
            assert (part["dtype"], part["logical"]) == (dtype, logical), (name, role)
            assert part["bytes"].tobytes() == data, (name, role)
            assert part["verified"] is bool(options.get("checksum")), (name, role)
            parts += 1
    digested = parts if options.get("checksum") else 0
    assert got["verify"] == [digested, parts - digested]


# -- ztensor 2.1.2 writes, tensorfile reads ------------------------------------------------------


def reference_objects(tensors: dict[str, Any], encoding: str | None) -> dict[str, Any]:
    objects = {}
    for name, value in tensors.items():
        layout, want = expected_parts(value)
        objects[name] = {
            "shape": shape_of(value),
            "layout": layout,
            "parts": {
                role: {"dtype": d, "logical": lt, "bytes": data, "encoding": encoding}
                for role, (d, lt, data) in want.items()
            },
        }
    return objects


@pytest.mark.parametrize(
    ("canonical", "align", "encoding"),
    [(True, None, None), (False, 4096, None), (False, 8192, "zt.zstd-seekable/1")],
    ids=["canonical", "raw-4k", "zstd-8k"],
)
def test_tensorfile_reads_what_the_reference_writes(
    tmp_path: Path, canonical: bool, align: int | None, encoding: str | None
) -> None:
    tensors = samples()
    path = tmp_path / "ref.zt"
    zt2.write(
        path,
        reference_objects(tensors, encoding),
        attributes=REF_ATTRIBUTES,
        canonical=canonical,
        align=align,
    )
    with ztensor.open(path) as f:
        assert f.catalog.version == "2"
        assert f.attributes == REF_ATTRIBUTES
        assert f.metadata["license"] == "MIT" and f.metadata["epoch"] == "3"
        assert f.verify_all() == (sum(len(expected_parts(v)[1]) for v in tensors.values()), 0)
        for name, value in tensors.items():
            assert_equal_values(f.get_tensor(name), value, name)
            if encoding and f.info(name).layout == "dense":
                assert f.info(name).data.encoding == encoding
    loaded = ztensor.load_file(path)
    for name, value in tensors.items():
        assert_equal_values(loaded[name], value, name)
    with tensorfile.open(path) as f:  # the format registry finds it too
        assert f.format == "ztensor" and sorted(f.keys()) == sorted(tensors)


def test_canonical_form_is_the_reference_file(tmp_path: Path) -> None:
    tensors = samples()
    tensors.pop("big")
    ours = tmp_path / "ours.zt"
    shuffled = dict(reversed(list(tensors.items())))  # insertion order does not matter
    ztensor.save_file(shuffled, ours, version=2, checksum="xxh3", attributes=REF_ATTRIBUTES)
    theirs = tmp_path / "theirs.zt"
    zt2.write(theirs, reference_objects(tensors, None), attributes=REF_ATTRIBUTES)
    assert ours.read_bytes() == theirs.read_bytes()
    # identical parts share one blob; blobs start at 65536, 64 KiB apart
    with ztensor.open(ours) as f:
        assert f.info("tied").data.range == f.info("f32").data.range
        starts = {c.range.start for i in f.catalog.tensors.values() for c in i.components.values()}
        assert min(starts) == 65536 and all(s % 65536 == 0 for s in starts)


def test_canonical_form_without_attributes_and_with_a_large_tensor(tmp_path: Path) -> None:
    tensors = {"b": sample("f32", (600_000,), 1), "a": sample("u8", (5,), 2)}
    ours, theirs = tmp_path / "ours.zt", tmp_path / "theirs.zt"
    ztensor.save_file(tensors, ours, version=2, checksum="xxh3")
    zt2.write(theirs, reference_objects(tensors, None))
    assert ours.read_bytes() == theirs.read_bytes()


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=6),
    shapes=st.lists(st.lists(st.integers(0, 5), max_size=3), min_size=6, max_size=6),
    seed=st.integers(0, 2**16),
    compression=st.sampled_from([None, "zstd"]),
)
def test_random_tensors_round_trip_through_the_reference(
    tmp_path: Path, kinds: list[str], shapes: list[list[int]], seed: int, compression: str | None
) -> None:
    tensors = {f"t{i}.{k}": sample(k, tuple(shapes[i]), seed + i) for i, k in enumerate(kinds)}
    path = tmp_path / f"r{seed}.zt"
    ztensor.save_file(tensors, path, version=2, compression=compression, checksum="xxh3")
    got = zt2.read(path)
    for name, value in tensors.items():
        assert got["objects"][name]["parts"]["data"]["bytes"].tobytes() == stored(value), name
    back = tmp_path / f"b{seed}.zt"
    zt2.write(back, reference_objects(tensors, None))
    loaded = ztensor.load_file(back)
    for name, value in tensors.items():
        assert_equal_values(loaded[name], value, name)
