"""The same tensors in safetensors and in GGUF (written by the ``gguf`` package) look the
same to inspect, diff and the content id: shapes row-major (GGUF's header lists them
innermost first), dtypes by one name (``F32`` in both; quantized types by the gguf package's
names, ``Q8_0``). The structural hash keeps weight-inspect's contract: GGUF shapes in the
file's order. And a GGUF file without tensors gives empty collections, never None."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tensorfile import ops
from tensorfile.ops.hash import canonical_json
from tensorfile.ops.inspect import module_tree
from tensorfile.safetensors.numpy import save_file

ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "blk.0.attn_q.weight": np.arange(240, dtype=np.float32).reshape(8, 30),
    "blk.0.ffn.weight": np.linspace(-1, 1, 24, dtype=np.float16).reshape(2, 3, 4),
    "token_types": np.arange(5, dtype=np.int32),
    "norm": np.ones(30, np.float32),
}


def _write_gguf(path: Path, arrays: dict[str, np.ndarray[Any, Any]], **kv: str) -> str:
    w = gguf.GGUFWriter(str(path), arch="llama")
    for key, value in kv.items():
        w.add_string(key, value)
    for name, arr in arrays.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    st = str(tmp_path / "m.safetensors")
    save_file(ARRAYS, st)
    return st, _write_gguf(tmp_path / "m.gguf", ARRAYS)


def test_shapes_are_row_major_in_both(pair: tuple[str, str]) -> None:
    gg = pair[1]
    for path in pair:
        shapes = {t.name: t.shape for t in ops.load(path).tensors.values()}
        assert shapes == {k: v.shape for k, v in ARRAYS.items()}, path
        doc = ops.inspect(path).to_json()
        assert {t["name"]: t["shape"] for t in doc["tensors"]} == {
            k: list(v.shape) for k, v in ARRAYS.items()
        }
    # the gguf package itself reports ggml's order: the reverse
    reader = gguf.GGUFReader(gg)
    assert [int(d) for d in reader.get_tensor(0).shape] == [30, 8]


def test_dtypes_share_one_vocabulary(pair: tuple[str, str]) -> None:
    st, gg = pair
    a, b = ops.inspect(st), ops.inspect(gg)
    assert a.parameters_by_dtype == b.parameters_by_dtype == {"F16": 24, "F32": 270, "I32": 5}
    assert a.bytes_by_dtype == b.bytes_by_dtype
    assert {t.name: a.dtype_of(t) for t in a.tensors} == {t.name: b.dtype_of(t) for t in b.tensors}


def test_diff_across_formats_finds_the_tensors_equal(pair: tuple[str, str]) -> None:
    st, gg = pair
    r = ops.diff(st, gg)
    assert (r.added, r.removed, r.changed) == ([], [], [])
    assert r.metadata_added == {"general.architecture": "llama"}
    assert ops.diff(gg, st).changed == []


def test_diff_reports_a_gguf_shape_row_major(tmp_path: Path) -> None:
    st = str(tmp_path / "m.safetensors")
    save_file({"w": np.zeros((30, 8), np.float32)}, st)
    gg = _write_gguf(tmp_path / "m.gguf", {"w": np.zeros((8, 30), np.float32)})
    (change,) = ops.diff(st, gg).changed
    assert (change.field, change.a, change.b) == ("shape", [30, 8], [8, 30])
    assert json.loads(json.dumps(ops.diff(st, gg).to_json()))["tensors"]["changed"] == [
        {"name": "w", "field": "shape", "a": [30, 8], "b": [8, 30]}
    ]


def test_content_ids_are_equal(pair: tuple[str, str]) -> None:
    st, gg = pair
    assert ops.content_hash(st) == ops.content_hash(gg)
    # and differ as soon as a shape does (same bytes)
    other = str(Path(st).with_name("t.safetensors"))
    save_file(
        {**ARRAYS, "blk.0.attn_q.weight": ARRAYS["blk.0.attn_q.weight"].reshape(30, 8)}, other
    )
    assert ops.content_hash(other) != ops.content_hash(gg)


def test_structural_hash_keeps_ggml_order(pair: tuple[str, str]) -> None:
    """weight-inspect's contract: GGUF shapes in the order the file stores them."""
    _, gg = pair
    doc = json.loads(canonical_json(ops.load(gg)))
    assert doc["tensors"]["blk.0.attn_q.weight"]["shape"] == [30, 8]
    assert doc["tensors"]["blk.0.ffn.weight"]["shape"] == [4, 3, 2]
    assert doc["tensors"]["blk.0.attn_q.weight"]["dtype"] == "f32"


def test_quantized_types_keep_their_gguf_names(tmp_path: Path) -> None:
    path = str(tmp_path / "q.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_tensor("q", np.zeros((2, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (t,) = ops.load(path).tensors.values()
    assert (t.stored_dtype, t.common_dtype, t.shape, t.nbytes) == ("q8_0", "Q8_0", (2, 32), 68)
    assert ops.inspect(path).parameters_by_dtype == {"Q8_0": 64}
    assert json.loads(canonical_json(ops.load(path)))["tensors"]["q"]["dtype"] == "q8_0"


def test_a_gguf_without_tensors_gives_empty_collections(tmp_path: Path) -> None:
    a = _write_gguf(tmp_path / "a.gguf", {}, **{"general.name": "vocab only"})
    b = _write_gguf(tmp_path / "b.gguf", {}, **{"general.name": "other"})
    s = ops.load(a)
    assert s.tensors == {}
    r = ops.inspect(a)
    assert (r.tensors, r.parameters_by_dtype, r.bytes_by_dtype) == ((), {}, {})
    assert (r.tensor_count, r.parameter_count, r.total_bytes) == (0, 0, 0)
    doc = r.to_json()
    assert (doc["tensors"], doc["parameters_by_dtype"], doc["bytes_by_dtype"]) == ([], {}, {})
    tree = module_tree(r.tensors)
    assert (tree.tensors, tree.children, tree.parameters) == ((), (), 0)
    d = ops.diff(a, b)
    assert (d.added, d.removed, d.changed) == ([], [], [])
    assert d.metadata_changed == {"general.name": ("vocab only", "other")}
    assert (d.metadata_added, d.metadata_removed) == ({}, {})
    assert len(ops.content_hash(a)) == 64
    assert ops.content_hash(a) == ops.content_hash(b)  # no tensors, no difference
