"""Write options: defaults, case-insensitive names, string values, and a clear
InvalidArgumentError (a ValueError) for every invalid option."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.dataset import parse_options
from tensorfile.errors import InvalidArgumentError
from tests.helpers.checkpoints import reference_load, shard_files
from tests.helpers.manifests import load_manifest


def batch_data() -> dict[str, Any]:
    return {"x": np.arange(12, dtype=np.float32).reshape(6, 2), "id": np.arange(6)}


def kv_data() -> dict[str, Any]:
    return {"name": ["a", "b", "c"], "x": np.ones((3, 2), np.float32)}


def test_invalid_argument_error_is_a_value_error() -> None:
    assert issubclass(InvalidArgumentError, ValueError)


def test_defaults() -> None:
    o = parse_options({"batch_size": 4})
    assert o.mode == "batch"
    assert o.batch_size == 4
    assert o.name_col is None
    assert o.columns is None
    assert o.shapes == {}
    assert o.dtype is None
    assert o.tail_strategy == "write"
    assert o.kv_separator == "__"
    assert o.target_shard_size_mb == 300
    assert o.duplicates_strategy == "fail"
    assert o.generate_index is False
    assert o.rounding == "nearest_even"
    kv = parse_options({"name_col": "name"})
    assert kv.mode == "kv" and kv.batch_size is None and kv.name_col == "name"


def test_string_values_like_spark() -> None:
    o = parse_options(
        {
            "batch_size": "8",
            "columns": "a, b,c",
            "shapes": '{"a": [2, 3], "b": []}',
            "dtype": "BF16",
            "tail_strategy": "pad",
            "target_shard_size_mb": "0.5",
            "generate_index": "true",
            "rounding": "truncate",
        }
    )
    assert o.batch_size == 8
    assert o.columns == ("a", "b", "c")
    assert o.shapes == {"a": (2, 3), "b": ()}
    assert o.dtype == "BF16"
    assert o.tail_strategy == "pad"
    assert o.target_shard_size_mb == 0.5
    assert o.generate_index is True
    assert o.rounding == "truncate"


@pytest.mark.parametrize(
    "options",
    [
        {"BATCH_SIZE": 2, "Tail_Strategy": "drop", "GENERATE_INDEX": True},
        {"batch_size": 2, "TAIL_STRATEGY": "DROP", "generate_index": "True"},
        {"Batch_Size": "2", "tail_strategy": "Drop", "Generate_Index": "1"},
    ],
)
def test_option_names_are_case_insensitive_batch(tmp_path: Path, options: dict[str, Any]) -> None:
    data = {"x": np.ones((5, 2), np.float32), "id": np.arange(5)}
    dataset.write(data, tmp_path, **options)
    doc = load_manifest(tmp_path)
    assert [s["samples_count"] for s in doc["shards"]] == [2, 2]  # batches of 2, tail dropped
    assert os.path.exists(tmp_path / "_tensor_index.parquet")


@pytest.mark.parametrize(
    "options",
    [
        {"NAME_COL": "name", "KV_SEPARATOR": "::", "DUPLICATESSTRATEGY": "lastWin"},
        {"Name_Col": "name", "Kv_Separator": "::", "duplicatesStrategy": "LASTWIN"},
        {"name_col": "name", "kv_separator": "::", "duplicatesstrategy": "lastwin"},
    ],
)
def test_option_names_are_case_insensitive_kv(tmp_path: Path, options: dict[str, Any]) -> None:
    data = {"name": ["a", "b", "a"], "x": np.arange(3, dtype=np.int32)}
    dataset.write(data, tmp_path, **options)
    (shard,) = shard_files(tmp_path)
    tensors = reference_load(tmp_path, shard)
    assert sorted(tensors) == ["a::x", "b::x"]
    assert int(tensors["a::x"]) == 2  # the last "a" won


def test_case_insensitive_dtype_target_and_rounding_names(tmp_path: Path) -> None:
    x = np.array([[1.00390625, 1.01171875]], np.float32)  # bf16 ties
    dataset.write({"x": x}, tmp_path, BATCH_SIZE=2, DTYPE="BF16", ROUNDING="TRUNCATE")
    (shard,) = shard_files(tmp_path)
    got = reference_load(tmp_path, shard)["x"].view(np.uint16)
    assert got.tolist() == (x.view(np.uint32) >> 16).astype(np.uint16).tolist()


@pytest.mark.parametrize("value", [0.001, "0.25", 1, 50, 1000, 5000, "2048"])
def test_target_shard_size_takes_any_positive_value(tmp_path: Path, value: Any) -> None:
    assert parse_options({"name_col": "n", "target_shard_size_mb": value}).target_shard_size_mb == (
        float(value)
    )
    dataset.write(kv_data(), tmp_path, name_col="name", target_shard_size_mb=value)
    assert load_manifest(tmp_path)["total_samples"] == 3


def test_infinite_target_shard_size_is_accepted_or_rejected_cleanly(tmp_path: Path) -> None:
    counts: list[int] = []
    message = ""
    try:
        m = dataset.write(kv_data(), tmp_path, name_col="name", target_shard_size_mb="inf")
        counts = [s.samples_count for s in m.shards]
    except InvalidArgumentError as exc:
        message = str(exc)
    assert counts == [3] or "target_shard_size_mb" in message


BATCH_ERRORS = [
    ({}, "batch_size.*name_col"),
    ({"batch_size": 2, "name_col": "id"}, "mutually exclusive"),
    ({"batch_size": 0}, "batch_size must be positive"),
    ({"batch_size": -3}, "batch_size must be positive"),
    ({"batch_size": "abc"}, "batch_size must be an integer"),
    ({"batch_size": "1.5"}, "batch_size must be an integer"),
    ({"batch_size": 2, "columns": ""}, "columns"),
    ({"batch_size": 2, "columns": " , "}, "columns"),
    ({"batch_size": 2, "columns": "x,zz"}, "zz"),
    ({"batch_size": 2, "dtype": "C64"}, "dtype 'C64'"),
    ({"batch_size": 2, "dtype": "F128"}, "dtype 'F128'"),
    ({"batch_size": 2, "dtype": "float32"}, "dtype 'float32'"),
    ({"batch_size": 2, "dtype": "BF8"}, "dtype 'BF8'"),
    ({"batch_size": 2, "tail_strategy": "truncate"}, "tail_strategy 'truncate'"),
    ({"batch_size": 2, "tail_strategy": ""}, "tail_strategy"),
    ({"batch_size": 2, "rounding": "up"}, "rounding.*'up'"),
    ({"batch_size": 2, "rounding": "stochastic"}, "rounding.*'stochastic'"),
    ({"batch_size": 2, "generate_index": "maybe"}, "generate_index.*'maybe'"),
    ({"batch_size": 2, "shapes": "not json"}, "shapes"),
    ({"batch_size": 2, "shapes": "[1, 2]"}, "shapes"),
    ({"batch_size": 2, "shapes": '{"x": [-1]}'}, "shapes.*'x'"),
    ({"batch_size": 2, "shapes": '{"x": "2"}'}, "shapes.*'x'"),
    ({"batch_size": 2, "shapes": '{"x": [1.5]}'}, "shapes.*'x'"),
    ({"batch_size": 2, "shapes": '{"x": [true, 2]}'}, "shapes.*'x'"),
    ({"batch_size": 2, "shapes": {"x": 2}}, "shapes.*'x'"),
    ({"batch_size": 2, "batchsize": 3}, "unknown option.*batchsize"),
    ({"batch_size": 2, "compression": "zstd"}, "unknown option.*compression"),
]

KV_ERRORS = [
    ({"name_col": "name", "duplicatesStrategy": "firstWin"}, "duplicatesStrategy 'firstWin'"),
    ({"name_col": "name", "duplicatesStrategy": ""}, "duplicatesStrategy"),
    ({"name_col": "name", "target_shard_size_mb": 0}, "target_shard_size_mb must be positive"),
    ({"name_col": "name", "target_shard_size_mb": -1}, "target_shard_size_mb must be positive"),
    ({"name_col": "name", "target_shard_size_mb": "abc"}, "target_shard_size_mb"),
    ({"name_col": "name", "target_shard_size_mb": "nan"}, "target_shard_size_mb"),
    ({"name_col": "name", "kv_separator": ""}, "kv_separator"),
    ({"name_col": "name", "columns": "name,x"}, "key column 'name'"),
    ({"name_col": "name", "columns": "nope"}, "nope"),
]


@pytest.mark.parametrize(("options", "message"), BATCH_ERRORS)
def test_batch_option_errors(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        dataset.write(batch_data(), tmp_path / "ds", **options)
    assert not os.path.exists(tmp_path / "ds" / "dataset_manifest.json")


@pytest.mark.parametrize(("options", "message"), KV_ERRORS)
def test_kv_option_errors(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        dataset.write(kv_data(), tmp_path / "ds", **options)
    assert not os.path.exists(tmp_path / "ds" / "dataset_manifest.json")
    if os.path.isdir(tmp_path / "ds"):
        assert os.listdir(tmp_path / "ds") == []


@pytest.mark.parametrize(
    ("options", "message"),
    [(o, m) for o, m in BATCH_ERRORS if "columns" not in o]
    + [(o, m) for o, m in KV_ERRORS if "columns" not in o],
)
def test_parse_options_rejects_the_same(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_options(options)


@pytest.mark.parametrize("mode", ["error", "errorifexists", "ignore", "upsert", ""])
def test_unsupported_save_modes(tmp_path: Path, mode: str) -> None:
    with pytest.raises(InvalidArgumentError, match="mode"):
        dataset.write(batch_data(), tmp_path / "ds", mode=mode, batch_size=2)
    assert not os.path.exists(tmp_path / "ds" / "dataset_manifest.json")


def test_no_tensor_column_left(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="no tensor column"):
        dataset.write({"name": ["a", "b"]}, tmp_path / "ds", name_col="name")


@pytest.mark.parametrize(
    "name",
    [
        *("F16", "F32", "F64", "BF16", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"),
        *("BOOL", "F8_E4M3", "F8_E5M2"),
    ],
)
def test_every_dataset_dtype_is_accepted(name: str) -> None:
    assert parse_options({"batch_size": 1, "dtype": name}).dtype == name


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"x": np.ones((2, 2), np.float32)}, id="numeric-only"),
        pytest.param({"name": ["a", "b"], "x": np.ones((2, 2), np.float32)}, id="with-strings"),
    ],
)
def test_missing_name_col_is_named_in_the_error(tmp_path: Path, data: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="'missing'"):
        dataset.write(data, tmp_path / "ds", name_col="missing")
