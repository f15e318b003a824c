"""tensorfile.dataset.write: layout, batch and KV modes, every input kind, read-back equality,
reference loads of every shard, the tensor index, and values converted exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.torch
import torch

from tensorfile import dataset
from tensorfile.errors import InvalidArgumentError
from tests.helpers.checkpoints import reference_load, shard_files
from tests.helpers.manifests import (
    INDEX,
    SHARD_RE,
    assert_valid_manifest,
    load_manifest,
    real_dtype,
    schema_errors,
)
from tests.helpers.samples import assert_same, assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]
KINDS = ["dict", "table", "record_batch", "record_batches", "pandas"]


# -- inputs ---------------------------------------------------------------------------------


def _arrow_array(values: Any) -> pa.Array:
    if isinstance(values, list):
        return pa.array(values)
    arr = np.asarray(values)
    if arr.ndim == 1:
        return pa.array(arr)
    typ = pa.from_numpy_dtype(arr.dtype)
    for _ in range(arr.ndim - 1):
        typ = pa.list_(typ)
    return pa.array(arr.tolist(), type=typ)


def make_input(kind: str, cols: dict[str, Any]) -> Any:
    """The same columns as a dict of numpy arrays, an Arrow table, one or several record
    batches, or a pandas DataFrame (multi-dimensional samples as object columns)."""
    if kind == "dict":
        return dict(cols)
    if kind == "pandas":
        return pd.DataFrame(
            {
                c: (v if isinstance(v, list) or np.asarray(v).ndim == 1 else list(v))
                for c, v in cols.items()
            }
        )
    table = pa.table({c: _arrow_array(v) for c, v in cols.items()})
    if kind == "table":
        return table
    if kind == "record_batch":
        return table.combine_chunks().to_batches()[0]
    assert kind == "record_batches"
    batches = table.combine_chunks().to_batches(max_chunksize=3)
    assert len(batches) > 1
    return batches


def batch_columns(n: int = 7) -> dict[str, NDArray]:
    rng = np.random.default_rng(n)
    return {
        "x": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "id": np.arange(n, dtype=np.int64) * 3 - 5,
        "y": rng.integers(-100, 100, (n, 4)).astype(np.int32),
    }


def ref_shards(folder: Path) -> dict[str, dict[str, NDArray]]:
    """Every listed shard, loaded with the reference safetensors library."""
    doc = load_manifest(folder)
    return {s["shard_path"]: reference_load(folder, s["shard_path"]) for s in doc["shards"]}


# -- batch mode -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_batch_mode_every_input_kind(tmp_path: Path, kind: str) -> None:
    cols = batch_columns(7)
    out = tmp_path / "ds"
    m = dataset.write(make_input(kind, cols), out, batch_size=3)
    doc = assert_valid_manifest(out)
    assert m.total_samples == doc["total_samples"] == 7
    assert [s["samples_count"] for s in doc["shards"]] == [3, 3, 1]
    assert doc["schema"] == {
        "x": {"dtype": "F32", "shape": [3, 2, 3]},
        "id": {"dtype": "I64", "shape": [3]},
        "y": {"dtype": "I32", "shape": [3, 4]},
    }
    # every shard loads with the reference library: one tensor per column, [rows, *sample]
    start = 0
    for shard in doc["shards"]:
        tensors = reference_load(out, shard["shard_path"])
        n = shard["samples_count"]
        assert set(tensors) == {"x", "id", "y"}
        for c, v in cols.items():
            assert_same(tensors[c], v[start : start + n])
        start += n
    assert_samples(list(dataset.open(out)), expected_rows(cols, 7))


def test_shard_names_follow_the_spec(tmp_path: Path) -> None:
    dataset.write({"x": np.arange(11, dtype=np.int16)}, tmp_path, batch_size=2)
    names = shard_files(tmp_path)
    assert names == listed_sorted(tmp_path)
    parts = [SHARD_RE.match(n) for n in names]
    assert all(parts), names
    assert [p.group(1) for p in parts if p] == ["00000"] * 6
    assert [p.group(2) for p in parts if p] == [f"{k:04d}" for k in range(6)]
    assert len({p.group(3) for p in parts if p}) == 1  # one uuid per writer


def listed_sorted(folder: Path) -> list[str]:
    return sorted(s["shard_path"] for s in load_manifest(folder)["shards"])


@pytest.mark.parametrize(
    ("tail", "counts", "tensor_rows", "total", "real"),
    [
        ("write", [4, 4, 2], [4, 4, 2], 10, 10),
        ("pad", [4, 4, 4], [4, 4, 4], 12, 10),  # samples_count: the rows stored, as the reference
        ("drop", [4, 4], [4, 4], 8, 8),
    ],
)
def test_tail_strategies(
    tmp_path: Path, tail: str, counts: list[int], tensor_rows: list[int], total: int, real: int
) -> None:
    cols = {
        "x": np.arange(1, 31, dtype=np.float64).reshape(10, 3),
        "k": np.arange(1, 11, dtype=np.uint8),
    }
    dataset.write(cols, tmp_path, batch_size=4, tail_strategy=tail)
    doc = assert_valid_manifest(tmp_path)
    assert [s["samples_count"] for s in doc["shards"]] == counts
    assert doc["total_samples"] == total
    shards = [reference_load(tmp_path, s["shard_path"]) for s in doc["shards"]]
    assert [t["x"].shape for t in shards] == [(r, 3) for r in tensor_rows]
    assert [t["k"].shape for t in shards] == [(r,) for r in tensor_rows]
    if tail == "pad":  # the padding rows are zeros, the real rows come first
        last = shards[-1]
        assert_same(last["x"][:2], cols["x"][8:])
        assert np.all(last["x"][2:] == 0)
        assert np.all(last["k"][2:] == 0)
        assert last["k"].dtype == np.uint8
        assert doc["tensorfile"]["real_samples"] == {doc["shards"][-1]["shard_path"]: 2}
    else:
        assert "real_samples" not in doc["tensorfile"]
    ds = dataset.open(tmp_path)
    assert len(ds) == real
    assert_samples(list(ds), expected_rows(cols, real))  # padding is never a sample


@pytest.mark.parametrize("tail", ["write", "pad", "drop"])
def test_tail_strategy_when_rows_divide_evenly(tmp_path: Path, tail: str) -> None:
    cols = {"x": np.arange(8, dtype=np.int32)}
    dataset.write(cols, tmp_path, batch_size=4, tail_strategy=tail)
    doc = assert_valid_manifest(tmp_path)
    assert [s["samples_count"] for s in doc["shards"]] == [4, 4]
    assert [reference_load(tmp_path, s["shard_path"])["x"].shape for s in doc["shards"]] == [
        (4,),
        (4,),
    ]


def test_pad_when_all_rows_fit_in_one_short_batch(tmp_path: Path) -> None:
    cols = {"x": np.array([1.5, 2.5], np.float32)}
    dataset.write(cols, tmp_path, batch_size=5, tail_strategy="pad")
    doc = assert_valid_manifest(tmp_path)
    assert [s["samples_count"] for s in doc["shards"]] == [5]
    assert doc["tensorfile"]["real_samples"] == {doc["shards"][0]["shard_path"]: 2}
    t = reference_load(tmp_path, doc["shards"][0]["shard_path"])["x"]
    assert t.tolist() == [1.5, 2.5, 0, 0, 0]
    assert [float(s["x"]) for s in dataset.open(tmp_path)] == [1.5, 2.5]


@pytest.mark.parametrize("options", [{"batch_size": 4}, {"name_col": "name"}])
def test_empty_input_writes_an_empty_shard_list(tmp_path: Path, options: dict[str, Any]) -> None:
    """Documented deviation: the JSON schema requires ``minItems: 1`` shards; a dataset of no
    rows is written with ``shards: []`` and that is the only violation."""
    data: dict[str, Any] = {"x": np.empty((0, 3), np.float32)}
    if "name_col" in options:
        data["name"] = []
    m = dataset.write(data, tmp_path, **options)
    doc = load_manifest(tmp_path)
    assert doc["shards"] == []
    assert doc["total_samples"] == doc["total_bytes"] == 0
    assert m.total_samples == 0
    errors = schema_errors(doc)
    assert len(errors) == 1
    assert errors[0].startswith("shards:")
    assert shard_files(tmp_path) == []
    ds = dataset.open(tmp_path)
    assert len(ds) == 0
    assert list(ds) == []
    assert list(ds.batches(2)) == []


def test_drop_of_the_only_partial_batch_leaves_no_shard(tmp_path: Path) -> None:
    dataset.write({"x": np.ones(3, np.float32)}, tmp_path, batch_size=4, tail_strategy="drop")
    doc = load_manifest(tmp_path)
    assert doc["shards"] == [] and doc["total_samples"] == 0
    assert shard_files(tmp_path) == []
    assert len(dataset.open(tmp_path)) == 0


# -- columns, shapes, dtype -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dict", "table", "pandas"])
def test_columns_option_selects_columns(tmp_path: Path, kind: str) -> None:
    cols = batch_columns(5)
    dataset.write(make_input(kind, cols), tmp_path, batch_size=5, columns="y, id")
    doc = assert_valid_manifest(tmp_path)
    assert set(doc["schema"]) == {"y", "id"}
    (shard,) = ref_shards(tmp_path).values()
    assert set(shard) == {"y", "id"}
    ds = dataset.open(tmp_path)
    assert set(ds.schema) == {"y", "id"}
    assert_samples(list(ds), expected_rows({"y": cols["y"], "id": cols["id"]}, 5))


@pytest.mark.parametrize("kind", ["dict", "table", "pandas"])
def test_shapes_option_reshapes_samples(tmp_path: Path, kind: str) -> None:
    flat = np.arange(30, dtype=np.float32).reshape(5, 6)
    dataset.write(make_input(kind, {"x": flat}), tmp_path, batch_size=2, shapes='{"x": [2, 3]}')
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["x"] == {"dtype": "F32", "shape": [2, 2, 3]}
    assert reference_load(tmp_path, doc["shards"][0]["shard_path"])["x"].shape == (2, 2, 3)
    ds = dataset.open(tmp_path)
    assert ds.schema == {"x": {"dtype": "F32", "shape": [2, 3]}}
    assert_samples(list(ds), expected_rows({"x": flat.reshape(5, 2, 3)}, 5))


def test_shapes_option_as_a_mapping_and_in_kv_mode(tmp_path: Path) -> None:
    data = {"name": ["a", "b"], "v": np.arange(8, dtype=np.int16).reshape(2, 4)}
    dataset.write(data, tmp_path, name_col="name", shapes={"v": [2, 2]})
    tensors = next(iter(ref_shards(tmp_path).values()))
    assert {k: v.shape for k, v in tensors.items()} == {"a__v": (2, 2), "b__v": (2, 2)}
    assert_same(tensors["b__v"], np.arange(4, 8, dtype=np.int16).reshape(2, 2))


@pytest.mark.parametrize("kind", ["dict", "table", "pandas"])
@pytest.mark.parametrize("shape", [[4], [2, 2], [7], [0]])
def test_mismatched_shapes_are_rejected(tmp_path: Path, kind: str, shape: list[int]) -> None:
    flat = np.arange(30, dtype=np.float32).reshape(5, 6)
    with pytest.raises(InvalidArgumentError, match="'x'"):
        dataset.write(make_input(kind, {"x": flat}), tmp_path, batch_size=2, shapes={"x": shape})
    assert not os.path.exists(tmp_path / "dataset_manifest.json")


ALL_DTYPES = ["F16", "F32", "F64", "BF16", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"]


@pytest.mark.parametrize("target", ALL_DTYPES)
def test_dtype_option_converts_every_column(tmp_path: Path, target: str) -> None:
    np_type = np.dtype(
        {"BF16": ml_dtypes.bfloat16}.get(target)
        or {
            "F16": "float16",
            "F32": "float32",
            "F64": "float64",
            "U8": "uint8",
            "I8": "int8",
            "U16": "uint16",
            "I16": "int16",
            "U32": "uint32",
            "I32": "int32",
            "U64": "uint64",
            "I64": "int64",
        }[target]
    )
    floats = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], np.float64)
    ints = np.array([[7, 1, 2], [8, 3, 4], [9, 5, 6]], np.int64)
    ids = np.array([10, 11, 12], np.int32)
    dataset.write({"f": floats, "i": ints, "id": ids}, tmp_path, batch_size=3, dtype=target)
    doc = assert_valid_manifest(tmp_path)
    # the dtype option converts the array columns; a scalar column (an id) keeps its own type
    dtypes = {c: s["dtype"] for c, s in doc["schema"].items()}
    assert dtypes == {"f": target, "i": target, "id": "I32"}
    tensors = next(iter(ref_shards(tmp_path).values()))
    assert_same(tensors["f"], floats.astype(np_type))
    assert_same(tensors["i"], ints.astype(np_type))
    assert_same(tensors["id"], ids)
    ds = dataset.open(tmp_path)
    assert ds.schema == {
        "f": {"dtype": target, "shape": [2]},
        "i": {"dtype": target, "shape": [3]},
        "id": {"dtype": "I32", "shape": []},
    }
    assert_same(ds[1]["f"], floats[1].astype(np_type))
    assert_same(ds[2]["i"], ints[2].astype(np_type))


NUMPY_OWN = [
    (np.float16, "F16"),
    (np.float32, "F32"),
    (np.float64, "F64"),
    (ml_dtypes.bfloat16, "BF16"),
    (np.uint8, "U8"),
    (np.int8, "I8"),
    (np.uint16, "U16"),
    (np.int16, "I16"),
    (np.uint32, "U32"),
    (np.int32, "I32"),
    (np.uint64, "U64"),
    (np.int64, "I64"),
    (np.bool_, "BOOL"),
]


@pytest.mark.parametrize(("np_type", "name"), NUMPY_OWN)
def test_columns_keep_their_own_dtype(tmp_path: Path, np_type: Any, name: str) -> None:
    values = (np.arange(12) % 5 > 1) if name == "BOOL" else np.arange(12).astype(np_type)
    values = values.reshape(4, 3)
    dataset.write({"v": values}, tmp_path, batch_size=4)
    doc = assert_valid_manifest(tmp_path)  # BOOL: a U8 stand-in, the real dtype in tensorfile
    assert doc["schema"]["v"] == {"dtype": "U8" if name == "BOOL" else name, "shape": [4, 3]}
    assert real_dtype(doc, "v") == name
    assert_same(next(iter(ref_shards(tmp_path).values()))["v"], values)
    assert_samples(list(dataset.open(tmp_path)), expected_rows({"v": values}, 4))


@pytest.mark.parametrize(
    ("arrow_type", "name"),
    [
        (pa.float16(), "F16"),
        (pa.float32(), "F32"),
        (pa.float64(), "F64"),
        (pa.uint8(), "U8"),
        (pa.int8(), "I8"),
        (pa.uint16(), "U16"),
        (pa.int16(), "I16"),
        (pa.uint32(), "U32"),
        (pa.int32(), "I32"),
        (pa.uint64(), "U64"),
        (pa.int64(), "I64"),
        (pa.bool_(), "BOOL"),
    ],
)
def test_arrow_types_map_to_dtypes(tmp_path: Path, arrow_type: pa.DataType, name: str) -> None:
    if name == "BOOL":
        scalars = pa.array([True, False, True], arrow_type)
    else:
        scalars = pa.array(np.array([1, 2, 3]).astype(arrow_type.to_pandas_dtype()), arrow_type)
    table = pa.table({"s": scalars})
    dataset.write(table, tmp_path, batch_size=3)
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["s"] == {"dtype": "U8" if name == "BOOL" else name, "shape": [3]}
    assert real_dtype(doc, "s") == name
    got = next(iter(ref_shards(tmp_path).values()))["s"]
    assert_same(got, scalars.to_numpy(zero_copy_only=False))


def test_int_values_that_do_not_fit_the_dtype_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"'v'.*I8"):
        dataset.write({"v": np.array([[1, 200]], np.int64)}, tmp_path, batch_size=2, dtype="I8")
    with pytest.raises(InvalidArgumentError, match="'v'"):
        dataset.write({"v": np.array([[-1, 2]], np.int32)}, tmp_path, batch_size=2, dtype="U32")


# -- exact values -----------------------------------------------------------------------------

BIG_SIGNED = [2**53 + 1, 2**63 - 1, -(2**63), -(2**53) - 1, 2**62 + 3]
BIG_UNSIGNED = [2**64 - 1, 2**53 + 1, 2**63 + 7, 0, 2**60 + 1]


@pytest.mark.parametrize("kind", KINDS)
def test_int64_and_uint64_are_exact_beyond_2_53(tmp_path: Path, kind: str) -> None:
    cols = {
        "s": np.array(BIG_SIGNED, np.int64),
        "u": np.array(BIG_UNSIGNED, np.uint64),
        "sv": np.array([[v, -v - 1] for v in [2**53 + 1, 2**62 + 3, -(2**53) - 1, 5, 2**63 - 2]]),
    }
    dataset.write(make_input(kind, cols), tmp_path, batch_size=5)
    doc = assert_valid_manifest(tmp_path)
    assert {c: s["dtype"] for c, s in doc["schema"].items()} == {
        "s": "I64",
        "u": "U64",
        "sv": "I64",
    }
    tensors = next(iter(ref_shards(tmp_path).values()))
    for c, v in cols.items():
        assert_same(tensors[c], v)
    assert [int(s["s"]) for s in dataset.open(tmp_path)] == BIG_SIGNED
    assert [int(s["u"]) for s in dataset.open(tmp_path)] == BIG_UNSIGNED


def test_python_int_lists_are_exact(tmp_path: Path) -> None:
    dataset.write({"s": list(BIG_SIGNED)}, tmp_path / "s", batch_size=5)
    dataset.write({"u": list(BIG_UNSIGNED)}, tmp_path / "u", batch_size=5)
    assert [int(s["s"]) for s in dataset.open(tmp_path / "s")] == BIG_SIGNED
    assert [int(s["u"]) for s in dataset.open(tmp_path / "u")] == BIG_UNSIGNED


def test_uint64_option_from_int64_source_is_exact(tmp_path: Path) -> None:
    values = np.array([[2**62 + 1, 2**53 + 1, 5], [2**63 - 1, 2**53 + 3, 0]], np.int64)
    dataset.write({"v": values}, tmp_path, batch_size=3, dtype="U64")
    got = next(iter(ref_shards(tmp_path).values()))["v"]
    assert got.dtype == np.uint64
    assert got.tolist() == values.tolist()


def _bf16_cases() -> NDArray:
    """float32 values whose low 16 bits are below, at and above half a BF16 ULP."""
    rng = np.random.default_rng(1)
    hi = rng.integers(0x0080, 0x7F00, 400, dtype=np.uint32) << 16
    hi[::2] |= 0x80000000
    lows = np.array([0x7FFF, 0x8000, 0x8001, 0x0001, 0xFFFF, 0x1234, 0xC000], np.uint32)
    bits = (hi[:, None] | lows[None, :]).reshape(-1)
    # ties: the even and the odd upper half
    ties = [0x3F808000, 0x3F818000, 0xBF808000, 0x3F828000, 0x3F838000, 0xC0018000, 0x40008000]
    bits = np.concatenate([bits, np.array(ties, np.uint32)])
    return bits.view(np.float32)


def _f16_cases() -> NDArray:
    """float32 values in the normal F16 range with every kind of discarded low bits."""
    rng = np.random.default_rng(2)
    exp = rng.integers(127 - 14, 127 + 16, 600, dtype=np.uint32)
    mant = rng.integers(0, 1 << 23, 600, dtype=np.uint32)
    mant[:50] = (mant[:50] & ~np.uint32(0x1FFF)) | 0x1000  # exact ties
    sign = (rng.integers(0, 2, 600, dtype=np.uint32)) << 31
    return (sign | (exp << 23) | mant).view(np.float32)


def _truncate_f16(x: NDArray) -> NDArray:
    """Bit truncation of normal-range float32 to float16, written from the IEEE layout."""
    bits = x.view(np.uint32)
    sign = (bits >> 31) << 15
    exp = ((bits >> 23) & 0xFF) - 127 + 15
    mant = (bits & 0x7FFFFF) >> 13
    return (sign | (exp << 10) | mant).astype(np.uint16).view(np.float16)


@pytest.mark.parametrize("kind", ["dict", "table", "pandas"])
@pytest.mark.parametrize("rounding", [None, "nearest_even", "truncate"])
def test_bf16_rounding(tmp_path: Path, kind: str, rounding: str | None) -> None:
    x = _bf16_cases().reshape(-1, 7)
    rne = x.astype(ml_dtypes.bfloat16)
    trunc = (x.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)
    assert np.count_nonzero(rne.view(np.uint16) != trunc.view(np.uint16)) > 100  # discriminates
    options: dict[str, Any] = {"batch_size": len(x), "dtype": "BF16"}
    if rounding:
        options["rounding"] = rounding
    dataset.write(make_input(kind, {"v": x}), tmp_path, **options)
    got = next(iter(ref_shards(tmp_path).values()))["v"]
    assert_same(got, trunc if rounding == "truncate" else rne)


@pytest.mark.parametrize("rounding", [None, "nearest_even", "truncate"])
def test_f16_rounding(tmp_path: Path, rounding: str | None) -> None:
    x = _f16_cases()
    rne = x.astype(np.float16)
    trunc = _truncate_f16(x)
    assert np.count_nonzero(rne.view(np.uint16) != trunc.view(np.uint16)) > 100
    options: dict[str, Any] = {"batch_size": 100, "dtype": "F16"}
    if rounding:
        options["rounding"] = rounding
    dataset.write({"v": x.reshape(-1, 6)}, tmp_path, **options)
    got = np.concatenate([s["v"] for s in dataset.open(tmp_path).batches(1000)]).reshape(-1)
    assert_same(got, trunc if rounding == "truncate" else rne)
    ref = np.concatenate(
        [reference_load(tmp_path, p)["v"] for p in listed_sorted(tmp_path)]
    ).reshape(-1)
    assert_same(ref, got)


def test_rounding_from_float64_and_in_kv_mode(tmp_path: Path) -> None:
    x = _bf16_cases().astype(np.float64)[:20].reshape(10, 2) + 1e-12
    names = [f"k{i}" for i in range(10)]
    dataset.write({"n": names, "v": x}, tmp_path, name_col="n", dtype="BF16")
    tensors = next(iter(ref_shards(tmp_path).values()))
    for i, n in enumerate(names):
        assert_same(tensors[f"{n}__v"], x[i].astype(ml_dtypes.bfloat16))


def test_rounding_only_affects_f16_and_bf16(tmp_path: Path) -> None:
    x = _bf16_cases()[:30]
    x = x.reshape(10, 3)
    dataset.write({"v": x}, tmp_path, batch_size=30, dtype="F32", rounding="truncate")
    assert_same(next(iter(ref_shards(tmp_path).values()))["v"], x)


# -- BOOL and F8 (extensions) -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bool_columns(tmp_path: Path, kind: str) -> None:
    cols = {
        "b": np.array([True, False, True, True, False, False]),
        "m": np.array([[True, False]] * 3 + [[False, True]] * 3),
    }
    dataset.write(make_input(kind, cols), tmp_path, batch_size=4)
    doc = assert_valid_manifest(tmp_path)  # the schema holds U8, tensorfile.dtypes BOOL
    assert doc["schema"]["b"]["dtype"] == "U8"
    assert doc["schema"]["m"] == {"dtype": "U8", "shape": [4, 2]}
    assert doc["tensorfile"]["dtypes"] == {"b": "BOOL", "m": "BOOL"}
    shards = [reference_load(tmp_path, p) for p in listed_sorted(tmp_path)]
    assert_same(np.concatenate([s["b"] for s in shards]), cols["b"])
    assert_same(np.concatenate([s["m"] for s in shards]), cols["m"])
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols, 6))


def test_bool_dtype_option(tmp_path: Path) -> None:
    v = np.array([[0, 1], [0, 1], [1, 1], [0, 0]], np.int8)
    dataset.write({"v": v}, tmp_path, batch_size=4, dtype="BOOL")
    got = next(iter(ref_shards(tmp_path).values()))["v"]
    assert_same(got, v.astype(bool))


@pytest.mark.parametrize(
    ("name", "np_type", "torch_type"),
    [
        ("F8_E4M3", ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn),
        ("F8_E5M2", ml_dtypes.float8_e5m2, torch.float8_e5m2),
    ],
)
def test_f8_dtype_option(tmp_path: Path, name: str, np_type: Any, torch_type: Any) -> None:
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(8, 3)
    dataset.write({"v": x}, tmp_path, batch_size=8, dtype=name)
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["v"] == {"dtype": "U8", "shape": [8, 3]}
    assert real_dtype(doc, "v") == name
    want = x.astype(np_type)
    # the reference numpy loader has no float8; its torch loader has
    ref = safetensors.torch.load_file(os.path.join(tmp_path, doc["shards"][0]["shard_path"]))
    assert ref["v"].dtype == torch_type
    assert ref["v"].view(torch.uint8).numpy().tobytes() == want.tobytes()
    assert_same(dataset.open(tmp_path)[5]["v"], want[5])


# -- nulls, ragged samples --------------------------------------------------------------------


def _null_inputs() -> list[Any]:
    return [
        pytest.param(
            pa.table({"ok": [1, 2, 3], "v": pa.array([1.0, None, 3.0])}), id="arrow-scalar"
        ),
        pytest.param(
            pa.table({"ok": [1, 2, 3], "v": pa.array([[1, 2], None, [5, 6]])}), id="arrow-list-row"
        ),
        pytest.param(
            pa.table({"ok": [1, 2, 3], "v": pa.array([[1, 2], [None, 4], [5, 6]])}),
            id="arrow-null-inside-sample",
        ),
        pytest.param(
            pa.table({"ok": [1, 2, 3], "v": pa.array([[1.5, 2.5], [3.5, None], [5.5, 6.5]])}),
            id="arrow-null-inside-float-sample",
        ),
        pytest.param(
            pd.DataFrame({"ok": [1, 2, 3], "v": pd.array([1, None, 3], dtype="Int64")}),
            id="pandas-nullable-int",
        ),
        pytest.param(
            pd.DataFrame({"ok": [1, 2, 3], "v": [np.ones(2), None, np.ones(2)]}),
            id="pandas-object-row",
        ),
        pytest.param({"ok": np.arange(3), "v": [[1, 2], None, [5, 6]]}, id="dict-list-row"),
        pytest.param({"ok": np.arange(3), "v": [1.0, None, 3.0]}, id="dict-scalar"),
    ]


@pytest.mark.parametrize("data", _null_inputs())
def test_null_values_are_rejected_naming_the_column(tmp_path: Path, data: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="'v'"):
        dataset.write(data, tmp_path / "ds", batch_size=2)
    assert not (tmp_path / "ds" / "dataset_manifest.json").exists()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(pa.table({"n": ["a", None, "c"], "v": [1, 2, 3]}), id="arrow"),
        pytest.param(pd.DataFrame({"n": ["a", None, "c"], "v": [1, 2, 3]}), id="pandas"),
        pytest.param({"n": ["a", None, "c"], "v": np.arange(3)}, id="dict"),
        pytest.param({"n": np.array(["a", None, "c"], object), "v": np.arange(3)}, id="dict-obj"),
    ],
)
def test_null_names_are_rejected_naming_the_column(tmp_path: Path, data: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="'n'"):
        dataset.write(data, tmp_path / "ds", name_col="n")
    assert not (tmp_path / "ds" / "dataset_manifest.json").exists()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(pa.table({"v": pa.array([[1, 2], [3], [4, 5]])}), id="arrow-list"),
        pytest.param(
            pa.table({"v": pa.array([[[1, 2], [3, 4]], [[1, 2], [3]], [[1, 2], [3, 4]]])}),
            id="arrow-nested",
        ),
        pytest.param(
            pd.DataFrame({"v": [np.zeros(2), np.zeros(3), np.zeros(2)]}), id="pandas-arrays"
        ),
        pytest.param(pd.DataFrame({"v": [[1, 2], [3], [4, 5]]}), id="pandas-lists"),
        pytest.param({"v": [[1, 2], [3], [4, 5]]}, id="dict-lists"),
        pytest.param({"v": [np.zeros(2), np.zeros(3), np.zeros(2)]}, id="dict-arrays"),
        pytest.param({"v": [np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(4)]}, id="dict-ranks"),
    ],
)
def test_ragged_samples_are_rejected_naming_the_column(tmp_path: Path, data: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="'v'"):
        dataset.write(data, tmp_path / "ds", batch_size=2)
    assert not (tmp_path / "ds" / "dataset_manifest.json").exists()


def test_uniform_python_lists_are_accepted(tmp_path: Path) -> None:
    dataset.write({"v": [[1.5, 2.5], [3.5, 4.5]]}, tmp_path / "d", batch_size=2)
    dataset.write(pd.DataFrame({"v": [[1, 2], [3, 4]]}), tmp_path / "p", batch_size=2)
    assert_same(dataset.open(tmp_path / "d")[1]["v"], np.array([3.5, 4.5]))
    assert_same(dataset.open(tmp_path / "p")[0]["v"], np.array([1, 2]))


def test_fixed_size_lists(tmp_path: Path) -> None:
    flat = pa.array([[1, 2, 3], [4, 5, 6]], pa.list_(pa.int32(), 3))
    dataset.write(pa.table({"v": flat}), tmp_path / "a", batch_size=2)
    assert_same(dataset.open(tmp_path / "a")[1]["v"], np.array([4, 5, 6], np.int32))


def test_nested_fixed_size_lists(tmp_path: Path) -> None:
    nested_type = pa.list_(pa.list_(pa.int32(), 3), 2)
    nested = pa.array([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]], nested_type)
    dataset.write(pa.table({"v": nested}), tmp_path / "b", batch_size=2)
    ds = dataset.open(tmp_path / "b")
    assert ds.schema == {"v": {"dtype": "I32", "shape": [2, 3]}}
    assert_same(ds[1]["v"], np.arange(7, 13, dtype=np.int32).reshape(2, 3))


# -- KV mode --------------------------------------------------------------------------------------


def kv_columns(n: int = 6) -> dict[str, Any]:
    rng = np.random.default_rng(n)
    return {
        "name": [f"sample-{i:03d}" for i in range(n)],
        "emb": rng.standard_normal((n, 4)).astype(np.float32),
        "label": np.arange(n, dtype=np.int64) + 2**53 + 1,
    }


def _kv_expected(cols: dict[str, Any], sep: str = "__") -> dict[str, dict[str, NDArray]]:
    names = cols["name"]
    return {
        n: {c: np.asarray(v)[i] for c, v in cols.items() if c != "name"}
        for i, n in enumerate(names)
    }


def _assert_kv_dataset(folder: Path, cols: dict[str, Any], sep: str = "__") -> None:
    doc = assert_valid_manifest(folder)
    want = _kv_expected(cols, sep)
    tensor_cols = [c for c in cols if c != "name"]
    # reference loads: tensor names {name}{sep}{col}, sample shapes, one shard per group of keys
    seen: dict[str, NDArray] = {}
    for s in doc["shards"]:
        tensors = reference_load(folder, s["shard_path"])
        keys = {k[: -len(sep + c)] for k in tensors for c in tensor_cols if k.endswith(sep + c)}
        assert s["samples_count"] == len(keys)
        assert set(tensors) == {f"{k}{sep}{c}" for k in keys for c in tensor_cols}
        for k, v in tensors.items():
            assert k not in seen
            seen[k] = v
    assert doc["total_samples"] == len(want)
    for n, sample in want.items():
        for c, v in sample.items():
            assert_same(seen[f"{n}{sep}{c}"], v)
    for k, info in doc["schema"].items():
        assert list(seen[k].shape) == info["shape"]
    ds = dataset.open(folder)
    got = list(ds)
    assert len(got) == len(ds) == len(want)
    assert sorted(s["key"] for s in got) == sorted(want)
    by_key = {s["key"]: s for s in got}
    for n, sample in want.items():
        assert set(by_key[n]) == {"key", *tensor_cols}
        for c, v in sample.items():
            assert_same(by_key[n][c], v)


@pytest.mark.parametrize("kind", KINDS)
def test_kv_mode_every_input_kind(tmp_path: Path, kind: str) -> None:
    cols = kv_columns(7)
    m = dataset.write(make_input(kind, cols), tmp_path, name_col="name")
    assert m.total_samples == 7
    _assert_kv_dataset(tmp_path, cols)
    doc = load_manifest(tmp_path)
    assert doc["schema"]["sample-002__emb"] == {"dtype": "F32", "shape": [4]}
    assert doc["schema"]["sample-002__label"] == {"dtype": "I64", "shape": []}
    assert dataset.open(tmp_path).schema == {
        "emb": {"dtype": "F32", "shape": [4]},
        "label": {"dtype": "I64", "shape": []},
    }


@pytest.mark.parametrize("sep", ["::", "/", "-", "."])
def test_kv_separator(tmp_path: Path, sep: str) -> None:
    cols = kv_columns(4)
    dataset.write(cols, tmp_path, name_col="name", kv_separator=sep)
    _assert_kv_dataset(tmp_path, cols, sep)


def test_kv_separator_occurring_in_column_names(tmp_path: Path) -> None:
    """A common case: kv_separator "_" with columns like input_ids."""
    cols = {
        "name": ["a", "b", "c"],
        "input_ids": np.arange(6, dtype=np.int32).reshape(3, 2),
        "attention_mask": np.ones((3, 2), np.uint8),
    }
    dataset.write(cols, tmp_path, name_col="name", kv_separator="_")
    doc = load_manifest(tmp_path)
    assert doc["schema"]["a_input_ids"] == {"dtype": "I32", "shape": [2]}
    assert doc["schema"]["a_attention_mask"] == {"dtype": "U8", "shape": [2]}
    _assert_kv_dataset(tmp_path, cols, "_")


def test_kv_names_containing_the_separator(tmp_path: Path) -> None:
    cols = {"name": ["a__b", "c", "d__e__f"], "v": np.arange(3, dtype=np.int16)}
    dataset.write(cols, tmp_path, name_col="name")
    _assert_kv_dataset(tmp_path, cols)


def test_kv_duplicates_fail_by_default(tmp_path: Path) -> None:
    cols = {"name": ["a", "b", "a"], "v": np.arange(3, dtype=np.int32)}
    with pytest.raises(InvalidArgumentError, match="'a'"):
        dataset.write(cols, tmp_path / "ds", name_col="name")
    with pytest.raises(InvalidArgumentError, match="duplicate"):
        dataset.write(cols, tmp_path / "ds", name_col="name", duplicatesStrategy="fail")
    assert not (tmp_path / "ds" / "dataset_manifest.json").exists()


@pytest.mark.parametrize("spelling", ["lastWin", "LASTWIN", "lastwin"])
def test_kv_duplicates_last_win(tmp_path: Path, spelling: str) -> None:
    cols = {"name": ["a", "b", "a", "c", "b"], "v": np.arange(10, dtype=np.int32).reshape(5, 2)}
    dataset.write(cols, tmp_path, name_col="name", duplicatesStrategy=spelling)
    want = {"name": ["a", "c", "b"], "v": cols["v"][[2, 3, 4]]}
    _assert_kv_dataset(tmp_path, want)
    assert load_manifest(tmp_path)["total_samples"] == 3


def test_kv_target_shard_size_rolls_over(tmp_path: Path) -> None:
    n = 40
    cols = {
        "name": [f"k{i:02d}" for i in range(n)],
        "v": np.arange(n * 256, dtype=np.float32).reshape(n, 256),  # 1 KiB per key
    }
    # any positive value: ~10 KiB per shard
    dataset.write(cols, tmp_path, name_col="name", target_shard_size_mb=10 / 1024)
    doc = assert_valid_manifest(tmp_path)
    counts = [s["samples_count"] for s in doc["shards"]]
    assert len(counts) >= 3
    assert sum(counts) == n
    assert max(counts) <= 11
    assert all(s["bytes"] <= 14 * 1024 for s in doc["shards"])
    _assert_kv_dataset(tmp_path, cols)


def test_kv_default_target_writes_one_shard(tmp_path: Path) -> None:
    cols = kv_columns(30)
    dataset.write(cols, tmp_path, name_col="name")
    assert [s["samples_count"] for s in load_manifest(tmp_path)["shards"]] == [30]


def test_kv_tiny_target_gives_one_key_per_shard(tmp_path: Path) -> None:
    cols = kv_columns(5)
    dataset.write(cols, tmp_path, name_col="name", target_shard_size_mb=1e-9)
    doc = assert_valid_manifest(tmp_path)
    assert [s["samples_count"] for s in doc["shards"]] == [1] * 5
    _assert_kv_dataset(tmp_path, cols)


def test_kv_columns_option(tmp_path: Path) -> None:
    cols = kv_columns(3)
    dataset.write(cols, tmp_path, name_col="name", columns="label")
    tensors = next(iter(ref_shards(tmp_path).values()))
    assert sorted(tensors) == [f"sample-{i:03d}__label" for i in range(3)]


def test_kv_integer_names_become_strings(tmp_path: Path) -> None:
    cols = {"name": np.array([10, 20, 30]), "v": np.ones((3, 2), np.float32)}
    dataset.write(cols, tmp_path, name_col="name")
    tensors = next(iter(ref_shards(tmp_path).values()))
    assert sorted(tensors) == ["10__v", "20__v", "30__v"]


# -- tensor index -----------------------------------------------------------------------------


@pytest.mark.parametrize("flag", [True, "true", "TRUE", "1"])
def test_generate_index_batch_mode(tmp_path: Path, flag: Any) -> None:
    cols = batch_columns(5)
    dataset.write(cols, tmp_path, batch_size=2, tail_strategy="pad", generate_index=flag)
    assert os.path.isfile(tmp_path / INDEX)  # one file, not a folder
    table = pq.read_table(tmp_path / INDEX)
    assert table.schema.names == ["tensor_key", "file_name", "shape", "dtype"]
    assert table.schema.field("tensor_key").type == pa.string()
    assert table.schema.field("file_name").type == pa.string()
    assert table.schema.field("shape").type == pa.list_(pa.int32())
    assert table.schema.field("dtype").type == pa.string()
    rows = sorted(
        (r["file_name"], r["tensor_key"], tuple(r["shape"]), r["dtype"]) for r in table.to_pylist()
    )
    want = sorted(
        (p, k, tuple(v.shape), {"float32": "F32", "int64": "I64", "int32": "I32"}[str(v.dtype)])
        for p, t in ref_shards(tmp_path).items()
        for k, v in t.items()
    )
    assert rows == want
    assert len(rows) == 9  # 3 shards x 3 columns


def test_generate_index_kv_mode(tmp_path: Path) -> None:
    cols = kv_columns(6)
    dataset.write(cols, tmp_path, name_col="name", generate_index=True, target_shard_size_mb=1e-4)
    rows = pq.read_table(tmp_path / INDEX).to_pylist()
    want = sorted(
        (k, p, list(v.shape)) for p, t in ref_shards(tmp_path).items() for k, v in t.items()
    )
    assert sorted((r["tensor_key"], r["file_name"], r["shape"]) for r in rows) == want
    assert {r["tensor_key"]: r["dtype"] for r in rows}["sample-001__label"] == "I64"
    assert {r["tensor_key"]: r["dtype"] for r in rows}["sample-001__emb"] == "F32"


@pytest.mark.parametrize("flag", [None, False, "false", "0"])
def test_no_index_unless_asked(tmp_path: Path, flag: Any) -> None:
    options: dict[str, Any] = {"batch_size": 2}
    if flag is not None:
        options["generate_index"] = flag
    dataset.write(batch_columns(3), tmp_path, **options)
    assert not os.path.exists(tmp_path / INDEX)


# -- the returned manifest and other inputs ---------------------------------------------------


def test_returned_manifest_matches_the_file(tmp_path: Path) -> None:
    m = dataset.write(batch_columns(5), tmp_path, batch_size=2)
    doc = load_manifest(tmp_path)
    assert m.total_samples == doc["total_samples"]
    assert m.total_bytes == doc["total_bytes"]
    assert sorted(s.shard_path for s in m.shards) == listed_sorted(tmp_path)


def test_tensor_struct_columns(tmp_path: Path) -> None:
    """The Spark spec's tensor struct {data, shape, dtype} as a column of dicts."""
    rows = [np.arange(6, dtype=np.float32).reshape(2, 3) + i for i in range(3)]
    structs = [{"data": r.tobytes(), "shape": [2, 3], "dtype": "F32"} for r in rows]
    dataset.write({"t": structs}, tmp_path, batch_size=3)
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["t"] == {"dtype": "F32", "shape": [3, 2, 3]}
    assert_samples(list(dataset.open(tmp_path)), [{"t": r} for r in rows])


def test_unsupported_input_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="pyarrow"):
        dataset.write([1, 2, 3], tmp_path, batch_size=2)
    with pytest.raises(InvalidArgumentError, match="'s'"):
        dataset.write({"s": np.array(["a", "b"], object)}, tmp_path, batch_size=2)
    with pytest.raises(InvalidArgumentError, match="'s'"):
        dataset.write(pa.table({"s": ["a", "b"]}), tmp_path, batch_size=2)
    with pytest.raises(InvalidArgumentError, match="length"):
        dataset.write({"a": np.ones(3), "b": np.ones(4)}, tmp_path, batch_size=2)
