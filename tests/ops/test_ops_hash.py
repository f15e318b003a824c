"""ops.structural_hash (weight-inspect's, checked against an independent reference) and
ops.content_hash (cross-format, data-sensitive)."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import gguf
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as ref_st
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.errors import (
    ChecksumError,
    InvalidArgumentError,
    InvalidMetadataError,
    NoDigestsWarning,
    SafetensorChecksumError,
    ZTensorChecksumError,
)
from tensorfile.ops.hash import canonical_json
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import write_sharded
from tests.helpers.digests import digest_text
from tests.helpers.weight_inspect import expected_canonical, sha256_hex, wi_gguf, wi_text

EXAMPLE_HASH = "625a71753a42bd1b8b43e866dc9c8c0b4535394b9f54707a6dc13593b842a873"

# -- the published example ---------------------------------------------------------------


def test_reference_implementation_reproduces_the_example() -> None:
    doc = expected_canonical("safetensors", {}, [("test.weight.0", "F32", [64, 128], 32768)])
    assert sha256_hex(doc) == EXAMPLE_HASH


@pytest.mark.parametrize("writer", ["tensorfile", "reference"])
def test_example_hash_exact(tmp_path: Path, writer: str) -> None:
    path = str(tmp_path / "m.safetensors")
    tensors = {"test.weight.0": np.zeros((64, 128), np.float32)}
    if writer == "tensorfile":
        save_file(tensors, path)
    else:
        ref_st.save_file(tensors, path)
    assert ops.structural_hash(path) == EXAMPLE_HASH
    assert ops.inspect(path).structural_hash == EXAMPLE_HASH


def test_hash_ignores_values_and_file_layout(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file({"test.weight.0": np.zeros((64, 128), np.float32)}, a)
    save_file({"test.weight.0": np.ones((64, 128), np.float32)}, b, align=4096)
    assert ops.structural_hash(a) == ops.structural_hash(b) == EXAMPLE_HASH


# -- safetensors: metadata canonicalisation, many tensors ---------------------------------

TRICKY_METADATA = {
    "plain": "pt",
    "quotes": 'say "hi"',
    "backslash": "C:\\path\\to\\x",
    "newline_cr_tab": "a\nb\rc\td",
    "backspace": "x\by",
    "formfeed": "x\fy",
    "del": "x\x7fy",
    "nul_and_unit_sep": "\x00\x1f",
    "latin": "café",
    "cjk": "模型",
    "emoji": "🙂",
    "c1_and_linesep": "\x85\u2028",
    "empty": "",
    "json_like": '{"a": [1, 2]}',
    "é_key": "v",
    "Z_upper_sorts_first": "v",
    "tab\tin_key": "v",
}


def _expected_safetensors(meta: dict[str, str], arrays: dict[str, Any]) -> str:
    tensors = []
    for name, arr in arrays.items():
        dt = {
            np.dtype(np.float32): "F32",
            np.dtype(np.float16): "F16",
            np.dtype(np.int64): "I64",
            np.dtype(np.uint8): "U8",
            np.dtype(np.bool_): "BOOL",
            np.dtype(ml_dtypes.bfloat16): "BF16",
        }[arr.dtype]
        tensors.append((name, dt, list(arr.shape), arr.nbytes))
    return expected_canonical("safetensors", {k: wi_text(v) for k, v in meta.items()}, tensors)


@pytest.mark.parametrize("writer", ["tensorfile", "reference"])
def test_safetensors_metadata_canonicalisation(tmp_path: Path, writer: str) -> None:
    arrays = {
        "b.weight": np.ones((3, 2), np.float16),
        "a.bias": np.arange(5, dtype=np.int64),
        "flag": np.array([True, False]),
        "Emb": np.zeros((2, 2), ml_dtypes.bfloat16),
        "ü.name": np.zeros(1, np.uint8),
    }
    path = str(tmp_path / "m.safetensors")
    if writer == "tensorfile":
        save_file(arrays, path, dict(TRICKY_METADATA))
    else:
        ref_st.save_file({k: v for k, v in arrays.items() if k != "Emb"}, path, TRICKY_METADATA)
        arrays.pop("Emb")
    expected = _expected_safetensors(TRICKY_METADATA, arrays)
    assert canonical_json(ops.load(path)) == expected
    assert ops.structural_hash(path) == sha256_hex(expected)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("\b", '"\\u0008"'),
        ("\f", '"\\u000c"'),
        ("\x00", '"\\u0000"'),
        ("\x1f", '"\\u001f"'),
        ("\x7f", '"\\u007f"'),
        ('"', '"\\""'),
        ("\\", '"\\\\"'),
        ("\n\r\t", '"\\n\\r\\t"'),
        ("~ ", '"~ "'),
        # non-ASCII is kept as it is: Latin-1, C1 controls, separators, CJK, astral
        ("é", '"é"'),
        ("\x80\x85\x9f", '"\x80\x85\x9f"'),
        ("\u2028\u2029", '"\u2028\u2029"'),
        ("–日本語", '"–日本語"'),
        ("😀", '"😀"'),
    ],
)
def test_single_value_canonical_form(tmp_path: Path, text: str, canonical: str) -> None:
    # the literal canonical strings, written out by hand, pin the reference too
    assert wi_text(text) == canonical
    path = str(tmp_path / "m.safetensors")
    save_file({"w": np.zeros(1, np.float32)}, path, {"k": text})
    expected = expected_canonical("safetensors", {"k": canonical}, [("w", "F32", [1], 4)])
    assert ops.structural_hash(path) == sha256_hex(expected)


def test_metadata_change_changes_hash(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file({"w": np.zeros(1, np.float32)}, a, {"k": "x\by"})
    save_file({"w": np.zeros(1, np.float32)}, b, {"k": "x\fy"})
    assert ops.structural_hash(a) != ops.structural_hash(b)


def test_zero_size_tensors_are_hashed_with_byte_length_zero(tmp_path: Path) -> None:
    arrays = {
        "empty": np.zeros((0, 7), np.float32),
        "scalar": np.array(1.5, np.float32),
        "w": np.ones((2, 2), np.float16),
    }
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path)
    expected = expected_canonical(
        "safetensors",
        {},
        [("empty", "F32", [0, 7], 0), ("scalar", "F32", [], 4), ("w", "F16", [2, 2], 8)],
    )
    assert canonical_json(ops.load(path)) == expected
    assert ops.structural_hash(path) == sha256_hex(expected)
    without = str(tmp_path / "n.safetensors")
    save_file({k: v for k, v in arrays.items() if k != "empty"}, without)
    assert ops.structural_hash(without) != ops.structural_hash(path)


# -- GGUF ------------------------------------------------------------------------------------

GGUF_SCALARS: list[tuple[str, str, Any]] = [
    ("k.u8", "uint8", 255),
    ("k.i8", "int8", -128),
    ("k.u16", "uint16", 65535),
    ("k.i16", "int16", -32768),
    ("k.u32", "uint32", 4_000_000_000),
    ("k.i32", "int32", -2_000_000_000),
    ("k.u64", "uint64", 2**64 - 1),
    ("k.u64small", "uint64", 12345),
    ("k.i64", "int64", -(2**62)),
    ("k.f32", "float32", 0.1),
    ("k.f32neg0", "float32", -0.0),
    ("k.f64", "float64", 0.1),
    ("k.f64inf", "float64", float("-inf")),
    ("k.bool_t", "bool", True),
    ("k.bool_f", "bool", False),
    ("k.str", "string", 'tab\t"q" back\\slash é\b\x7f'),
    ("k.empty", "string", ""),
]
GGUF_ARRAYS: list[tuple[str, str, list[Any]]] = [
    ("a.i32", "int32", [1, -2, 3]),
    ("a.f32", "float32", [1.5, 0.1]),
    ("a.str", "string", ["a", 'b"', "ç\n"]),
    ("a.bool", "bool", [True, False]),
]


def _write_gguf(path: str) -> list[tuple[str, str, list[int], int]]:
    """A GGUF file with every scalar type and some arrays; returns the expected tensors
    (name, dtype, shape in file order, weight-inspect byte_length)."""
    w = gguf.GGUFWriter(path, arch="llama")
    vt = gguf.GGUFValueType
    types = {
        "uint8": vt.UINT8,
        "int8": vt.INT8,
        "uint16": vt.UINT16,
        "int16": vt.INT16,
        "uint32": vt.UINT32,
        "int32": vt.INT32,
        "uint64": vt.UINT64,
        "int64": vt.INT64,
        "float32": vt.FLOAT32,
        "float64": vt.FLOAT64,
        "bool": vt.BOOL,
        "string": vt.STRING,
    }
    for key, kind, value in GGUF_SCALARS:
        w.add_key_value(key, value, types[kind])  # add_string() would drop ""
    elem = {"int32": vt.INT32, "float32": vt.FLOAT32, "string": vt.STRING, "bool": vt.BOOL}
    for key, kind, values in GGUF_ARRAYS:
        w.add_key_value(key, values, vt.ARRAY, sub_type=elem[kind])
    expected = []
    for np_dtype, name, size in [
        (np.float32, "f32", 4),
        (np.float16, "f16", 2),
        (np.int8, "i8", 1),
        (np.int16, "i16", 2),
        (np.int32, "i32", 4),
        (np.int64, "i64", 8),
        (np.float64, "f64", 8),
    ]:
        w.add_tensor(f"blk.{name}.weight", np.ones((3, 5), np_dtype))
        expected.append((f"blk.{name}.weight", name, [5, 3], 15 * size))
    w.add_tensor("bf", np.zeros(4, np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)
    expected.append(("bf", "bf16", [4], 8))
    # quantized: weight-inspect counts 0 bytes
    w.add_tensor("q8", np.zeros((2, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    expected.append(("q8", "q8_0", [32, 2], 0))
    w.add_tensor("q4", np.zeros((1, 18), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    expected.append(("q4", "q4_0", [32, 1], 0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def _expected_gguf_metadata() -> dict[str, str]:
    meta = {"general.architecture": wi_text("llama")}
    for key, kind, value in GGUF_SCALARS:
        meta[key] = wi_gguf(kind, value)
    for key, kind, values in GGUF_ARRAYS:
        meta[key] = wi_gguf("array", values, kind)
    return meta


def test_gguf_reference_canonical_strings_pinned() -> None:
    # hand-computed values pin the reference implementation itself
    assert wi_gguf("uint64", 2**64 - 1) == "-1"
    assert wi_gguf("float32", 0.1) == "f32:1036831949"
    assert wi_gguf("float32", -0.0) == "f32:2147483648"
    assert wi_gguf("float64", 0.1) == "4591870180066957722"
    assert wi_gguf("array", ["a", 'b"'], "string") == '["a","b\\""]'
    assert wi_gguf("array", [True, False], "bool") == "[true,false]"


def test_gguf_structural_hash(tmp_path: Path) -> None:
    path = str(tmp_path / "m.gguf")
    tensors = _write_gguf(path)
    expected = expected_canonical("gguf", _expected_gguf_metadata(), tensors, gguf_version=3)
    assert canonical_json(ops.load(path)) == expected
    assert ops.structural_hash(path) == sha256_hex(expected)
    assert ops.inspect(path).structural_hash == sha256_hex(expected)


def test_gguf_float32_signalling_nan_keeps_its_bit_pattern(tmp_path: Path) -> None:
    """weight-inspect hashes float32 metadata by its stored u32 bits; a signalling NaN
    (0x7f800001) must not come out quieted (0x7fc00001)."""
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, arch="x")
    w.add_float32("k.nan", 1.75)  # a sentinel, patched below
    w.add_key_value("a.nan", [1.75, 2.0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blob = Path(path).read_bytes()
    sentinel = np.array(1.75, "<f4").tobytes()
    assert blob.count(sentinel) == 2
    snan = np.array(0x7F800001, "<u4").tobytes()
    Path(path).write_bytes(blob.replace(sentinel, snan))
    meta = {
        "general.architecture": wi_text("x"),
        "k.nan": "f32:2139095041",
        "a.nan": "[f32:2139095041,f32:1073741824]",
    }
    expected = expected_canonical("gguf", meta, [], gguf_version=3)
    assert canonical_json(ops.load(path)) == expected


# -- zTensor -------------------------------------------------------------------------------


def _zt_arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(1)
    return {
        "layer.0.w": rng.standard_normal((16, 8)).astype(np.float32),
        "layer.0.b": np.zeros(8, np.float16),
        "ids": np.arange(10, dtype=np.int64),
        "empty": np.zeros((0, 3), np.float32),
        "mask": np.array([True, False, True]),
    }


def test_ztensor_structural_hash_reference(tmp_path: Path) -> None:
    path = str(tmp_path / "m.zt")
    meta = {"license": "MIT", "note": 'a "b"\n\x7f'}
    arrays = _zt_arrays()
    ztensor.save_file(arrays, path, attributes=meta)
    names = {
        np.dtype(np.float32): "float32",
        np.dtype(np.float16): "float16",
        np.dtype(np.int64): "int64",
        np.dtype(np.bool_): "bool",
    }
    tensors = [(k, names[v.dtype], list(v.shape), v.nbytes) for k, v in arrays.items()]
    expected = expected_canonical("ztensor", {k: wi_text(v) for k, v in meta.items()}, tensors)
    assert canonical_json(ops.load(path)) == expected
    assert ops.structural_hash(path) == sha256_hex(expected)


@pytest.mark.parametrize("checksum", [None, "crc32c", "sha256"])
def test_ztensor_hash_stable_when_recompressed(tmp_path: Path, checksum: str | None) -> None:
    arrays = _zt_arrays()
    raw, packed = str(tmp_path / "raw.zt"), str(tmp_path / "zstd.zt")
    ztensor.save_file(arrays, raw, attributes={"a": "1"})
    ztensor.save_file(arrays, packed, attributes={"a": "1"}, compression="zstd", checksum=checksum)
    assert Path(raw).read_bytes() != Path(packed).read_bytes()
    assert ops.structural_hash(raw) == ops.structural_hash(packed)
    # but the stored byte lengths really differ: the hash is not just reading them
    stored_raw = {t.name: t.nbytes for t in ops.load(raw).tensors.values()}
    stored_zst = {t.name: t.nbytes for t in ops.load(packed).tensors.values()}
    assert stored_raw != stored_zst


def test_ztensor_and_safetensors_hashes_differ_by_format(tmp_path: Path) -> None:
    arrays = {"w": np.ones(4, np.float32)}
    st, zt = str(tmp_path / "m.safetensors"), str(tmp_path / "m.zt")
    save_file(arrays, st)
    ztensor.save_file(arrays, zt)
    assert ops.structural_hash(st) != ops.structural_hash(zt)
    assert '"format":"ztensor"' in canonical_json(ops.load(zt))


# -- content hash ---------------------------------------------------------------------------


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(7)
    return {
        "a.weight": rng.standard_normal((32, 16)).astype(np.float32),
        "a.bias": rng.standard_normal(16).astype(np.float16),
        "b.ids": rng.integers(-100, 100, size=(5, 3)).astype(np.int32),
        "b.bf": rng.standard_normal(9).astype(ml_dtypes.bfloat16),
        "c.empty": np.zeros((0, 4), np.float32),
        "d.u8": rng.integers(0, 255, size=33).astype(np.uint8),
    }


def _save(arrays: dict[str, Any], path: Path, kind: str) -> str:
    p = str(path)
    if kind == "safetensors":
        save_file(arrays, p, {"x": "1"})
    elif kind == "zt-raw":
        ztensor.save_file(arrays, p)
    elif kind == "zt-zstd":
        ztensor.save_file(arrays, p, compression="zstd", checksum="crc32c")
    return p


@pytest.mark.parametrize("kind", ["zt-raw", "zt-zstd"])
def test_content_hash_same_across_formats(tmp_path: Path, kind: str) -> None:
    arrays = _arrays()
    st = _save(arrays, tmp_path / "m.safetensors", "safetensors")
    zt = _save(arrays, tmp_path / "m.zt", kind)
    assert ops.content_hash(st) == ops.content_hash(zt)
    assert len(ops.content_hash(st)) == 64


def test_content_hash_sparse_ztensor_equals_dense(tmp_path: Path) -> None:
    dense = np.zeros((6, 5), np.float32)
    dense[1, 2], dense[4, 0], dense[5, 4] = 1.5, -2.0, 3.25
    st = str(tmp_path / "m.safetensors")
    zt = str(tmp_path / "m.zt")
    save_file({"s": dense}, st)
    ztensor.save_file({"s": ztensor.CSRTensor.from_dense(dense)}, zt)
    assert ops.content_hash(st) == ops.content_hash(zt)


@pytest.mark.parametrize("kind", ["safetensors", "zt-raw", "zt-zstd"])
@pytest.mark.parametrize("change", ["value", "shape", "name", "dtype", "drop"])
def test_content_hash_changes(tmp_path: Path, kind: str, change: str) -> None:
    base = _arrays()
    other = {k: v.copy() for k, v in base.items()}
    if change == "value":
        other["a.weight"][7, 3] = np.nextafter(other["a.weight"][7, 3], np.float32(np.inf))
    elif change == "shape":
        other["a.weight"] = other["a.weight"].reshape(16, 32)
    elif change == "name":
        other["a.weight2"] = other.pop("a.weight")
    elif change == "dtype":
        other["d.u8"] = other["d.u8"].view(np.int8)  # same bytes, other dtype
    elif change == "drop":
        other.pop("c.empty")  # even an empty tensor counts
    suffix = ".safetensors" if kind == "safetensors" else ".zt"
    a = _save(base, tmp_path / f"a{suffix}", kind)
    b = _save(other, tmp_path / f"b{suffix}", kind)
    assert ops.content_hash(a) != ops.content_hash(b)


def test_content_hash_ignores_metadata(tmp_path: Path) -> None:
    arrays = _arrays()
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file(arrays, a, {"x": "1"})
    save_file(arrays, b, {"y": "2"}, align=64)
    assert ops.content_hash(a) == ops.content_hash(b)


@pytest.mark.parametrize("kind", ["safetensors", "zt-raw", "zt-zstd"])
def test_content_hash_progress(tmp_path: Path, kind: str) -> None:
    arrays = _arrays()
    path = _save(arrays, tmp_path / ("m.safetensors" if kind == "safetensors" else "m.zt"), kind)
    total_bytes = sum(v.nbytes for v in arrays.values())
    calls: list[tuple[int, int]] = []
    digest = ops.content_hash(path, progress=lambda done, total: calls.append((done, total)))
    assert digest == ops.content_hash(path)
    assert calls, "progress was never called"
    dones = [d for d, _ in calls]
    assert all(b >= a for a, b in itertools.pairwise(dones))
    assert {t for _, t in calls} == {total_bytes}
    assert dones[-1] == total_bytes


def test_content_hash_sharded_equals_single_file(tmp_path: Path) -> None:
    arrays = _arrays()
    names = sorted(arrays)
    single = str(tmp_path / "single.safetensors")
    save_file(arrays, single)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    index = str(
        write_sharded(
            folder, [{k: arrays[k] for k in names[:3]}, {k: arrays[k] for k in names[3:]}]
        )
    )
    assert ops.content_hash(index) == ops.content_hash(single)
    calls: list[int] = []
    ops.content_hash(index, progress=lambda d, t: calls.append(d))
    assert calls[-1] == sum(v.nbytes for v in arrays.values())


def test_content_hash_large_tensor_progress_reaches_total(tmp_path: Path) -> None:
    n = 3 * (1 << 20)  # 12 MiB of float32
    arr = np.arange(n, dtype=np.float32)
    path = str(tmp_path / "big.safetensors")
    save_file({"big": arr, "small": np.ones(3, np.int8)}, path)
    calls: list[tuple[int, int]] = []
    ops.content_hash(path, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (arr.nbytes + 3, arr.nbytes + 3)


def test_content_hash_gguf(tmp_path: Path) -> None:
    def write(path: str, value: float) -> str:
        w = gguf.GGUFWriter(path, arch="llama")
        w.add_tensor("a", np.full((3, 4), value, np.float32))
        w.add_tensor("q", np.zeros((1, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    a = write(str(tmp_path / "a.gguf"), 1.0)
    b = write(str(tmp_path / "b.gguf"), 1.0)
    c = write(str(tmp_path / "c.gguf"), 2.0)
    assert ops.content_hash(a) == ops.content_hash(b)
    assert ops.content_hash(a) != ops.content_hash(c)
    calls: list[int] = []
    ops.content_hash(a, progress=lambda d, t: calls.append(d))
    assert calls[-1] == 48 + 34


# -- content id v2: per-tensor digests; stored ones used only when trusted -------------------

ALGORITHMS = ("xxh3", "crc32c", "sha256")


def _expected_id(arrays: dict[str, Any], algorithm: str) -> str:
    """The content id v2, recomputed from its definition."""
    h = hashlib.sha256(b"tensorfile-content-v2\n")
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        head = {"name": name, "dtype": _COMMON[a.dtype.name], "shape": list(a.shape)}
        h.update(json.dumps(head, separators=(",", ":")).encode() + b"\n")
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()  # row-major, little-endian
        h.update(digest_text(algorithm, data).encode() + b"\n")
    return h.hexdigest() if algorithm == "sha256" else f"{algorithm}:{h.hexdigest()}"


_COMMON = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32"}
_COMMON.update({"int8": "I8", "uint8": "U8", "bool": "BOOL"})


def _read_bytes(path: str, algorithm: str = "sha256", **kw: Any) -> tuple[str, int]:
    """The id and the ``total`` bytes its progress announced (0: nothing was to be read)."""
    calls: list[tuple[int, int]] = []
    got = ops.content_hash(path, lambda d, t: calls.append((d, t)), algorithm=algorithm, **kw)
    assert calls and calls[-1][0] == calls[-1][1], calls  # progress reaches its total
    assert len({t for _, t in calls}) == 1
    return got, calls[-1][1]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_content_id_v2_recomputed_from_its_definition(tmp_path: Path, algorithm: str) -> None:
    arrays = _arrays()
    plain = _save(arrays, tmp_path / "m.safetensors", "safetensors")
    want = _expected_id(arrays, algorithm)
    assert ops.content_hash(plain, algorithm=algorithm) == want
    if algorithm == "sha256":
        assert ops.content_hash(plain) == want  # the default
    assert len({_expected_id(arrays, a) for a in ALGORITHMS}) == 3  # the id names its algorithm


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_stored_digests_give_the_same_id_in_every_container(tmp_path: Path, algorithm: str) -> None:
    arrays = {**_arrays(), "e.bool": np.array([True, False, True, True])}
    plain = str(tmp_path / "plain.safetensors")
    save_file(arrays, plain)
    want = _expected_id(arrays, algorithm)
    all_bytes = sum(a.nbytes for a in arrays.values())
    # a BOOL tensor is always read: its stored bytes may hold any nonzero byte for True
    bool_bytes = arrays["e.bool"].nbytes
    files: dict[str, tuple[str, bool]] = {}  # name: (path, its stored digests are used)
    st = str(tmp_path / "digests.safetensors")
    save_file(arrays, st, checksum=algorithm)
    files["safetensors"] = (st, True)
    for other in ALGORITHMS:
        if other != algorithm:
            p = str(tmp_path / f"{other}.safetensors")
            save_file(arrays, p, checksum=other)
            files[f"safetensors-{other}"] = (p, False)
    for to, checksums in (("zt", ("crc32c", "sha256")), ("zt2", ("xxh3", "sha256"))):
        for checksum in checksums:
            for compression in (None, "zstd"):
                p = str(tmp_path / f"{to}-{checksum}-{compression}.zt")
                ops.convert(plain, p, to=to, checksum=checksum, compression=compression)
                # zTensor v1.0 digests cover the stored (compressed) bytes: used only raw
                used = checksum == algorithm and (to == "zt2" or compression is None)
                files[f"{to}-{checksum}-{compression}"] = (p, used)
                if compression is not None:  # really compressed: not the raw bytes
                    with tensorfile.open(p) as r:
                        assert r.info("a.weight").data.encoding != "raw"
    for name, (path, used) in files.items():
        # trusted, the stored digests stand for the data: only the rest is read
        got, total = _read_bytes(path, algorithm, trust_stored_digests=True)
        assert got == want, name
        assert total == (bool_bytes if used else all_bytes), name
        # by default every byte is read, whatever the file stores: the same id on an
        # intact file, so ids computed either way (dedup keys) agree
        assert _read_bytes(path, algorithm) == (want, all_bytes), name
        got, total = _read_bytes(path, algorithm, verify=True)  # checked: every byte read
        assert (got, total) == (want, all_bytes), name


def _flip(path: str, name: str) -> None:
    """Change one byte of tensor ``name``'s stored data, in place (same size, header kept)."""
    with tensorfile.open(path) as r:
        rng = r.info(name).byte_range
    assert rng.length > 3
    with open(path, "r+b") as f:
        f.seek(rng.start + 3)
        byte = f.read(1)[0]
        f.seek(rng.start + 3)
        f.write(bytes([byte ^ 0x5A]))


def _stored_array(path: str, name: str) -> np.ndarray[Any, Any]:
    """Tensor ``name`` as its stored bytes are now, read past every digest check."""
    with tensorfile.open(path, verify=False) as r:
        info = r.info(name)
        raw = r.source.read(info.byte_range.start, info.byte_range.length)
    return np.frombuffer(raw, np.float32).reshape(info.shape)


def _digested(path: str, kind: str, algorithm: str, arrays: dict[str, Any], plain: str) -> None:
    if kind == "safetensors":
        save_file(arrays, path, checksum=algorithm)
    else:
        ops.convert(plain, path, to=kind, checksum=algorithm)


@pytest.mark.parametrize(
    ("kind", "algorithm", "error"),
    [
        ("safetensors", "xxh3", SafetensorChecksumError),
        ("safetensors", "crc32c", SafetensorChecksumError),
        ("safetensors", "sha256", SafetensorChecksumError),
        ("zt", "crc32c", ZTensorChecksumError),
        ("zt", "sha256", ZTensorChecksumError),
        ("zt2", "xxh3", ZTensorChecksumError),
        ("zt2", "sha256", ZTensorChecksumError),
    ],
)
def test_a_forged_file_gets_another_id_unless_its_digests_are_trusted(
    tmp_path: Path, kind: str, algorithm: str, error: type[Exception]
) -> None:
    """A byte flipped after writing, the stored digests left as they were: by default the
    id is that of the bytes, not the intact file's; trusting the digests keeps the old id
    (the opt-in's documented cost); verify refuses the file."""
    arrays = _arrays()
    plain = _save(arrays, tmp_path / "plain.safetensors", "safetensors")
    path = str(tmp_path / f"m.{kind}")
    _digested(path, kind, algorithm, arrays, plain)
    other = "sha256" if algorithm != "sha256" else "xxh3"
    original, original_other = _expected_id(arrays, algorithm), _expected_id(arrays, other)
    assert ops.content_hash(path, algorithm=algorithm) == original
    assert ops.content_hash(path, algorithm=algorithm, trust_stored_digests=True) == original
    _flip(path, "a.weight")
    changed = {**arrays, "a.weight": _stored_array(path, "a.weight")}
    assert not np.array_equal(changed["a.weight"], arrays["a.weight"])
    # the id is a statement about the bytes: it reads them, and it is the changed file's
    assert ops.content_hash(path, algorithm=algorithm) == _expected_id(changed, algorithm)
    assert ops.content_hash(path, algorithm=algorithm) != original
    assert ops.content_hash(path, algorithm=other) == _expected_id(changed, other)
    assert ops.content_hash(path, algorithm=other) != original_other
    # trusted, the stored digest stands for the data: the changed byte is never read
    assert ops.content_hash(path, algorithm=algorithm, trust_stored_digests=True) == original
    for algo in (algorithm, other):  # verify checks every digest the file stores
        with pytest.raises(error, match=r"a\.weight") as caught:
            ops.content_hash(path, algorithm=algo, verify=True)
        assert isinstance(caught.value, ChecksumError)
        assert caught.value.tensor == "a.weight"


@pytest.mark.parametrize(
    "digests",
    [
        '{"w": "xxh3:00"}',  # wrong length
        '{"w": "md5:d41d8cd98f00b204e9800998ecf8427e"}',  # an algorithm tensorfile lacks
        '{"nope": "crc32c:00000000"}',  # a tensor the file lacks
        "not json",
    ],
)
def test_lying_digest_metadata_is_an_error_of_the_file(tmp_path: Path, digests: str) -> None:
    path = str(tmp_path / "m.safetensors")
    w = np.ones(4, np.float32)
    ref_st.save_file({"w": w}, path, metadata={"tensorfile.digests": digests})
    for algorithm in ALGORITHMS:
        for way in ({"trust_stored_digests": True}, {"verify": True}):  # the digests used
            with pytest.raises(InvalidMetadataError, match=r"tensorfile\.digests"):
                ops.content_hash(path, algorithm=algorithm, **way)
        # by default they are not: the id is that of the bytes, as without the metadata
        assert ops.content_hash(path, algorithm=algorithm) == _expected_id({"w": w}, algorithm)


def test_verify_and_trusting_stored_digests_exclude_each_other(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file(_arrays(), path, checksum="sha256")
    with pytest.raises(InvalidArgumentError, match="trust_stored_digests"):
        ops.content_hash(path, verify=True, trust_stored_digests=True)


def test_unknown_algorithm_is_refused(tmp_path: Path) -> None:
    path = _save(_arrays(), tmp_path / "m.safetensors", "safetensors")
    with pytest.raises(InvalidArgumentError, match="md5"):
        ops.content_hash(path, algorithm="md5")


def test_progress_total_excludes_tensors_a_stored_digest_covers(tmp_path: Path) -> None:
    arrays = _arrays()
    names = sorted(arrays)
    with_digests = {k: arrays[k] for k in names[:3]}
    without = {k: arrays[k] for k in names[3:]}
    save_file(with_digests, str(tmp_path / "part-1.safetensors"), checksum="xxh3")
    save_file(without, str(tmp_path / "part-2.safetensors"))
    glob = str(tmp_path / "part-*.safetensors")
    want = _expected_id(arrays, "xxh3")
    unread = sum(a.nbytes for a in without.values())
    assert _read_bytes(glob, "xxh3", trust_stored_digests=True) == (want, unread)
    all_bytes = sum(a.nbytes for a in arrays.values())
    assert _read_bytes(glob, "xxh3") == (want, all_bytes)
    with pytest.warns(NoDigestsWarning, match=r"part-2\.safetensors stores no digests"):
        assert _read_bytes(glob, "xxh3", verify=True) == (want, all_bytes)
    assert _read_bytes(glob, "sha256") == (_expected_id(arrays, "sha256"), all_bytes)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        st.text("abcxyz._", min_size=1, max_size=6),
        st.tuples(
            st.sampled_from(["float32", "int8"]),
            st.lists(st.integers(0, 4), min_size=0, max_size=3),
            st.integers(0, 2**32 - 1),
        ),
        max_size=4,
    )
)
def test_property_stored_xxh3_digests_agree_with_reading(
    tmp_path: Path, spec: dict[str, tuple[str, list[int], int]]
) -> None:
    arrays = {}
    for name, (dtype, shape, seed) in spec.items():
        rng = np.random.default_rng(seed)
        n = int(np.prod(shape))
        raw = rng.integers(0, 256, size=n * np.dtype(dtype).itemsize, dtype=np.uint8)
        arrays[name] = raw.view(dtype).reshape(shape)  # any bit pattern, NaNs included
    with_digests, without = str(tmp_path / "d.safetensors"), str(tmp_path / "p.safetensors")
    save_file(arrays, with_digests, checksum="xxh3")
    save_file(arrays, without)
    got, total = _read_bytes(with_digests, "xxh3", trust_stored_digests=True)
    assert total == 0
    assert got == ops.content_hash(without, algorithm="xxh3") == _expected_id(arrays, "xxh3")
    assert got == ops.content_hash(with_digests, algorithm="xxh3")  # read: the same id


def test_stored_digest_of_a_sharded_checkpoint_is_its_shards(tmp_path: Path) -> None:
    from tensorfile.safetensors.numpy import save_sharded

    arrays = _arrays()
    save_sharded(arrays, str(tmp_path / "ck"), max_shard_size=600, checksum="crc32c")
    index = str(tmp_path / "ck")
    with tensorfile.open(index) as r:
        assert len(set(map(r.shard_of, r.keys()))) > 1
        for name in r.keys():
            data = np.ascontiguousarray(arrays[name]).tobytes()
            assert r.stored_digest(name, "crc32c") == digest_text("crc32c", data)
            assert r.stored_digest(name, "xxh3") is None
    want = _expected_id(arrays, "crc32c")
    assert _read_bytes(index, "crc32c", trust_stored_digests=True) == (want, 0)
    assert _read_bytes(index, "crc32c")[0] == want
