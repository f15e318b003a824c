"""One test per safetensors validation rule, each with a hand-made malformed file.

Every rule is checked through every public entry point (the ``load`` fixture): the specific
error class, that it is a ``SafetensorError``, that the message names the tensor, and the
``offset``/``tensor`` attributes when the error sets them. Each rule is also checked against
the reference ``safetensors`` package: it rejects the same file, except for the rules where
tensorfile is documented to be stricter (duplicate names, leading whitespace, duplicate
metadata keys, the JSON schema's 48-bit size limit), where the test says so.
"""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors

import tensorfile
from tensorfile.errors import (
    DuplicateTensorError,
    HeaderEncodingError,
    HeaderSyntaxError,
    HeaderTooLargeError,
    HeaderTooSmallError,
    IncompleteBufferError,
    InvalidHeaderLengthError,
    InvalidMetadataError,
    InvalidOffsetsError,
    InvalidTensorEntryError,
    MisalignedSubByteError,
    SafetensorError,
    TensorNotFoundError,
    TensorSizeMismatchError,
    UnknownDtypeError,
    UnsupportedError,
    ValidationOverflowError,
)
from tensorfile.safetensors import deserialize, safe_open
from tensorfile.safetensors import numpy as st_numpy

NAME = "layer.0.weight"
"""The tensor most tests put in their malformed file (it has a dot, so matches escape it)."""

MAX_SIZE = 2**48 - 1
"""Largest dimension or offset the safetensors JSON schema allows."""


# --------------------------------------------------------------------------- helpers


def build(header: dict[str, Any] | bytes, data: bytes = b"", n: int | None = None) -> bytes:
    """A safetensors file: the length prefix, the header (JSON text, space padded), the data.

    ``header`` is a dict (written as compact JSON) or the exact header bytes (written as
    given, so that malformed JSON, duplicate keys and invalid UTF-8 can be made by hand).
    The header is padded with spaces to a multiple of 8 bytes, as the reference writer
    does. ``n`` overrides the declared header length.
    """
    if isinstance(header, bytes):
        body = header
    else:
        body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body) if n is None else n) + body + data


def entry(dtype: Any, shape: Any, offsets: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": offsets}


def offset_of(blob: bytes, needle: bytes) -> int:
    """File offset of the first occurrence of ``needle`` (in the header)."""
    pos = blob.find(needle, 8)
    assert pos >= 0, f"{needle!r} not in {blob!r}"
    return pos


def key_offset(blob: bytes, name: str) -> int:
    """File offset of the JSON key ``"name":`` in the header."""
    return offset_of(blob, json.dumps(name).encode() + b":")


def reference_rejects(blob: bytes, match: str | None = None) -> None:
    """The reference implementation rejects ``blob`` too."""
    with pytest.raises(safetensors.SafetensorError, match=match):
        safetensors.deserialize(blob)


def reference_accepts(blob: bytes) -> list[tuple[str, dict[str, Any]]]:
    return safetensors.deserialize(blob)


def normalized(tensors: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], bytes]]:
    return {k: (tuple(v.shape), np.ascontiguousarray(v).tobytes()) for k, v in tensors.items()}


def normalized_deserialized(items: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {name: (tuple(d["shape"]), bytes(d["data"])) for name, d in items}


Loader = Callable[[bytes], dict[str, tuple[tuple[int, ...], bytes]]]


def _write(tmp_path: Path, blob: bytes) -> Path:
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    return path


def _via_safe_open(tmp_path: Path) -> Loader:
    def load(blob: bytes) -> dict[str, tuple[tuple[int, ...], bytes]]:
        with safe_open(_write(tmp_path, blob), "np") as f:
            f.metadata()
            return normalized({k: f.get_tensor(k) for k in f.keys()})

    return load


def _via_tensorfile_open_path(tmp_path: Path) -> Loader:
    def load(blob: bytes) -> dict[str, tuple[tuple[int, ...], bytes]]:
        # format= names it: these are the safetensors rules (detection has its own tests)
        with tensorfile.open(_write(tmp_path, blob), format="safetensors") as reader:
            return normalized(reader.get_tensors())

    return load


def _via_tensorfile_open_bytes(blob: bytes) -> dict[str, tuple[tuple[int, ...], bytes]]:
    with tensorfile.open(blob, format="safetensors") as reader:
        return normalized(reader.get_tensors())


LOADERS: dict[str, Callable[[Path], Loader]] = {
    "deserialize": lambda _: lambda b: normalized_deserialized(deserialize(b)),
    "numpy.load": lambda _: lambda b: normalized(st_numpy.load(b)),
    "numpy.load_file": lambda p: lambda b: normalized(st_numpy.load_file(_write(p, b))),
    "safe_open": _via_safe_open,
    "tensorfile.open(bytes)": lambda _: _via_tensorfile_open_bytes,
    "tensorfile.open(path)": _via_tensorfile_open_path,
}


@pytest.fixture(params=list(LOADERS))
def load(request: pytest.FixtureRequest, tmp_path: Path) -> Loader:
    """Each public entry point, as a function from file bytes to {name: (shape, bytes)}."""
    return LOADERS[request.param](tmp_path)


def rejected(
    load: Loader, blob: bytes, cls: type[SafetensorError], match: str | None = None
) -> SafetensorError:
    """Load ``blob``, expect ``cls`` (which must be a SafetensorError) and return it."""
    with pytest.raises(cls, match=match) as info:
        load(blob)
    exc = info.value
    assert isinstance(exc, SafetensorError)
    assert exc.format == "safetensors"
    return exc


def check_tensor(exc: SafetensorError, blob: bytes, name: str = NAME) -> None:
    """The error names ``name`` in its message and attributes, and points at its key."""
    assert repr(name) in str(exc)
    assert exc.tensor == name
    if exc.offset is not None:
        assert exc.offset == key_offset(blob, name)


# --------------------------------------------------------------------------- length prefix


@pytest.mark.parametrize("size", [0, 1, 7])
def test_file_shorter_than_length_prefix(load: Loader, size: int) -> None:
    blob = b"\x02" + b"\x00" * (size - 1) if size else b""
    exc = rejected(load, blob, HeaderTooSmallError, match="8-byte")
    assert exc.offset == 0
    reference_rejects(blob, match="header too small")


@pytest.mark.parametrize("n", [2**63, 2**64 - 1, 100_000_001])
def test_header_length_over_limit_fails_fast(load: Loader, n: int) -> None:
    blob = struct.pack("<Q", n) + b"{}"
    tracemalloc.start()
    # CPU time of this process, not the clock: what a quadratic loop or a huge allocation
    # costs, whatever else runs on the machine (make test runs the suite in parallel)
    t0 = time.process_time()
    try:
        exc = rejected(load, blob, HeaderTooLargeError, match="100000000-byte limit")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.process_time() - t0 < 1.0
    assert peak < 10_000_000, f"allocated {peak} bytes for a {len(blob)}-byte file"
    assert exc.offset == 0
    reference_rejects(blob, match="header too large")


@pytest.mark.parametrize(
    "n",
    [
        9,  # one byte past the end: the file has room for an 8-byte header
        100,
        100_000_000,  # at the limit, so it is not "too large", but past the end of file
    ],
)
def test_header_length_past_end_of_file(load: Loader, n: int) -> None:
    blob = build(b"{}", n=n)
    assert len(blob) == 16
    exc = rejected(load, blob, InvalidHeaderLengthError, match="past the end")
    assert exc.offset == 0
    reference_rejects(blob, match="invalid header length")


# --------------------------------------------------------------------------- header text


@pytest.mark.parametrize(
    ("header", "bad"),
    [
        pytest.param(
            b'{"lay\xffer":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\xff", id="key"
        ),
        pytest.param(
            b'{"\xc3(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\xc3", id="key-start"
        ),
        pytest.param(
            b'{"__metadata__":{"k":"v\xc3"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            b"\xc3",
            id="metadata-value",
        ),
        pytest.param(
            b'{"__metadata__":{"k\xfe":"v"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            b"\xfe",
            id="metadata-key",
        ),
        pytest.param(
            # an encoded UTF-16 surrogate (CESU-8) is not UTF-8 either
            b'{"__metadata__":{"k":"\xed\xa0\x80"},'
            b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            b"\xed",
            id="metadata-value-surrogate",
        ),
        pytest.param(
            b'{"a":{"dtype":"F3\xff","shape":[1],"data_offsets":[0,4]}}', b"\xff", id="dtype"
        ),
        pytest.param(
            b'{"a":{"dtype":"F32","extra":"\x80","shape":[1],"data_offsets":[0,4]}}',
            b"\x80",
            id="ignored-field",
        ),
        pytest.param(
            b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\xff', b"\xff", id="padding"
        ),
    ],
)
def test_header_not_utf8(load: Loader, header: bytes, bad: bytes) -> None:
    blob = build(header, b"\x00" * 4)
    exc = rejected(load, blob, HeaderEncodingError, match="UTF-8")
    assert exc.offset == offset_of(blob, bad)
    reference_rejects(blob, match="invalid UTF-8")


@pytest.mark.parametrize(
    ("header", "match", "offset"),
    [
        pytest.param(b'{"a":{"dtype":"F32"', "JSON", None, id="truncated"),
        pytest.param(b"{}x", "JSON", 10, id="trailing-garbage"),
        pytest.param(b"{}\x00", "JSON", 10, id="trailing-nul"),
        pytest.param(b'{"a":{"dtype":"F32"}}}', "JSON", None, id="extra-brace"),
        pytest.param(b"{a:1}", "JSON", None, id="unquoted-key"),
        pytest.param(b"{'a':1}", "JSON", None, id="single-quotes"),
        pytest.param(b'{"a":1,}', "JSON", None, id="trailing-comma"),
        pytest.param(b"", "empty", 8, id="empty"),
    ],
)
def test_header_not_json(load: Loader, header: bytes, match: str, offset: int | None) -> None:
    blob = build(header)
    exc = rejected(load, blob, HeaderSyntaxError, match=match)
    if offset is not None:
        assert exc.offset == offset
    elif exc.offset is not None:
        assert 8 <= exc.offset <= len(blob)
    reference_rejects(blob)


@pytest.mark.parametrize("header", [b"[1,2]", b'"x"', b"1", b"null", b"true"])
def test_header_not_an_object(load: Loader, header: bytes) -> None:
    blob = build(header)
    exc = rejected(load, blob, HeaderSyntaxError, match="begin with '{'")
    assert exc.offset == 8
    reference_rejects(blob)


@pytest.mark.parametrize("space", [b" ", b"\n", b"\t", b"\r\n  "])
def test_leading_whitespace_before_object(load: Loader, space: bytes) -> None:
    header = space + b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
    blob = build(header, b"\x01\x02")
    exc = rejected(load, blob, HeaderSyntaxError, match="begin with '{'")
    assert exc.offset == 8
    # Stricter than the reference: the spec says the header begins with '{', but the
    # reference's JSON parser skips leading whitespace and accepts the file.
    assert normalized_deserialized(reference_accepts(blob)) == {"a": ((2,), b"\x01\x02")}


@pytest.mark.parametrize("trailing", [b"", b" ", b" " * 13, b" \t\r\n "])
def test_trailing_whitespace_after_object_is_accepted(load: Loader, trailing: bytes) -> None:
    header = json.dumps({NAME: entry("U8", [3], [0, 3])}, separators=(",", ":")).encode()
    blob = build(header + trailing, b"abc")
    assert load(blob) == {NAME: ((3,), b"abc")}
    assert normalized_deserialized(reference_accepts(blob)) == {NAME: ((3,), b"abc")}


# --------------------------------------------------------------------------- tensor names

_U8_0 = b'{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
_U8_1 = b'{"dtype":"U8","shape":[1],"data_offsets":[1,2]}'
_KEY = json.dumps(NAME).encode()


@pytest.mark.parametrize(
    ("header", "data", "reference_too"),
    [
        # The reference keeps the last entry and rejects the file only because its offsets
        # then leave a hole at the start; it has no duplicate-name rule.
        pytest.param(
            b"{" + _KEY + b":" + _U8_0 + b"," + _KEY + b":" + _U8_1 + b"}",
            b"\x00\x00",
            True,
            id="different-offsets",
        ),
        # Stricter than the reference, which accepts the rest: the spec says names are
        # unique, but the reference's JSON map keeps the last of two equal keys.
        pytest.param(
            b"{" + _KEY + b":" + _U8_0 + b"," + _KEY + b":" + _U8_0 + b"}",
            b"\x00",
            False,
            id="identical",
        ),
        pytest.param(
            b"{\n  " + _KEY + b": " + _U8_0 + b",\n  " + _KEY + b": " + _U8_0 + b"\n}",
            b"\x00",
            False,
            id="identical-with-whitespace",
        ),
        pytest.param(
            b'{"__metadata__":{"k":"v"},' + _KEY + b":" + _U8_0 + b"," + _KEY + b":" + _U8_0 + b"}",
            b"\x00",
            False,
            id="identical-after-metadata",
        ),
        pytest.param(
            b"{"
            + _KEY
            + b":"
            + _U8_0
            + b","
            + _KEY.replace(b"l", b"\\u006c", 1)
            + b":"
            + _U8_0
            # the second key spells the same name with an escape
            + b"}",
            b"\x00",
            False,
            id="escaped-spelling",
        ),
    ],
)
def test_duplicate_tensor_name(
    load: Loader, header: bytes, data: bytes, reference_too: bool
) -> None:
    blob = build(header, data)
    exc = rejected(load, blob, DuplicateTensorError, match="more than once")
    assert repr(NAME) in str(exc)
    assert exc.tensor == NAME
    if exc.offset is not None:
        assert blob[exc.offset :].startswith(_KEY)
    if reference_too:
        reference_rejects(blob)
    else:
        assert normalized_deserialized(reference_accepts(blob)) == {NAME: ((1,), b"\x00")}


def test_duplicate_metadata_section(load: Loader) -> None:
    blob = build(b'{"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}}')
    exc = rejected(load, blob, DuplicateTensorError, match="__metadata__")
    assert exc.tensor == "__metadata__"
    reference_rejects(blob, match="duplicate field")


def test_missing_tensor_name_is_a_key_error(tmp_path: Path) -> None:
    blob = build({NAME: entry("U8", [1], [0, 1])}, b"\x07")
    path = _write(tmp_path, blob)

    def check(exc: BaseException) -> None:
        assert isinstance(exc, SafetensorError)
        assert isinstance(exc, tensorfile.TensorNotFoundError)
        assert isinstance(exc, TensorNotFoundError)
        assert isinstance(exc, KeyError)
        assert "missing.bias" in str(exc)

    with safe_open(path, "np") as f:
        for get in (f.get_tensor, f.get_slice):
            with pytest.raises(KeyError) as info:
                get("missing.bias")
            check(info.value)
    with tensorfile.open(blob) as reader:
        for get in (reader.get_tensor, reader.info, reader.view):
            with pytest.raises(SafetensorError) as info:
                get("missing.bias")
            check(info.value)
    with safetensors.safe_open(path, "np") as f, pytest.raises(safetensors.SafetensorError):
        f.get_tensor("missing.bias")


# --------------------------------------------------------------------------- tensor entries


@pytest.mark.parametrize("dtype", ["F33", "f32", "float32", "", "F32 ", "BF8"])
def test_unknown_dtype(load: Loader, dtype: str) -> None:
    blob = build({NAME: entry(dtype, [1], [0, 4])}, b"\x00" * 4)
    exc = rejected(load, blob, UnknownDtypeError, match="unknown dtype")
    assert isinstance(exc, UnsupportedError)
    assert repr(dtype) in str(exc)
    check_tensor(exc, blob)
    reference_rejects(blob)


@pytest.mark.parametrize("field", ["dtype", "shape", "data_offsets"])
def test_missing_entry_field(load: Loader, field: str) -> None:
    e = entry("F32", [1], [0, 4])
    del e[field]
    blob = build({NAME: e}, b"\x00" * 4)
    exc = rejected(load, blob, InvalidTensorEntryError, match=f"no '{field}'")
    check_tensor(exc, blob)
    reference_rejects(blob, match="missing field")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        pytest.param(entry(32, [1], [0, 4]), "dtype", id="dtype-int"),
        pytest.param(entry(None, [1], [0, 4]), "dtype", id="dtype-null"),
        pytest.param(entry(["F32"], [1], [0, 4]), "dtype", id="dtype-list"),
        pytest.param(entry("F32", {"0": 1}, [0, 4]), "shape", id="shape-object"),
        pytest.param(entry("F32", 1, [0, 4]), "shape", id="shape-int"),
        pytest.param(entry("F32", "1", [0, 4]), "shape", id="shape-string"),
        pytest.param(entry("F32", None, [0, 4]), "shape", id="shape-null"),
        pytest.param(entry("F32", [-1], [0, 4]), r"shape\[0\]", id="shape-negative"),
        pytest.param(entry("F32", [2.0], [0, 8]), r"shape\[0\]", id="shape-float-integral"),
        pytest.param(entry("F32", [2.5], [0, 8]), r"shape\[0\]", id="shape-float"),
        pytest.param(entry("F32", [True], [0, 4]), r"shape\[0\]", id="shape-bool"),
        pytest.param(entry("F32", ["2"], [0, 8]), r"shape\[0\]", id="shape-string-dim"),
        pytest.param(entry("F32", [1, None], [0, 4]), r"shape\[1\]", id="shape-null-dim"),
        pytest.param(entry("F32", [[1]], [0, 4]), r"shape\[0\]", id="shape-nested"),
        pytest.param(entry("F32", [2**64], [0, 4]), "48 bits", id="shape-2**64"),
        pytest.param(entry("F32", [2**48], [0, 4]), "48 bits", id="shape-2**48"),
        pytest.param(entry("F32", [1], [0]), "data_offsets", id="offsets-length-1"),
        pytest.param(entry("F32", [1], [0, 4, 4]), "data_offsets", id="offsets-length-3"),
        pytest.param(entry("F32", [1], []), "data_offsets", id="offsets-empty"),
        pytest.param(entry("F32", [1], [-4, 0]), r"data_offsets\[0\]", id="offsets-negative"),
        pytest.param(entry("F32", [1], [0, 4.0]), r"data_offsets\[1\]", id="offsets-float"),
        pytest.param(entry("F32", [1], [0, "4"]), r"data_offsets\[1\]", id="offsets-string"),
        pytest.param(entry("F32", [1], {"0": 0}), "data_offsets", id="offsets-object"),
        pytest.param(entry("F32", [1], [0, 2**48]), "48 bits", id="offsets-2**48"),
        pytest.param(5, "must be an object", id="entry-int"),
        pytest.param("F32", "must be an object", id="entry-string"),
        pytest.param([0, 4], "must be an object", id="entry-list"),
        pytest.param(None, "must be an object", id="entry-null"),
    ],
)
def test_malformed_entry(load: Loader, value: Any, match: str) -> None:
    blob = build({NAME: value}, b"\x00" * 4)
    exc = rejected(load, blob, InvalidTensorEntryError, match=match)
    check_tensor(exc, blob)
    reference_rejects(blob)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param(b'"dtype":"U8","dtype":"U8","shape":[1]', "dtype", id="dtype-twice-same"),
        pytest.param(
            b'"dtype":"F32","dtype":"U8","shape":[1]', "dtype", id="dtype-twice-different"
        ),
        pytest.param(b'"dtype":"U8","shape":[1],"shape":[1]', "shape", id="shape-twice"),
        pytest.param(
            b'"dtype":"U8","shape":[1],"data_offsets":[0,1]',
            "data_offsets",
            id="data_offsets-twice",
        ),
    ],
)
def test_duplicate_field_in_entry(load: Loader, fields: bytes, field: str) -> None:
    # Two values for one field: readers that keep the first and readers that keep the last
    # would see different tensors. The reference rejects the file ("duplicate field").
    header = b"{" + _KEY + b":{" + fields + b',"data_offsets":[0,1]}}'
    blob = build(header, b"\x00")
    assert blob.count(f'"{field}":'.encode()) == 2
    exc = rejected(load, blob, InvalidTensorEntryError, match=field)
    check_tensor(exc, blob)
    reference_rejects(blob, match="duplicate field")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(entry("U8", ["-0"], [0, 0]), id="shape"),
        pytest.param(entry("U8", [0], ["-0", 0]), id="data_offsets"),
    ],
)
def test_negative_zero_is_not_a_size(load: Loader, value: dict[str, Any]) -> None:
    # JSON's -0 is read as the float -0.0 by the reference, which rejects it as a size;
    # a drop-in must not accept a file the reference rejects.
    blob = build(json.dumps({NAME: value}, separators=(",", ":")).replace('"-0"', "-0").encode())
    assert b"-0" in blob
    exc = rejected(load, blob, InvalidTensorEntryError)
    check_tensor(exc, blob)
    reference_rejects(blob)


def test_dimension_over_48_bits_in_empty_tensor(load: Loader) -> None:
    blob = build({NAME: entry("F32", [2**48, 0], [0, 0])})
    exc = rejected(load, blob, InvalidTensorEntryError, match="48 bits")
    check_tensor(exc, blob)
    # Stricter than the reference: the JSON schema limits sizes to 48 bits, but the
    # reference reads them as usize and accepts an empty tensor with a huge dimension.
    assert normalized_deserialized(reference_accepts(blob)) == {NAME: ((2**48, 0), b"")}


def test_dimension_of_48_bits_is_accepted(load: Loader) -> None:
    blob = build({NAME: entry("F32", [MAX_SIZE, 0], [0, 0])})
    assert load(blob) == {NAME: ((MAX_SIZE, 0), b"")}
    assert normalized_deserialized(reference_accepts(blob)) == {NAME: ((MAX_SIZE, 0), b"")}


# --------------------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param([], id="list"),
        pytest.param(["k", "v"], id="list-of-strings"),
        pytest.param(1, id="number"),
        pytest.param("k=v", id="string"),
        pytest.param(True, id="bool"),
        pytest.param({"k": {"x": "y"}}, id="nested-object-value"),
        pytest.param({"k": 1}, id="number-value"),
        pytest.param({"k": ["v"]}, id="list-value"),
        pytest.param({"k": None}, id="null-value"),
        pytest.param({"ok": "v", "k": False}, id="bool-value"),
    ],
)
def test_invalid_metadata(load: Loader, metadata: Any) -> None:
    blob = build({"__metadata__": metadata, NAME: entry("U8", [1], [0, 1])}, b"\x00")
    exc = rejected(load, blob, InvalidMetadataError, match="__metadata__")
    if exc.offset is not None:
        assert exc.offset == key_offset(blob, "__metadata__")
    reference_rejects(blob)


def test_metadata_null_is_no_metadata(load: Loader, tmp_path: Path) -> None:
    blob = build({"__metadata__": None, NAME: entry("U8", [1], [0, 1])}, b"\x05")
    assert load(blob) == {NAME: ((1,), b"\x05")}
    path = tmp_path / "null-metadata.safetensors"  # not where the load fixture writes
    path.write_bytes(blob)
    with safe_open(path, "np") as f:
        assert f.metadata() is None
    # Accepted for compatibility: the reference reads "__metadata__": null as no metadata.
    with safetensors.safe_open(path, "np") as f:
        assert f.metadata() is None


def test_duplicate_metadata_key(load: Loader) -> None:
    blob = build(b'{"__metadata__":{"k":"a","k":"b"}}')
    exc = rejected(load, blob, InvalidMetadataError, match="'k' more than once")
    assert exc.offset == key_offset(blob, "__metadata__")
    # Stricter than the reference, whose map silently keeps the last value.
    assert reference_accepts(blob) == []


# --------------------------------------------------------------------------- offsets


@pytest.mark.parametrize(
    ("tensors", "data_len", "culprit", "match"),
    [
        pytest.param(
            {"a": entry("F32", [1], [0, 4]), NAME: entry("F32", [1], [2, 6])},
            6,
            NAME,
            "overlaps by 2 bytes",
            id="overlap",
        ),
        pytest.param(
            {"a": entry("F32", [1], [0, 4]), NAME: entry("F32", [1], [0, 4])},
            4,
            NAME,
            "overlaps by 4 bytes",
            id="same-range",
        ),
        pytest.param(
            {"a": entry("F32", [1], [0, 4]), NAME: entry("F32", [1], [6, 10])},
            10,
            NAME,
            "2-byte hole",
            id="hole",
        ),
        pytest.param(
            {NAME: entry("F32", [1], [4, 8])}, 8, NAME, "starts at 4, not 0", id="not-at-0"
        ),
        pytest.param(
            {"a": entry("U8", [0], [0, 0]), NAME: entry("U8", [0], [4, 0])},
            4,
            NAME,
            "backwards",
            id="backwards",
        ),
    ],
)
def test_invalid_offsets(
    load: Loader, tensors: dict[str, Any], data_len: int, culprit: str, match: str
) -> None:
    blob = build(tensors, b"\x00" * data_len)
    exc = rejected(load, blob, InvalidOffsetsError, match=match)
    check_tensor(exc, blob, culprit)
    reference_rejects(blob, match="invalid offset")


@pytest.mark.parametrize(
    ("data", "end"),
    [
        pytest.param(b"\x00" * 5, 4, id="data-longer"),
        pytest.param(b"\x00" * 3, 4, id="data-shorter"),
        pytest.param(b"", 4, id="data-missing"),
    ],
)
def test_offsets_do_not_end_at_end_of_file(load: Loader, data: bytes, end: int) -> None:
    blob = build({NAME: entry("F32", [1], [0, 4])}, data)
    header_end = len(blob) - len(data)
    exc = rejected(load, blob, IncompleteBufferError, match="end of file")
    assert exc.offset == header_end + end
    reference_rejects(blob, match="incomplete metadata")


def test_empty_header_with_data(load: Loader) -> None:
    blob = build({}, b"\x00")
    exc = rejected(load, blob, IncompleteBufferError, match="end of file")
    assert exc.offset == len(blob) - 1
    reference_rejects(blob)


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [
        ("F32", [2**40, 2**40]),
        ("U8", [2**32, 2**32]),  # 2**64 elements: the bits overflow, not the count
        ("F64", [2**30, 2**30, 2**4]),
        ("BOOL", [MAX_SIZE] * 4),
    ],
)
def test_size_overflows_64_bits(load: Loader, dtype: str, shape: list[int]) -> None:
    blob = build({NAME: entry(dtype, shape, [0, 4])}, b"\x00" * 4)
    exc = rejected(load, blob, ValidationOverflowError, match="64 bits")
    check_tensor(exc, blob)
    reference_rejects(blob)


def test_million_dimensions_rejected_quickly(load: Loader) -> None:
    dims = b",".join([str(2**47).encode()] * 1_000_000)
    header = b'{"' + NAME.encode() + b'":{"dtype":"F32","shape":[' + dims + b"],"
    blob = build(header + b'"data_offsets":[0,4]}}', b"\x00" * 4)
    t0 = time.process_time()
    exc = rejected(load, blob, ValidationOverflowError)
    assert time.process_time() - t0 < 5.0
    assert exc.tensor == NAME
    reference_rejects(blob)


@pytest.mark.parametrize(
    ("dtype", "shape", "data_len", "match"),
    [
        ("F32", [2], 4, "needs 8 bytes"),
        ("F32", [], 8, "needs 4 bytes"),
        ("F64", [1, 1], 4, "needs 8 bytes"),
        ("U8", [0], 1, "needs 0 bytes"),
        ("F4", [4], 1, "needs 2 bytes"),
        ("F6_E2M3", [4], 4, "needs 3 bytes"),
    ],
)
def test_size_disagrees_with_byte_length(
    load: Loader, dtype: str, shape: list[int], data_len: int, match: str
) -> None:
    blob = build({NAME: entry(dtype, shape, [0, data_len])}, b"\x00" * data_len)
    exc = rejected(load, blob, TensorSizeMismatchError, match=match)
    check_tensor(exc, blob)
    reference_rejects(blob)


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [("F4", [3]), ("F4", [1, 1]), ("F6_E2M3", [3]), ("F6_E3M2", [2, 1])],
)
def test_sub_byte_tensor_not_whole_bytes(load: Loader, dtype: str, shape: list[int]) -> None:
    blob = build({NAME: entry(dtype, shape, [0, 2])}, b"\x00" * 2)
    exc = rejected(load, blob, MisalignedSubByteError, match="whole number of bytes")
    check_tensor(exc, blob)
    reference_rejects(blob)


# --------------------------------------------------------------------------- robustness


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [2_000, 100_000])
@pytest.mark.parametrize(
    "where",
    ["tensor", "shape", "metadata", "metadata-value", "ignored-field"],
)
def test_deeply_nested_json(load: Loader, where: str, depth: int) -> None:
    deep = _nested(depth)
    header = {
        "tensor": b'{"a":' + deep + b"}",
        "shape": b'{"a":{"dtype":"U8","shape":' + deep + b',"data_offsets":[0,1]}}',
        "metadata": b'{"__metadata__":' + deep + b"}",
        "metadata-value": b'{"__metadata__":{"k":' + deep + b"}}",
        "ignored-field": b'{"a":{"dtype":"U8","x":' + deep + b',"shape":[1],"data_offsets":[0,1]}}',
    }[where]
    blob = build(header, b"\x00")
    with pytest.raises(Exception) as info:  # the class is checked below
        load(blob)
    assert not isinstance(info.value, RecursionError), repr(info.value)
    assert isinstance(info.value, SafetensorError), repr(info.value)
    reference_rejects(blob)


def test_offset_points_at_the_tensor_not_a_metadata_key(load: Loader) -> None:
    # The tensor's name is also a metadata key, which comes first in the header.
    header = {"__metadata__": {NAME: "x"}, NAME: entry("F33", [1], [0, 4])}
    blob = build(header, b"\x00" * 4)
    exc = rejected(load, blob, UnknownDtypeError)
    assert exc.tensor == NAME
    tensor_key = blob.rindex(_KEY + b":")
    assert exc.offset in (None, tensor_key), (exc.offset, tensor_key)
    reference_rejects(blob)
