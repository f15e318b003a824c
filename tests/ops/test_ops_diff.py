"""ops.diff: tensors and metadata added, removed and changed; cross-format; data=True."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import ml_dtypes
import numpy as np
import pytest

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import write_sharded


def _base() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "same": np.arange(6, dtype=np.float32),
        "reshaped": np.ones(6, np.int32),
        "retyped": np.ones(4, np.float32),
        "gone": np.ones(2, np.uint8),
    }


def _other() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "same": np.arange(6, dtype=np.float32),
        "reshaped": np.ones((2, 3), np.int32),
        "retyped": np.ones(4, np.float16),
        "new": np.ones(3, np.int8),
    }


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file(_base(), a, {"keep": "1", "changed": "old", "dropped": "x"})
    save_file(_other(), b, {"keep": "1", "changed": "new", "added": "y"})
    return a, b


def test_diff_headers(pair: tuple[str, str]) -> None:
    a, b = pair
    r = ops.diff(a, b)
    assert not r.identical
    assert r.added == ["new"]
    assert r.removed == ["gone"]
    changes = {(c.name, c.field): (c.a, c.b) for c in r.changed}
    assert changes == {
        ("reshaped", "shape"): ([6], [2, 3]),
        ("retyped", "dtype"): ("F32", "F16"),
        ("retyped", "byte_length"): (16, 8),
    }
    assert r.metadata_added == {"added": "y"}
    assert r.metadata_removed == {"dropped": "x"}
    assert r.metadata_changed == {"changed": ("old", "new")}
    assert r.data is None


def test_diff_to_json_shape(pair: tuple[str, str]) -> None:
    a, b = pair
    doc = ops.diff(a, b).to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["identical"] is False
    assert set(doc["tensors"]) == {"added", "removed", "changed"}
    assert set(doc["metadata"]) == {"added", "removed", "changed"}
    assert doc["tensors"]["added"] == ["new"]
    assert doc["tensors"]["removed"] == ["gone"]
    assert {"name": "reshaped", "field": "shape", "a": [6], "b": [2, 3]} in doc["tensors"][
        "changed"
    ]
    assert {"name": "retyped", "field": "dtype", "a": "F32", "b": "F16"} in doc["tensors"][
        "changed"
    ]
    assert {"name": "retyped", "field": "byte_length", "a": 16, "b": 8} in doc["tensors"]["changed"]
    for c in doc["tensors"]["changed"]:
        assert set(c) == {"name", "field", "a", "b"}
    assert doc["metadata"]["added"] == {"added": "y"}
    assert doc["metadata"]["removed"] == {"dropped": "x"}
    assert doc["metadata"]["changed"] == {"changed": ["old", "new"]}
    assert "data" not in doc


def test_diff_reversed_swaps_sides(pair: tuple[str, str]) -> None:
    a, b = pair
    r = ops.diff(b, a)
    assert r.added == ["gone"]
    assert r.removed == ["new"]
    assert r.metadata_changed == {"changed": ("new", "old")}
    assert {(c.name, c.field, str(c.a), str(c.b)) for c in r.changed} >= {
        ("reshaped", "shape", "[2, 3]", "[6]")
    }


def test_diff_identical_file(pair: tuple[str, str]) -> None:
    a, _ = pair
    r = ops.diff(a, a, data=True)
    assert r.identical
    doc = r.to_json()
    assert doc["identical"] is True
    assert doc["tensors"] == {"added": [], "removed": [], "changed": []}
    assert doc["metadata"] == {"added": {}, "removed": {}, "changed": {}}
    assert doc["data"]["differing"] == []
    assert doc["data"]["compared"] == 4


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_cross_format_same_data(tmp_path: Path, compression: str | None) -> None:
    arrays = {
        "w": np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32),
        "h": np.ones(5, np.float16),
        "bf": np.ones(3, ml_dtypes.bfloat16),
        "ids": np.arange(4, dtype=np.int64),
    }
    st, zt = str(tmp_path / "m.safetensors"), str(tmp_path / "m.zt")
    save_file(arrays, st, {"k": "v"})
    ztensor.save_file(arrays, zt, attributes={"k": "v"}, compression=compression)
    r = ops.diff(st, zt)
    assert r.added == [] and r.removed == [] and r.changed == []
    assert r.identical
    rd = ops.diff(st, zt, data=True)
    assert rd.data == []
    assert rd.compared == 4
    assert rd.identical


def test_cross_format_detects_real_changes(tmp_path: Path) -> None:
    st, zt = str(tmp_path / "m.safetensors"), str(tmp_path / "m.zt")
    save_file({"w": np.ones(4, np.float32)}, st)
    ztensor.save_file({"w": np.ones(4, np.float64)}, zt, compression="zstd")
    r = ops.diff(st, zt)
    assert {(c.field, c.a, c.b) for c in r.changed} == {
        ("dtype", "F32", "F64"),
        ("byte_length", 16, 32),
    }


def test_diff_data_reports_differences(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    base = {
        "f": np.arange(10, dtype=np.float32),
        "h": np.ones(4, np.float16),
        "i": np.arange(6, dtype=np.int32),
        "u": np.zeros(3, np.uint8),
        "eq": np.ones(2, np.float64),
        "shape_differs": np.ones(4, np.float32),
    }
    other = {k: v.copy() for k, v in base.items()}
    other["f"][2] += 0.5
    other["f"][7] -= 3.0
    other["f"][9] += 1.0
    other["h"][0] = np.float16(-1.0)
    other["i"][5] = -4  # |5 - (-4)| = 9
    other["u"][1] = 200
    other["shape_differs"] = np.full((2, 2), 9, np.float32)
    save_file(base, a)
    save_file(other, b)
    r = ops.diff(a, b, data=True)
    assert not r.identical
    assert r.compared == 5  # shape_differs is not compared
    found = {d.name: d for d in r.data or []}
    assert set(found) == {"f", "h", "i", "u"}
    assert found["f"].differing_elements == 3
    assert found["f"].max_abs_diff == pytest.approx(3.0)
    assert found["h"].differing_elements == 1
    assert found["h"].max_abs_diff == pytest.approx(2.0)
    assert found["i"].differing_elements == 1
    assert found["u"].differing_elements == 1
    doc = r.to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["data"]["compared"] == 5
    f_entry = next(d for d in doc["data"]["differing"] if d["name"] == "f")
    assert f_entry == {"name": "f", "differing_elements": 3, "max_abs_diff": 3.0}


def test_diff_data_across_formats(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    y = x.copy()
    y[1, 1] += 0.25
    st, zt = str(tmp_path / "m.safetensors"), str(tmp_path / "m.zt")
    save_file({"x": x}, st)
    ztensor.save_file({"x": y}, zt, compression="zstd")
    assert ops.diff(st, zt).identical  # headers agree
    r = ops.diff(st, zt, data=True)
    assert r.data is not None and len(r.data) == 1
    assert r.data[0].name == "x"
    assert r.data[0].differing_elements == 1
    assert r.data[0].max_abs_diff == pytest.approx(0.25)


def test_diff_sharded_against_single_file(tmp_path: Path) -> None:
    arrays = {
        "a.w": np.ones((3, 3), np.float32),
        "b.w": np.arange(4, dtype=np.int16),
        "c.w": np.full(2, 5, np.float16),
    }
    single = str(tmp_path / "single.safetensors")
    save_file(arrays, single)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    index = str(
        write_sharded(
            folder, [{"a.w": arrays["a.w"]}, {"b.w": arrays["b.w"], "c.w": arrays["c.w"]}]
        )
    )
    r = ops.diff(single, index, data=True)
    assert r.identical
    assert r.compared == 3


def test_diff_gguf_metadata(tmp_path: Path) -> None:
    def write(path: str, n_layers: int, name: str | None) -> None:
        w = gguf.GGUFWriter(path, arch="llama")
        w.add_uint32("llama.block_count", n_layers)
        if name:
            w.add_string("general.name", name)
        w.add_tensor("t", np.ones((2, 2), np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    a, b = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    write(a, 2, "tiny")
    write(b, 4, None)
    r = ops.diff(a, b)
    assert r.metadata_changed == {"llama.block_count": (2, 4)}
    assert r.metadata_removed == {"general.name": "tiny"}
    assert r.changed == []
    assert json.loads(json.dumps(r.to_json()))["metadata"]["changed"] == {
        "llama.block_count": [2, 4]
    }
    with pytest.raises(tensorfile.errors.UnsupportedError):
        ops.diff(a, b, data=True)
