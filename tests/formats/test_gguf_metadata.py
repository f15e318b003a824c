"""GGUF metadata through ``tensorfile.open``: ``.metadata`` gives plain Python values, the
same as the ``gguf`` package's ``GGUFReader`` ``field.contents()`` for every value type
(scalars, arrays of each, arrays of arrays), except float32 shown as the shortest float
that reads back as the same float32 and arrays of arrays as nested lists (``contents()``
flattens them);
``.typed_metadata`` keeps the stored types and round-trips through the ``gguf`` writer;
convert writes float32 metadata as its shortest text (safetensors) or number (zTensor v2).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.core.values import TypedValue, plain, short_float32
from tensorfile.ops import convert
from tensorfile.safetensors import safe_open

VT = gguf.GGUFValueType

SCALARS: list[tuple[str, Any, Any]] = [
    ("u8", 200, VT.UINT8),
    ("i8", -100, VT.INT8),
    ("u16", 60_000, VT.UINT16),
    ("i16", -30_000, VT.INT16),
    ("u32", 4_000_000_000, VT.UINT32),
    ("i32", -2_000_000_000, VT.INT32),
    ("u64", 2**64 - 1, VT.UINT64),
    ("i64", -(2**63), VT.INT64),
    ("eps", 1e-12, VT.FLOAT32),
    ("f32_tenth", 0.1, VT.FLOAT32),
    ("f32_big", 3.0e38, VT.FLOAT32),
    ("f32_neg_zero", -0.0, VT.FLOAT32),
    ("f32_inf", math.inf, VT.FLOAT32),
    ("f64", 0.1, VT.FLOAT64),
    ("yes", True, VT.BOOL),
    ("no", False, VT.BOOL),
    ("name", "tiny ü 模型", VT.STRING),
    ("empty", "", VT.STRING),
]

ARRAYS: list[tuple[str, list[Any], Any]] = [
    ("a_u8", [0, 255], VT.UINT8),
    ("a_i8", [-128, 127], VT.INT8),
    ("a_u16", [1, 65535], VT.UINT16),
    ("a_i16", [-1, 2], VT.INT16),
    ("a_u32", [7, 2**32 - 1], VT.UINT32),
    ("a_i32", [-5, 5], VT.INT32),
    ("a_u64", [2**64 - 1, 0], VT.UINT64),
    ("a_i64", [-(2**63), 1], VT.INT64),
    ("a_f32", [0.1, 1e-12, 1e-5, -2.5, math.inf], VT.FLOAT32),
    ("a_f64", [0.1, 1e-300], VT.FLOAT64),
    ("a_bool", [True, False, True], VT.BOOL),
    ("a_str", ["a", "", "ü"], VT.STRING),
]

NESTED: list[tuple[str, list[Any]]] = [
    ("n_int", [[1, 2], [3, 4, 5]]),  # (the gguf writer refuses an empty inner array)
    ("n_str", [["a", "b"], ["c"]]),
    ("n_float", [[0.5, 0.1], [1e-12]]),
    ("n_deep", [[[1], [2, 3]], [[4]]]),
]


def write(path: Path) -> Path:
    w = gguf.GGUFWriter(str(path), arch="llama")
    for key, value, kind in SCALARS:
        w.add_key_value(key, value, kind)
    for key, values, kind in ARRAYS:
        w.add_key_value(key, values, VT.ARRAY, sub_type=kind)
    for key, values in NESTED:
        w.add_array(key, values)  # the writer types the inner arrays
    w.add_tensor("w", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        out.extend(flatten(v) if isinstance(v, list) else [v])
    return out


def short32(value: Any) -> Any:
    if isinstance(value, list):
        return [short32(v) for v in value]
    return float(str(np.float32(value)))


def same(a: Any, b: Any) -> bool:
    """Equal, a NaN equal to a NaN, -0.0 told from 0.0, bool from int."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def test_metadata_matches_gguf_reader_for_every_type(tmp_path: Path) -> None:
    path = write(tmp_path / "m.gguf")
    ref = gguf.GGUFReader(str(path))
    with tensorfile.open(path) as f:
        meta = f.metadata
        typed = f.typed_metadata
    fields = {k: v for k, v in ref.fields.items() if not k.startswith("GGUF.")}
    assert sorted(meta) == sorted(fields)
    nested = dict(NESTED)
    for key, field in fields.items():
        want = field.contents()
        got = meta[key]
        main, last = field.types[0], field.types[-1]
        if key in nested:  # contents() flattens an array of arrays; tensorfile keeps it
            assert got == (short32(nested[key]) if key == "n_float" else nested[key]), key
            assert same(flatten(got), short32(want) if key == "n_float" else want), key
            continue
        if last == VT.FLOAT32:  # the shortest float that reads back as the same float32
            want = short32(want)
            assert struct.pack("<f", got if main != VT.ARRAY else got[0]) == struct.pack(
                "<f", field.contents() if main != VT.ARRAY else field.contents()[0]
            )
        assert same(got, want), (key, got, want)
        assert not isinstance(got, TypedValue)
        assert typed[key].type == main.name.lower(), key
        if main == VT.ARRAY:
            assert typed[key].element_type == last.name.lower(), key
    assert meta["eps"] == 1e-12 and meta["a_f32"][:3] == [0.1, 1e-12, 1e-5]
    assert isinstance(meta["u64"], int) and isinstance(meta["yes"], bool)


def test_typed_metadata_round_trips_through_the_gguf_writer(tmp_path: Path) -> None:
    path = write(tmp_path / "m.gguf")
    with tensorfile.open(path) as f:
        typed = dict(f.typed_metadata)
    assert typed["eps"].bits == struct.unpack("<I", struct.pack("<f", 1e-12))[0]
    assert typed["n_int"].element_type == "array" and typed["n_int"].items is not None
    assert typed["n_int"].items[0] == TypedValue("array", [1, 2], "int32")
    assert typed["n_deep"].items is not None and typed["n_deep"].items[0].element_type == "array"
    again = tmp_path / "again.gguf"
    w = gguf.GGUFWriter(str(again), arch="llama")
    for key, value in typed.items():
        if key == "general.architecture":
            continue
        if value.type == "array" and value.element_type != "array":
            sub = VT[value.element_type.upper()]
            w.add_key_value(key, value.value, VT.ARRAY, sub_type=sub)
        elif value.type == "array":
            w.add_array(key, value.value)
        else:
            w.add_key_value(key, value.value, VT[value.type.upper()])
    w.add_tensor("w", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with tensorfile.open(again) as f:
        assert dict(f.typed_metadata) == typed
        assert plain(f.typed_metadata["a_f32"]) == f.metadata["a_f32"]


def test_convert_writes_float32_metadata_as_its_shortest_text(tmp_path: Path) -> None:
    path = write(tmp_path / "m.gguf")
    st = tmp_path / "m.safetensors"
    convert(path, st)
    with safe_open(str(st), "np") as f:
        meta = f.metadata()
    assert meta["eps"] == "1e-12"  # not '9.999999960041972e-13'
    assert meta["f32_tenth"] == "0.1"
    assert meta["f32_big"] == "3e+38"
    assert json.loads(meta["a_f32"].replace("Infinity", "1e999")) == [
        0.1,
        1e-12,
        1e-05,
        -2.5,
        math.inf,
    ]
    assert meta["n_float"] == "[[0.5, 0.1], [1e-12]]" and meta["n_int"] == "[[1, 2], [3, 4, 5]]"
    assert meta["f64"] == "0.1" and meta["u64"] == str(2**64 - 1) and meta["name"] == "tiny ü 模型"
    zt = tmp_path / "m.zt"
    convert(path, zt, to="zt2")
    from tensorfile import ztensor

    with ztensor.open(zt) as f:
        attrs = f.attributes
    assert attrs["eps"] == 1e-12 and attrs["a_f32"][:2] == [0.1, 1e-12]
    assert attrs["n_str"] == [["a", "b"], ["c"]]
    v1 = tmp_path / "v1.zt"
    convert(path, v1, to="zt")
    with ztensor.open(v1) as f:
        assert f.metadata["eps"] == "1e-12"


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-12, "1e-12"), (1e-5, "1e-05"), (0.1, "0.1"), (16777217.0, "16777216.0"), (-0.0, "-0.0")],
)
def test_short_float32(value: float, text: str) -> None:
    got = short_float32(struct.unpack("<f", struct.pack("<f", value))[0])
    assert repr(got) == text
    assert struct.pack("<f", got) == struct.pack("<f", value)


def test_nested_arrays_deeper_than_the_limit_are_refused(tmp_path: Path) -> None:
    value: Any = [1]
    for _ in range(20):
        value = [value]
    path = tmp_path / "deep.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_array("deep", value)
    w.add_tensor("w", np.zeros(1, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(tensorfile.FormatError, match="'deep' nests arrays more than 16 deep"):
        tensorfile.open(path)


def test_a_file_with_arrays_of_arrays_has_a_structural_hash_and_diffs(tmp_path: Path) -> None:
    """Arrays of arrays (refused at open before they were read) are canonicalised item by
    item: the structural hash and diff work, and a changed inner item changes the hash."""
    from tensorfile.ops import diff, structural_hash
    from tensorfile.ops.hash import canonical_json

    a = write(tmp_path / "a.gguf")
    assert '"n_deep":"[[[1],[2,3]],[[4]]]"' in canonical_json(tensorfile.ops.load(str(a)))
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), arch="llama")
    for key, value, kind in SCALARS:
        w.add_key_value(key, value, kind)
    for key, values, kind in ARRAYS:
        w.add_key_value(key, values, VT.ARRAY, sub_type=kind)
    for key, values in NESTED:
        w.add_array(key, [[[1], [2, 4]], [[4]]] if key == "n_deep" else values)
    w.add_tensor("w", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    b = tmp_path / "b.gguf"
    assert structural_hash(str(a)) == structural_hash(str(write(tmp_path / "a2.gguf")))
    assert structural_hash(str(a)) != structural_hash(str(b))
    result = diff(str(a), str(b))
    assert list(result.metadata_changed) == ["n_deep"]
