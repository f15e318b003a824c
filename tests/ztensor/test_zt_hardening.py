"""Hostile and malformed zTensor files, built by hand: one case per rule of the reader.

Every file here is assembled byte by byte (``ZTEN1000``, components at chosen offsets, a CBOR
manifest encoded with ``cbor2`` or written as raw bytes, the 8-byte little-endian manifest
size) and read three ways: ``tensorfile.ztensor.open`` + ``get_tensor``,
``tensorfile.ztensor.load_file`` and ``tensorfile.open``. Each must raise the specific
:class:`~tensorfile.ztensor.ZTensorError` subclass with a message naming the problem (and
the tensor, where there is one); nothing else may escape, and the only warnings allowed are
:class:`~tensorfile.ztensor.ZTensorWarning`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import struct
import time
import tracemalloc
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cbor2
import crc32c
import numpy as np
import pytest
import zstandard

import tensorfile
from tensorfile import ztensor
from tensorfile.formats.ztensor import MAX_ZSTD_RATIO
from tensorfile.ztensor import (
    COOTensor,
    ExtensionTensor,
    ZTensorChecksumError,
    ZTensorError,
    ZTensorIOError,
    ZTensorMissingError,
    ZTensorUnsupportedError,
    ZTensorWarning,
)
from tests.formats.limits import GIB, run_limited

MAGIC = b"ZTEN1000"
SPECIFIC = (ZTensorUnsupportedError, ZTensorChecksumError, ZTensorMissingError)
MB = 1 << 20

# --------------------------------------------------------------------------- file builders


def _align(n: int) -> int:
    return (n + 63) // 64 * 64


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def crc(data: bytes) -> str:
    return f"crc32c:0x{crc32c.crc32c(data):08X}"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


_DROP: Any = object()


def root(tensors: Any = None, **over: Any) -> dict[str, Any]:
    """A valid manifest root around ``tensors``; ``over`` replaces (or, with ``_DROP``,
    removes) root keys, ``tensors`` included."""
    out: dict[str, Any] = {
        "version": "1.0",
        "generator": "x",
        "attributes": {},
        "tensors": {} if tensors is None else tensors,
    }
    out.update(over)
    return {k: v for k, v in out.items() if v is not _DROP}


def assemble(
    manifest: Any,
    blobs: Sequence[tuple[int, bytes]] = (),
    *,
    magic: bytes = MAGIC,
    footer: int | None = None,
) -> bytes:
    """``magic`` + ``blobs`` at their offsets (zero padding) + the manifest (raw bytes, or
    any value, CBOR-encoded by ``cbor2``) + the footer (its real size unless ``footer``)."""
    body = bytearray(magic)
    for offset, data in blobs:
        if len(body) < offset + len(data):
            body += bytes(offset + len(data) - len(body))
        body[offset : offset + len(data)] = data
    raw = manifest if isinstance(manifest, bytes) else cbor2.dumps(manifest)
    size = len(raw) if footer is None else footer
    return bytes(body) + raw + struct.pack("<Q", size)


Spec = dict[str, tuple[str, list[Any], str, dict[str, Any]]]


def layout(spec: Spec) -> tuple[dict[str, Any], list[tuple[int, bytes]]]:
    """Place the components of ``spec`` (name -> (dtype, shape, format, {role: stored bytes
    or (stored bytes, extra entry keys)})) at consecutive 64-byte aligned offsets."""
    offset = 64
    blobs: list[tuple[int, bytes]] = []
    tensors: dict[str, Any] = {}
    for name, (dtype, shape, fmt, comps) in spec.items():
        entries: dict[str, Any] = {}
        for role, comp in comps.items():
            stored, extra = comp if isinstance(comp, tuple) else (comp, {})
            entries[role] = {"offset": offset, "length": len(stored), **extra}
            blobs.append((offset, stored))
            offset = _align(offset + max(len(stored), 1))
        tensors[name] = {"dtype": dtype, "shape": shape, "format": fmt, "components": entries}
    return tensors, blobs


def build(spec: Spec, **root_over: Any) -> bytes:
    tensors, blobs = layout(spec)
    return assemble(root(tensors, **root_over), blobs)


W = np.arange(6, dtype=np.float32).reshape(2, 3)


def dense_spec(arr: np.ndarray[Any, Any] = W, name: str = "w", **extra: Any) -> Spec:
    stored = arr.tobytes()
    if extra.get("encoding") == "zstd":
        stored = zstd(stored)
    return {name: (arr.dtype.name, list(arr.shape), "dense", {"data": (stored, extra)})}


def u64(values: Any) -> bytes:
    return np.asarray(values, dtype="<u8").tobytes()


def f32(values: Any) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


# A valid 3x4 CSR matrix with four values, and a valid 2-D COO tensor with three.
CSR_VALUES, CSR_INDICES, CSR_INDPTR = [1.0, 2.0, 3.0, 4.0], [0, 3, 1, 2], [0, 2, 2, 4]
COO_VALUES, COO_COORDS = [5.0, 6.0, 7.0], [[0, 1, 2], [3, 0, 1]]


def csr_spec(
    values: Any = CSR_VALUES,
    indices: Any = CSR_INDICES,
    indptr: Any = CSR_INDPTR,
    shape: Any = (3, 4),
    *,
    zstd_roles: tuple[str, ...] = (),
    drop: str | None = None,
) -> Spec:
    parts = {"values": f32(values), "indices": u64(indices), "indptr": u64(indptr)}
    comps: dict[str, Any] = {
        role: (zstd(b), {"encoding": "zstd"}) if role in zstd_roles else b
        for role, b in parts.items()
        if role != drop
    }
    return {"s": ("float32", list(shape), "sparse_csr", comps)}


def coo_spec(
    values: Any = COO_VALUES,
    coords: Any = COO_COORDS,
    shape: Any = (3, 4),
    *,
    zstd_roles: tuple[str, ...] = (),
) -> Spec:
    parts = {"values": f32(values), "coords": u64(coords)}
    comps: dict[str, Any] = {
        role: (zstd(b), {"encoding": "zstd"}) if role in zstd_roles else b
        for role, b in parts.items()
    }
    return {"c": ("float32", list(shape), "sparse_coo", comps)}


# --------------------------------------------------------------------------- readers


def _via_ztensor_open(path: Path, **kw: Any) -> dict[str, Any]:
    with ztensor.open(path, **kw) as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


def _via_load_file(path: Path, **kw: Any) -> dict[str, Any]:
    return ztensor.load_file(path, **kw)


def _via_tensorfile_open(path: Path, **kw: Any) -> dict[str, Any]:
    assert not kw
    head = path.read_bytes()[:4]
    fmt = None if head == b"ZTEN" else "ztensor"  # auto-detection needs the "ZTEN" prefix
    with tensorfile.open(path, format=fmt) as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


READERS: dict[str, Callable[..., dict[str, Any]]] = {
    "ztensor.open": _via_ztensor_open,
    "load_file": _via_load_file,
    "tensorfile.open": _via_tensorfile_open,
}


_SERIAL = itertools.count()


def _write(tmp_path: Path, data: bytes) -> Path:
    # a new name each time: a file still mapped by a reader is never rewritten
    path = tmp_path / f"case{next(_SERIAL)}.zt"
    path.write_bytes(data)
    return path


def _message(err: BaseException | warnings.WarningMessage) -> str:
    """The message without file paths (they hold the test's name, which would satisfy any
    check for a word that the name contains)."""
    text = str(err.message if isinstance(err, warnings.WarningMessage) else err)
    return re.sub(r"\S*\.zt\b", "<file>", text)


def _only_ztensor_warnings(caught: list[warnings.WarningMessage]) -> None:
    others = [w for w in caught if not issubclass(w.category, ZTensorWarning)]
    assert not others, [str(w.message) for w in others]


def expect_error(
    tmp_path: Path,
    data: bytes,
    exc: type[ZTensorError],
    *fragments: str,
    tensor: str | None = None,
    at_open: bool = False,
    plain: bool = True,
) -> ZTensorError:
    """Every reader raises ``exc`` for ``data``, with a message holding every fragment (and
    the tensor name); with ``at_open`` the error comes from ``ztensor.open`` already. A
    plain ``ZTensorError`` expected (``plain``) must not be one of the specific subclasses."""
    path = _write(tmp_path, data)
    first: ZTensorError | None = None
    for how, read in READERS.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(exc) as info:
                read(path)
        _only_ztensor_warnings(caught)
        err = info.value
        # the file's path (which holds the test's name) must not satisfy the checks below
        message = _message(err)
        if exc is ZTensorError and plain:
            assert not isinstance(err, SPECIFIC), (how, type(err), message)
        for fragment in fragments:
            assert fragment.lower() in message.lower(), (how, fragment, message)
        if tensor is not None:
            assert repr(tensor) in message, (how, tensor, message)
        first = first or err
    if at_open:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZTensorWarning)
            with pytest.raises(exc):
                ztensor.open(path)
    assert first is not None
    return first


def read_ok(tmp_path: Path, data: bytes, **kw: Any) -> dict[str, Any]:
    """Every reader accepts ``data`` (ZTensorWarnings allowed) and they agree."""
    path = _write(tmp_path, data)
    results = []
    for how, read in READERS.items():
        if how == "tensorfile.open" and kw:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append(read(path, **kw))
        _only_ztensor_warnings(caught)
    first = results[0]
    for other in results[1:]:
        assert list(other) == list(first)
        for name, value in first.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(other[name], value)
    return first


# --------------------------------------------------------------------------- container


@pytest.mark.parametrize("size", [0, 1, 4, 8, 12, 15])
def test_file_shorter_than_16_bytes(tmp_path: Path, size: int) -> None:
    data = (MAGIC + struct.pack("<Q", 0))[:size]
    expect_error(tmp_path, data, ZTensorError, "too short", at_open=True)


@pytest.mark.parametrize("magic", [b"SAFE1000", b"\x00" * 8, b"ztEN1000", b"PK\x03\x04ZTEN"])
def test_wrong_magic(tmp_path: Path, magic: bytes) -> None:
    data = assemble(root(), magic=magic)
    expect_error(tmp_path, data, ZTensorError, "not a zTensor file", at_open=True)


@pytest.mark.parametrize("magic", [b"ZTEN0001", b"ZTEN2000", b"ZTEN1100", b"ZTENxxxx"])
def test_other_ztensor_container_version(tmp_path: Path, magic: bytes) -> None:
    data = assemble(root(), magic=magic)
    err = expect_error(tmp_path, data, ZTensorUnsupportedError, "not zTensor v1.0", at_open=True)
    assert magic.decode() in _message(err)


@pytest.mark.parametrize("extra", [1, 2, 1000, 2**32])
def test_manifest_size_larger_than_file(tmp_path: Path, extra: int) -> None:
    manifest = cbor2.dumps(root())
    data = MAGIC + manifest + struct.pack("<Q", len(manifest) + extra)
    expect_error(tmp_path, data, ZTensorError, "manifest", at_open=True)


@pytest.mark.parametrize("size", [2**63, 2**64 - 1, 2**63 + 12345])
def test_manifest_size_huge(tmp_path: Path, size: int) -> None:
    data = assemble(root(), footer=size)
    err = expect_error(tmp_path, data, ZTensorError, "manifest", at_open=True)
    assert f"{size:,}" in _message(err) or str(size) in _message(err)


def test_manifest_filling_the_whole_file_is_valid(tmp_path: Path) -> None:
    # manifest_size == FILE_SIZE - 16: no components at all, nothing between magic and manifest
    manifest = cbor2.dumps(root({}, attributes={"k": "v"}))
    data = MAGIC + manifest + struct.pack("<Q", len(manifest))
    assert len(manifest) == len(data) - 16
    assert read_ok(tmp_path, data) == {}
    with ztensor.open(data) as reader:
        assert reader.keys() == []
        assert reader.attributes == {"k": "v"}


def test_manifest_size_one_more_than_fits(tmp_path: Path) -> None:
    manifest = cbor2.dumps(root())
    data = MAGIC + b"\x00" + manifest + struct.pack("<Q", len(manifest) + 2)
    expect_error(tmp_path, data, ZTensorError, "manifest", at_open=True)


def test_zero_byte_manifest_is_not_cbor(tmp_path: Path) -> None:
    data = MAGIC + struct.pack("<Q", 0)
    expect_error(tmp_path, data, ZTensorError, "CBOR", at_open=True)


def test_missing_file_is_io_error(tmp_path: Path) -> None:
    with pytest.raises(ZTensorIOError):
        ztensor.open(tmp_path / "nope.zt")
    with pytest.raises(ZTensorIOError):
        ztensor.load_file(tmp_path / "nope.zt")


# --------------------------------------------------------------------------- CBOR


VALID_ROOT = cbor2.dumps(root())

MALFORMED_CBOR = {
    "break-byte": b"\xff",
    "reserved-info-28": b"\x1c",
    "reserved-info-30": b"\xbe",
    "indefinite-int": b"\x1f",
    "indefinite-tag": b"\xdf\x00",
    "simple-1-byte": b"\xf8\x20",
    "unassigned-simple": b"\xe0",
    "map-key-without-value": b"\xbf\x61a\xff",
    "break-in-definite-array": b"\x82\x01\xff",
    "bad-chunk-in-text": b"\x7f\x41a\xff",
    "nested-indefinite-chunk": b"\x5f\x5f\xff\xff",
    "truncated-root": VALID_ROOT[:-1],
    "truncated-head": b"\xa1\x19\x01",
    "truncated-uint64": b"\x1b\x00\x00",
    "only-half-a-root": VALID_ROOT[: len(VALID_ROOT) // 2],
}


@pytest.mark.parametrize("manifest", MALFORMED_CBOR.values(), ids=MALFORMED_CBOR.keys())
def test_malformed_cbor(tmp_path: Path, manifest: bytes) -> None:
    expect_error(tmp_path, assemble(manifest), ZTensorError, "CBOR", at_open=True)


@pytest.mark.parametrize("trailer", [b"\x00", b"\xff", b"\xa0", VALID_ROOT])
def test_cbor_trailing_bytes(tmp_path: Path, trailer: bytes) -> None:
    err = expect_error(tmp_path, assemble(VALID_ROOT + trailer), ZTensorError, "CBOR", at_open=True)
    assert "follow" in _message(err) or "trailing" in _message(err).lower()


_ROOT_HEAD = cbor2.dumps(root())[:-1]  # a valid root up to the value of "tensors"


@pytest.mark.parametrize(
    "manifest",
    [
        b"\xa1\x80\x00",  # {[]: 0}
        b"\xa1\xa0\x00",  # {{}: 0}
        _ROOT_HEAD + b"\xa1\x81\x61w\xa0",  # tensors: {["w"]: {}}
        _ROOT_HEAD + b"\xa1\xa1\x61w\x00\xa0",  # tensors: {{"w": 0}: {}}
        cbor2.dumps(root(attributes={"k": "v"})).replace(b"\xa1\x61k", b"\xa1\x81\x61k"),
    ],
    ids=["root-array-key", "root-map-key", "tensor-array-key", "tensor-map-key", "attr-array-key"],
)
def test_array_or_map_as_map_key(tmp_path: Path, manifest: bytes) -> None:
    # valid CBOR (RFC 8949 allows any key), but no manifest key may be anything but text
    expect_error(tmp_path, assemble(manifest), ZTensorError, at_open=True)


@pytest.mark.parametrize(
    "value", [[1, 2], "tensors", 7, None, b"bytes", 1.5, True], ids=lambda v: type(v).__name__
)
def test_manifest_not_a_map(tmp_path: Path, value: Any) -> None:
    data = assemble(cbor2.dumps(value))
    expect_error(tmp_path, data, ZTensorError, "map", at_open=True)


DEEP = 10_000
DEEP_CBOR = {
    # (inside a map: a manifest that is not a map is refused before it is decoded)
    "arrays": b"\xa1\x61k" + b"\x81" * DEEP + b"\x00",
    "indefinite-arrays": b"\xa1\x61k" + b"\x9f" * DEEP + b"\x00" + b"\xff" * DEEP,
    "maps": b"\xa1\x61k" * DEEP + b"\x00",
    "tags": b"\xc6" * DEEP + b"\x00",
    # a valid root whose "tensors" value (the last item, {} = 0xa0) is the deep item
    "inside-root": cbor2.dumps(root())[:-1] + b"\x81" * DEEP + b"\x00",
}


@pytest.mark.parametrize("manifest", DEEP_CBOR.values(), ids=DEEP_CBOR.keys())
def test_deeply_nested_cbor(tmp_path: Path, manifest: bytes) -> None:
    # must be a clean ZTensorError, never a RecursionError
    expect_error(tmp_path, assemble(manifest), ZTensorError, "CBOR", "nested", at_open=True)


def _head(major: int, arg: int) -> bytes:
    return bytes([major << 5 | 27]) + arg.to_bytes(8, "big")


HUGE_CLAIMS = {
    "array": _head(4, 2**40),
    "map": _head(5, 2**40),
    "text": _head(3, 2**40) + b"abc",
    "bytes": _head(2, 2**40) + b"abc",
    "array-2**63": _head(4, 2**63),
    "map-2**64-1": _head(5, 2**64 - 1),
    "text-chunk": b"\x7f" + _head(3, 2**40) + b"a\xff",
    # inside an otherwise valid root: the value of "tensors" claims 2**40 entries
    "tensors-map": cbor2.dumps(root())[:-1] + _head(5, 2**40) + b"\x00" * 16,
    "shape-array": cbor2.dumps(root())[:-1]
    + b"\xa1\x61w\xa3"
    + b"".join(map(cbor2.dumps, ["dtype", "float32", "format", "dense", "shape"]))
    + _head(4, 2**40),
}


@pytest.mark.parametrize("manifest", HUGE_CLAIMS.values(), ids=HUGE_CLAIMS.keys())
def test_cbor_huge_length_claims_fail_fast(tmp_path: Path, manifest: bytes) -> None:
    data = assemble(manifest)
    path = _write(tmp_path, data)
    tracemalloc.start()
    try:
        # CPU time of this process, not the clock: what a quadratic loop or a huge allocation
        # costs, whatever else runs on the machine (make test runs the suite in parallel)
        start = time.process_time()
        with pytest.raises(ZTensorError) as info:
            ztensor.open(path)
        elapsed = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "CBOR" in _message(info.value)
    assert peak < 4 * MB, peak
    assert elapsed < 2.0, elapsed
    expect_error(tmp_path, data, ZTensorError, "CBOR", at_open=True)


@pytest.mark.parametrize(
    "manifest",
    [
        # {"version": "1.0", "version": "1.0"}
        b"\xa2\x67version\x631.0\x67version\x631.0",
        # a tensors map naming "w" twice
        cbor2.dumps(root())[:-1] + b"\xa2\x61w\xa0\x61w\xa0",
        # attributes {"a": "1", "a": "2"}
        b"\xa1\x6aattributes\xa2\x61a\x611\x61a\x612",
        # an indefinite-length map with a repeated key
        b"\xbf\x61k\x00\x61k\x01\xff",
    ],
    ids=["root", "tensor-name", "attribute", "indefinite-map"],
)
def test_cbor_duplicate_keys(tmp_path: Path, manifest: bytes) -> None:
    expect_error(tmp_path, assemble(manifest), ZTensorError, "duplicate", at_open=True)


@pytest.mark.parametrize(
    "text",
    [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"a\x80", b"\xf0\x28\x8c\x28"],
    ids=["ff", "bad-continuation", "surrogate", "stray-continuation", "bad-4-byte"],
)
def test_cbor_text_not_utf8(tmp_path: Path, text: bytes) -> None:
    enc = cbor2.dumps(root(attributes={"k": "x"}))
    # replace the attribute value "x" (0x61 0x78) by the invalid text string
    assert enc.count(b"\x61x") == 2  # generator and the attribute value
    i = enc.rindex(b"\x61x")
    manifest = enc[:i] + bytes([0x60 | len(text)]) + text + enc[i + 2 :]
    expect_error(tmp_path, assemble(manifest), ZTensorError, "UTF-8", at_open=True)


# --------------------------------------------------------------------------- root keys


@pytest.mark.parametrize("key", ["version", "generator", "attributes"])
def test_root_key_missing(tmp_path: Path, key: str) -> None:
    tensors, blobs = layout(dense_spec())
    data = assemble(root(tensors, **{key: _DROP}), blobs)
    expect_error(tmp_path, data, ZTensorError, key, at_open=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("version", 1.0),
        ("version", 1),
        ("version", b"1.0"),
        ("version", ["1", "0"]),
        ("generator", None),
        ("generator", 5),
        ("attributes", []),
        ("attributes", "license=MIT"),
        ("tensors", []),
        ("tensors", None),
    ],
)
def test_root_key_wrong_type(tmp_path: Path, key: str, value: Any) -> None:
    manifest = root()
    manifest[key] = value
    expect_error(tmp_path, assemble(manifest), ZTensorError, key, at_open=True)


@pytest.mark.parametrize(
    "attributes",
    [{"n": 1}, {"n": None}, {"n": b"bytes"}, {"n": ["a"]}, {"n": {"a": "b"}}, {1: "a"}],
    ids=["int", "null", "bytes", "array", "map", "int-key"],
)
def test_attribute_values_must_be_text(tmp_path: Path, attributes: dict[Any, Any]) -> None:
    data = assemble(root(attributes=attributes))
    expect_error(tmp_path, data, ZTensorError, "attributes", at_open=True)


@pytest.mark.parametrize("version", ["2.0", "0.1", "3.7", "2.0.0"])
def test_other_major_version_unsupported(tmp_path: Path, version: str) -> None:
    data = build(dense_spec(), version=version)
    expect_error(tmp_path, data, ZTensorUnsupportedError, version, at_open=True)


@pytest.mark.parametrize("version", ["1.1", "1.10", "1.1.0"])
def test_newer_minor_version_warns_and_reads(tmp_path: Path, version: str) -> None:
    data = build(dense_spec(), version=version)
    for how, read in READERS.items():
        path = _write(tmp_path, data)
        with pytest.warns(ZTensorWarning) as record:
            got = read(path)
        assert any("newer" in _message(w) for w in record), how
        np.testing.assert_array_equal(got["w"], W, err_msg=how)


@pytest.mark.parametrize("version", ["1.0", "1.0.0", "1.0.7"])
def test_same_minor_version_no_warning(tmp_path: Path, version: str) -> None:
    data = build(dense_spec(), version=version)
    path = _write(tmp_path, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(ztensor.load_file(path)["w"], W)


@pytest.mark.parametrize("version", ["abc", "", "1", "1.", ".0", "1.x", "1.0.0.0", "v1.0", "1,0"])
def test_version_not_major_minor(tmp_path: Path, version: str) -> None:
    data = build(dense_spec(), version=version)
    expect_error(tmp_path, data, ZTensorError, "version", at_open=True)


# --------------------------------------------------------------------------- tensor entries


def _tensor_entry(**over: Any) -> tuple[dict[str, Any], list[tuple[int, bytes]]]:
    tensors, blobs = layout(dense_spec())
    entry = tensors["w"]
    for key, value in over.items():
        if value is _DROP:
            del entry[key]
        else:
            entry[key] = value
    return tensors, blobs


@pytest.mark.parametrize("dtype", ["float128", "complex64", "F32", "Float32", "", "int4"])
def test_unknown_dtype(tmp_path: Path, dtype: str) -> None:
    tensors, blobs = _tensor_entry(dtype=dtype)
    data = assemble(root(tensors), blobs)
    err = expect_error(
        tmp_path, data, ZTensorUnsupportedError, "dtype", repr(dtype), tensor="w", at_open=True
    )
    assert err.tensor == "w"


@pytest.mark.parametrize("key", ["dtype", "shape", "format", "components"])
def test_tensor_key_missing(tmp_path: Path, key: str) -> None:
    tensors, blobs = _tensor_entry(**{key: _DROP})
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, key, tensor="w", at_open=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dtype", 5),
        ("dtype", None),
        ("shape", "2x3"),
        ("shape", {"0": 2}),
        ("shape", 6),
        ("format", 1),
        ("format", None),
        ("components", []),
        ("components", "data"),
    ],
)
def test_tensor_key_wrong_type(tmp_path: Path, key: str, value: Any) -> None:
    tensors, blobs = _tensor_entry(**{key: value})
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, key, tensor="w", at_open=True)


def test_tensor_entry_not_a_map(tmp_path: Path) -> None:
    expect_error(tmp_path, assemble(root({"w": [1, 2]})), ZTensorError, "map", at_open=True)


def test_tensor_name_not_text(tmp_path: Path) -> None:
    tensors, blobs = layout(dense_spec())
    data = assemble(root({1: tensors["w"]}), blobs)
    expect_error(tmp_path, data, ZTensorError, "name", at_open=True)


BAD_UINTS = [-1, -(2**63), 2.0, 2.5, "2", None, True, [2], 2**64]


@pytest.mark.parametrize("dim", BAD_UINTS, ids=repr)
def test_shape_dimension_not_uint64(tmp_path: Path, dim: Any) -> None:
    tensors, blobs = _tensor_entry(shape=[2, dim])
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, "shape", tensor="w", at_open=True)


@pytest.mark.parametrize("field", ["offset", "length"])
@pytest.mark.parametrize("value", BAD_UINTS, ids=repr)
def test_offset_length_not_uint64(tmp_path: Path, field: str, value: Any) -> None:
    tensors, blobs = layout(dense_spec())
    tensors["w"]["components"]["data"][field] = value
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, field, tensor="w", at_open=True)


@pytest.mark.parametrize("field", ["offset", "length"])
def test_component_key_missing(tmp_path: Path, field: str) -> None:
    tensors, blobs = layout(dense_spec())
    del tensors["w"]["components"]["data"][field]
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, field, tensor="w", at_open=True)


@pytest.mark.parametrize("value", [[64, 24], "64:24", None, 64])
def test_component_entry_not_a_map(tmp_path: Path, value: Any) -> None:
    tensors, blobs = layout(dense_spec())
    tensors["w"]["components"]["data"] = value
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, "'data'", tensor="w", at_open=True)


# --------------------------------------------------------------------------- byte ranges


def _with_data_range(offset: int, length: int) -> bytes:
    tensors = {
        "w": {
            "dtype": "float32",
            "shape": [length // 4],
            "format": "dense",
            "components": {"data": {"offset": offset, "length": length}},
        }
    }
    return assemble(root(tensors), [(64, bytes(64))])  # the component area is [8, 128)


@pytest.mark.parametrize(
    ("offset", "length"),
    [
        (64, 68),  # runs 4 bytes into the manifest
        (128, 4),  # starts at the manifest
        (192, 8),  # lies inside the manifest
        (10_000, 8),  # past the end of the file
        (64, 2**20),  # far past the end of the file
        (2**64 - 8, 8),  # offset + length = 2**64
        (2**64 - 4, 8),  # offset + length overflows 64 bits
        (0, 8),  # the magic itself
        (4, 8),  # overlapping the magic
        (0, 128),  # magic and everything after it
    ],
)
def test_component_outside_the_component_area(tmp_path: Path, offset: int, length: int) -> None:
    data = _with_data_range(offset, length)
    expect_error(tmp_path, data, ZTensorError, "'data'", tensor="w", at_open=True)


def test_component_overlapping_the_manifest(tmp_path: Path) -> None:
    # the component would fit the file if the reader ignored where the manifest starts
    tensors = {
        "w": {
            "dtype": "uint8",
            "shape": [40],
            "format": "dense",
            "components": {"data": {"offset": 64, "length": 40}},
        }
    }
    manifest = cbor2.dumps(root(tensors))
    data = MAGIC + bytes(56 + 16) + manifest + struct.pack("<Q", len(manifest))
    expect_error(tmp_path, data, ZTensorError, "'data'", tensor="w", at_open=True)


def test_empty_component_at_offset_zero_is_fine(tmp_path: Path) -> None:
    tensors = {
        "e": {
            "dtype": "float32",
            "shape": [0, 5],
            "format": "dense",
            "components": {"data": {"offset": 0, "length": 0}},
        }
    }
    got = read_ok(tmp_path, assemble(root(tensors)))
    assert got["e"].shape == (0, 5)
    assert got["e"].dtype == np.float32


@pytest.mark.parametrize(
    ("second", "where"),
    [(64, "same"), (96, "inside"), (56, "straddling-start"), (120, "straddling-end")],
)
def test_components_overlap_each_other(tmp_path: Path, second: int, where: str) -> None:
    # "a" occupies [64, 128) (64 bytes); "b" is 16 bytes at ``second`` (64-aligned or not)
    tensors = {
        "a": {
            "dtype": "uint8",
            "shape": [64],
            "format": "dense",
            "components": {"data": {"offset": 64, "length": 64}},
        },
        "b": {
            "dtype": "uint8",
            "shape": [16],
            "format": "dense",
            "components": {"data": {"offset": second, "length": 16}},
        },
    }
    data = assemble(root(tensors), [(64, bytes(128))])
    path = _write(tmp_path, data)
    for read in READERS.values():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZTensorWarning)  # misaligned cases
            with pytest.raises(ZTensorError) as info:
                read(path)
        assert not isinstance(info.value, SPECIFIC)
        assert "overlap" in _message(info.value)
        assert "'a'" in _message(info.value) and "'b'" in _message(info.value)


def test_components_of_one_tensor_overlap(tmp_path: Path) -> None:
    tensors, blobs = layout(csr_spec())
    comps = tensors["s"]["components"]
    comps["indices"]["offset"] = comps["values"]["offset"]
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, "overlap", tensor="s", at_open=True)


def test_adjacent_components_do_not_overlap(tmp_path: Path) -> None:
    tensors = {
        "a": {
            "dtype": "uint8",
            "shape": [64],
            "format": "dense",
            "components": {"data": {"offset": 64, "length": 64}},
        },
        "b": {
            "dtype": "uint8",
            "shape": [64],
            "format": "dense",
            "components": {"data": {"offset": 128, "length": 64}},
        },
    }
    data = assemble(root(tensors), [(64, bytes(range(64)) + bytes(range(64, 128)))])
    got = read_ok(tmp_path, data)
    assert got["a"].tolist() == list(range(64))
    assert got["b"].tolist() == list(range(64, 128))


@pytest.mark.parametrize("offset", [9, 16, 65, 100])
def test_misaligned_offset_warns_and_reads(tmp_path: Path, offset: int) -> None:
    arr = np.arange(6, dtype=np.float32)
    tensors = {
        "w": {
            "dtype": "float32",
            "shape": [6],
            "format": "dense",
            "components": {"data": {"offset": offset, "length": 24}},
        }
    }
    data = assemble(root(tensors), [(offset, arr.tobytes())])
    for how, read in READERS.items():
        path = _write(tmp_path, data)
        with pytest.warns(ZTensorWarning) as record:
            got = read(path)
        assert any(f"offset {offset} " in _message(w) for w in record), how
        np.testing.assert_array_equal(got["w"], arr, err_msg=how)
    with pytest.warns(ZTensorWarning):
        reader = ztensor.open(data)
    with reader:
        np.testing.assert_array_equal(reader.view("w"), arr)
        np.testing.assert_array_equal(reader.read_slice("w", slice(1, 4)), arr[1:4])


@pytest.mark.parametrize("length", [0, 20, 23, 25, 28, 48])
def test_raw_dense_length_mismatch(tmp_path: Path, length: int) -> None:
    tensors, _ = layout(dense_spec())  # 2x3 float32 = 24 bytes
    tensors["w"]["components"]["data"]["length"] = length
    data = assemble(root(tensors), [(64, bytes(64))])
    err = expect_error(tmp_path, data, ZTensorError, "24", tensor="w", at_open=True)
    assert str(length) in _message(err)


@pytest.mark.parametrize(
    "shape",
    [[2**32, 2**32], [2**63, 2], [2**64 - 1, 2**64 - 1], [2**16] * 5, [2**62, 4]],
    ids=repr,
)
def test_shape_product_overflows_64_bits(tmp_path: Path, shape: list[int]) -> None:
    tensors, blobs = _tensor_entry(shape=shape)  # float32: 4 bytes a value
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorError, "64 bits", tensor="w", at_open=True)


def test_shape_product_of_many_huge_dims_is_cheap(tmp_path: Path) -> None:
    # 40,000 dims of 2**64-1 in a ~360 KB manifest: the overflow must be found without
    # multiplying a 2.5-million-bit integer dimension by dimension (quadratic time).
    tensors, blobs = _tensor_entry(shape=[2**64 - 1] * 40_000)
    data = assemble(root(tensors), blobs)
    start = time.process_time()
    with pytest.raises(ZTensorError):
        ztensor.open(data)
    elapsed = time.process_time() - start
    assert elapsed < 1.0, f"rejecting a {len(data):,}-byte file took {elapsed:.1f} s"


@pytest.mark.parametrize(
    "shape",
    [[2**64 - 1, 0], [2**63, 0], [2**62, 2**62, 0], [0, 2**64 - 1], [0] + [2**64 - 1] * 40_000],
    ids=["u64max-x-0", "2**63-x-0", "2**62-x-2**62-x-0", "0-x-u64max", "0-x-40000-u64max"],
)
@pytest.mark.parametrize("layout", ["dense", "quantized_4bit"])
def test_empty_shape_whose_other_dims_overflow_is_refused(
    tmp_path: Path, shape: list[int], layout: str
) -> None:
    # Zero elements, but the non-zero dimensions' bytes do not fit in 64 bits: refused at
    # open (tensorfile's rule), so nothing later multiplies a huge shape out, in any layout.
    tensors = {
        "w": {
            "dtype": "float32",
            "shape": shape,
            "format": layout,
            "components": {"data": {"offset": 0, "length": 0}},
        }
    }
    data = assemble(root(tensors), [])
    start = time.process_time()
    expect_error(tmp_path, data, ZTensorError, "64 bits", tensor="w", at_open=True)
    assert time.process_time() - start < 5.0


@pytest.mark.parametrize(
    "shape",
    [[1] * 65, [1] * 200, [2**61, 0], [0, 2**61], [2**31, 2**30, 0]],
    ids=["65-dims", "200-dims", "2**61-x-0", "0-x-2**61", "2**31-x-2**30-x-0"],
)
def test_dense_shape_numpy_cannot_hold(tmp_path: Path, shape: list[int]) -> None:
    # Valid manifests (the byte count is right) whose shape no numpy array can have: the
    # reader must say so with a ZTensorUnsupportedError, not let numpy's ValueError escape.
    nbytes = 4 * math.prod(shape)
    tensors = {
        "w": {
            "dtype": "float32",
            "shape": shape,
            "format": "dense",
            "components": {"data": {"offset": 64 if nbytes else 0, "length": nbytes}},
        }
    }
    data = assemble(root(tensors), [(64, bytes(nbytes))])
    expect_error(tmp_path, data, ZTensorUnsupportedError, "numpy cannot hold", tensor="w")


# --------------------------------------------------------------------------- encodings


@pytest.mark.parametrize("encoding", ["gzip", "ZSTD", "lz4", "", "none"])
def test_unknown_encoding(tmp_path: Path, encoding: str) -> None:
    data = build(dense_spec(encoding=encoding))
    expect_error(
        tmp_path, data, ZTensorUnsupportedError, "encoding", repr(encoding), tensor="w",
        at_open=True,
    )  # fmt: skip


@pytest.mark.parametrize("encoding", [1, ["zstd"], {"zstd": 1}, b"zstd"], ids=repr)
def test_encoding_not_text(tmp_path: Path, encoding: Any) -> None:
    data = build(dense_spec(encoding=encoding))
    # malformed or unsupported: either way named, with the tensor
    expect_error(tmp_path, data, ZTensorError, "encoding", tensor="w", at_open=True, plain=False)


def test_explicit_raw_encoding_and_null_encoding(tmp_path: Path) -> None:
    for encoding in ("raw", None):
        got = read_ok(tmp_path, build(dense_spec(encoding=encoding)))
        np.testing.assert_array_equal(got["w"], W)


# --------------------------------------------------------------------------- digests

MALFORMED_DIGESTS = [
    "crc32c",
    "crc32c:",
    "crc32c:0x",
    "crc32c:0xZZZZZZZZ",
    "crc32c:0x123456789",
    "crc32c:0x-1",
    "crc32c: 0x1234",
    "sha256:",
    "sha256:abc",
    "sha256:" + "g" * 64,
    "sha256:" + "0" * 63,
    "sha256:" + "0" * 65,
    "",
]


@pytest.mark.parametrize("digest", MALFORMED_DIGESTS)
def test_malformed_digest(tmp_path: Path, digest: str) -> None:
    data = build(dense_spec(digest=digest))
    expect_error(tmp_path, data, ZTensorError, "digest", tensor="w", at_open=True)


@pytest.mark.parametrize("digest", [5, b"crc32c:0x00000000", ["crc32c", 0]], ids=repr)
def test_digest_not_text(tmp_path: Path, digest: Any) -> None:
    data = build(dense_spec(digest=digest))
    expect_error(tmp_path, data, ZTensorError, "digest", tensor="w", at_open=True)


@pytest.mark.parametrize("digest", ["md5:" + "0" * 32, "sha1:" + "0" * 40, "CRC32C:0x00", "x:y"])
def test_unknown_digest_algorithm(tmp_path: Path, digest: str) -> None:
    data = build(dense_spec(digest=digest))
    algorithm = digest.partition(":")[0]
    expect_error(
        tmp_path, data, ZTensorUnsupportedError, "digest", repr(algorithm), tensor="w",
        at_open=True,
    )  # fmt: skip


STORED = W.tobytes()
ZSTORED = zstd(W.tobytes())
GOOD_DIGESTS = {
    "crc32c": crc(STORED),
    "crc32c-lower": crc(STORED).lower().replace("crc32c:0X", "crc32c:0x"),
    "sha256": sha(STORED),
    "sha256-upper": sha(STORED).upper().replace("SHA256:", "sha256:"),
}


@pytest.mark.parametrize("digest", GOOD_DIGESTS.values(), ids=GOOD_DIGESTS.keys())
def test_matching_digest_reads(tmp_path: Path, digest: str) -> None:
    got = read_ok(tmp_path, build(dense_spec(digest=digest)))
    np.testing.assert_array_equal(got["w"], W)


def _flip(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1 :]


DIGEST_CASES = {
    "crc32c-raw": (crc, None),
    "sha256-raw": (sha, None),
    "crc32c-zstd": (crc, "zstd"),
    "sha256-zstd": (sha, "zstd"),
}


@pytest.mark.parametrize(("make", "encoding"), DIGEST_CASES.values(), ids=DIGEST_CASES.keys())
def test_digest_mismatch(tmp_path: Path, make: Callable[[bytes], str], encoding: Any) -> None:
    stored = ZSTORED if encoding else STORED
    extra = {"encoding": encoding} if encoding else {}
    tensors, _ = layout({"w": ("float32", [2, 3], "dense", {"data": (stored, {**extra})})})
    tensors["w"]["components"]["data"]["digest"] = make(stored)
    good = assemble(root(tensors), [(64, stored)])
    np.testing.assert_array_equal(read_ok(tmp_path, good)["w"], W)
    # the stored bytes change (the digest covers the stored, compressed bytes)
    last = 64 + len(stored) - 1  # for zstd: the last byte of the last block's content
    bad = _flip(good, 64 if not encoding else last)
    algorithm = make.__name__.replace("crc", "crc32c").replace("sha", "sha256")
    err = expect_error(tmp_path, bad, ZTensorChecksumError, algorithm, "mismatch", tensor="w")
    assert isinstance(err, tensorfile.ChecksumError)
    assert isinstance(err, tensorfile.errors.ChecksumError)
    # verify=False reads the stored bytes without checking them
    path = _write(tmp_path, bad)
    with ztensor.open(path, verify=False) as reader:
        if encoding is None:
            flipped = reader.get_tensor("w")
            assert flipped.tobytes() == _flip(STORED, 0)
            assert reader.view("w").tobytes() == _flip(STORED, 0)
        else:
            # the flipped stream may or may not still decode; no digest is checked
            exc, _peak = _peak_while(lambda: reader.get_tensor("w"))
            assert exc is None or isinstance(exc, ZTensorError), exc
            assert not isinstance(exc, ZTensorChecksumError)
    if encoding is None:
        assert ztensor.load_file(path, verify=False)["w"].tobytes() == _flip(STORED, 0)
        with ztensor.open(path) as reader:
            with pytest.raises(ZTensorChecksumError):
                reader.view("w")
            with pytest.raises(ZTensorChecksumError):
                reader.read_slice("w", 0)
            with pytest.raises(ZTensorChecksumError):
                reader.read_component("w", "data")


def test_digest_mismatch_in_one_sparse_component(tmp_path: Path) -> None:
    tensors, blobs = layout(csr_spec())
    for role, comp in tensors["s"]["components"].items():
        stored = dict(blobs)[comp["offset"]]
        comp["digest"] = sha(stored) if role != "indices" else crc(stored + b"x")
    data = assemble(root(tensors), blobs)
    expect_error(tmp_path, data, ZTensorChecksumError, "'indices'", "mismatch", tensor="s")
    got = ztensor.load_file(_write(tmp_path, data), verify=False)
    np.testing.assert_array_equal(got["s"].to_dense()[0], [1.0, 0, 0, 2.0])


# --------------------------------------------------------------------------- zstd


def test_zstd_dense_reads(tmp_path: Path) -> None:
    got = read_ok(tmp_path, build(dense_spec(encoding="zstd")))
    np.testing.assert_array_equal(got["w"], W)


CORRUPT_STREAMS = {
    "garbage": b"\x00" * 32,
    "not-zstd-magic": b"\x28\xb5\x2f\xfe" + ZSTORED[4:],
    "trailing-garbage": ZSTORED + b"garbage!",
    "bad-block-type": ZSTORED[:6] + b"\xff\xff\xff" + ZSTORED[9:],
}


@pytest.mark.parametrize("stream", CORRUPT_STREAMS.values(), ids=CORRUPT_STREAMS.keys())
def test_zstd_stream_corrupt(tmp_path: Path, stream: bytes) -> None:
    data = build({"w": ("float32", [2, 3], "dense", {"data": (stream, {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "zstd", tensor="w")


def _zero_bomb(size: int) -> bytes:
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(MB)
    parts = [cobj.compress(chunk) for _ in range(size // MB)]
    parts.append(cobj.flush())
    return b"".join(parts)


@functools.cache
def bomb() -> bytes:
    """~3 KB of zstd that decompresses to 100 MB of zeros."""
    return _zero_bomb(100 * MB)


def _peak_while(fn: Callable[[], Any]) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        try:
            fn()
        except BaseException as exc:  # returned to the caller
            return exc, tracemalloc.get_traced_memory()[1]
        return None, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_zstd_bomb_dense(tmp_path: Path) -> None:
    assert len(bomb()) < 64 * 1024
    data = build({"w": ("float32", [16], "dense", {"data": (bomb(), {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "more than", tensor="w")
    path = _write(tmp_path, data)
    for read in READERS.values():
        exc, peak = _peak_while(lambda read=read: read(path))
        assert isinstance(exc, ZTensorError), exc
        assert peak < 8 * MB, peak


@pytest.mark.parametrize("role", ["values", "indices", "indptr"])
def test_zstd_bomb_sparse_component(tmp_path: Path, role: str) -> None:
    spec = csr_spec()
    spec["s"][3][role] = (bomb(), {"encoding": "zstd"})
    data = build(spec)
    expect_error(tmp_path, data, ZTensorError, "more than", repr(role), tensor="s")
    path = _write(tmp_path, data)
    exc, peak = _peak_while(lambda: ztensor.load_file(path))
    assert isinstance(exc, ZTensorError), exc
    assert peak < 8 * MB, peak


@pytest.mark.parametrize("declared", [7, 100, 2000])
def test_zstd_stream_shorter_than_declared(tmp_path: Path, declared: int) -> None:
    stream = zstd(np.arange(6, dtype=np.float32).tobytes())
    data = build({"w": ("float32", [declared], "dense", {"data": (stream, {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "24", tensor="w")


def test_zstd_claim_is_allocated_only_once_the_stream_shows_it(tmp_path: Path) -> None:
    """A real 64 KiB stream under a shape that claims 1,024 times as much (within zstd's
    most expansion, so the manifest passes): the stream is inflated into memory that grows
    with its output and refused short, naming both sizes, and the claim is never allocated
    (it was, before the first byte was inflated)."""
    values = np.random.default_rng(0).standard_normal(16_384).astype(np.float32)
    stream = zstd(values.tobytes())
    declared = 1024 * values.size
    assert declared * 4 < MAX_ZSTD_RATIO * len(stream)
    data = build({"w": ("float32", [declared], "dense", {"data": (stream, {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "65,536 bytes", f"{declared * 4:,}", tensor="w")
    path = _write(tmp_path, data)
    for read in READERS.values():
        exc, peak = _peak_while(lambda read=read: read(path))
        assert isinstance(exc, ZTensorError), exc
        assert peak < 8 * MB, peak


_READ_LIMITED = """
import sys, tracemalloc
import tensorfile
tracemalloc.start()
reads = {{
    "get_tensor": lambda f: f.get_tensor("w"),
    "read_slice": lambda f: f.read_slice("w", slice(None)),
    "get_tensors": lambda f: f.get_tensors(),
}}
for how, read in reads.items():
    try:
        with tensorfile.open({path!r}) as f:
            read(f)
        print(how, "read")
    except tensorfile.TensorFileError as exc:
        print(how, type(exc).__name__, exc)
print("TRACED", tracemalloc.get_traced_memory()[1])
"""


def test_zstd_claim_under_an_address_space_limit(tmp_path: Path) -> None:
    """The review's file: 70,000 float32 values stored with zstd (~259 KB) under a shape of
    400,000,000 (1.6 GB, within 32,768 times the stored bytes). Under a 1.5 GiB address
    space (the claim does not fit) each way of reading it says the stream holds 280,000
    bytes, not 1.6 GB; it said "cannot be held" (the claim, allocated first)."""
    values = np.random.default_rng(0).standard_normal(70_000).astype(np.float32)
    stream = zstd(values.tobytes())
    claim = 400_000_000
    data = build({"w": ("float32", [claim], "dense", {"data": (stream, {"encoding": "zstd"})})})
    path = _write(tmp_path, data)
    printed, peak = run_limited(_READ_LIMITED.format(path=str(path)), address_space=GIB * 3 // 2)
    *lines, traced = printed.splitlines()
    assert [line.split()[0] for line in lines] == ["get_tensor", "read_slice", "get_tensors"]
    for line in lines:
        assert " ZTensorError " in line, line
        assert "decompresses to 280,000 bytes, the manifest declares 1,600,000,000" in line, line
    assert int(traced.split()[1]) < 64 << 20, traced  # the claim was never allocated
    assert peak < 512 << 20, peak


@pytest.mark.parametrize("elements", [0, 1, 262_143, 262_144, 750_001, 2_097_153], ids=repr)
def test_zstd_streams_read_whole_around_the_allocation(tmp_path: Path, elements: int) -> None:
    """Held chunks, then the buffer: a stream read across the point where its buffer is
    allocated (an eighth of the declared size, read 1 MiB at a time: 2,097,153 elements
    are held for a chunk or two first) comes out whole."""
    values = np.random.default_rng(elements).standard_normal(elements).astype(np.float32)
    data = build(dense_spec(values, encoding="zstd"))
    got = read_ok(tmp_path, data)
    np.testing.assert_array_equal(got["w"], values)


def test_zstd_stream_longer_than_declared(tmp_path: Path) -> None:
    stream = zstd(np.arange(6, dtype=np.float32).tobytes())
    data = build({"w": ("float32", [5], "dense", {"data": (stream, {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "more than", tensor="w")


@pytest.mark.parametrize("cut", [1, 4, 10])
def test_zstd_stream_truncated_dense(tmp_path: Path, cut: int) -> None:
    stream = zstd(np.arange(1000, dtype=np.float32).tobytes())[:-cut]
    data = build({"w": ("float32", [1000], "dense", {"data": (stream, {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "zstd", tensor="w")


@pytest.mark.parametrize("shape", [[2**40], [2**20, 2**20], [2**30, 64]], ids=repr)
def test_zstd_dense_absurd_declared_size_rejected_at_open(tmp_path: Path, shape: list[int]) -> None:
    data = build({"w": ("float32", shape, "dense", {"data": (ZSTORED, {"encoding": "zstd"})})})
    path = _write(tmp_path, data)
    exc, peak = _peak_while(lambda: ztensor.open(path))
    assert isinstance(exc, ZTensorError), exc
    assert peak < 4 * MB, peak
    expect_error(tmp_path, data, ZTensorError, "zstd", tensor="w", at_open=True)


def test_zstd_empty_component(tmp_path: Path) -> None:
    data = build({"w": ("float32", [4], "dense", {"data": (b"", {"encoding": "zstd"})})})
    expect_error(tmp_path, data, ZTensorError, "zstd", tensor="w")


# --------------------------------------------------------------------------- sparse CSR


def test_valid_csr_and_coo_read(tmp_path: Path) -> None:
    spec = {**csr_spec(), **coo_spec()}
    got = read_ok(tmp_path, build(spec))
    expected = np.zeros((3, 4), np.float32)
    expected[0, 0], expected[0, 3], expected[2, 1], expected[2, 2] = CSR_VALUES
    np.testing.assert_array_equal(got["s"].to_dense(), expected)
    coo = np.zeros((3, 4), np.float32)
    coo[(0, 1, 2), (3, 0, 1)] = COO_VALUES
    np.testing.assert_array_equal(got["c"].to_dense(), coo)


@pytest.mark.parametrize("role", ["values", "indices", "indptr"])
def test_csr_missing_component(tmp_path: Path, role: str) -> None:
    data = build(csr_spec(drop=role))
    expect_error(tmp_path, data, ZTensorError, role, "sparse_csr", tensor="s", at_open=True)


@pytest.mark.parametrize("role", ["values", "coords"])
def test_coo_missing_component(tmp_path: Path, role: str) -> None:
    spec = coo_spec()
    del spec["c"][3][role]
    expect_error(tmp_path, build(spec), ZTensorError, role, "sparse_coo", tensor="c", at_open=True)


@pytest.mark.parametrize("indptr", [[0, 2, 4], [0, 2, 2, 4, 4], [0]], ids=["short", "long", "one"])
def test_csr_wrong_indptr_length_raw(tmp_path: Path, indptr: list[int]) -> None:
    data = build(csr_spec(indptr=indptr))
    expect_error(tmp_path, data, ZTensorError, "32", tensor="s", at_open=True)


@pytest.mark.parametrize("indptr", [[0, 2, 4], [0, 2, 2, 4, 4], []], ids=["short", "long", "empty"])
def test_csr_wrong_indptr_length_zstd(tmp_path: Path, indptr: list[int]) -> None:
    data = build(csr_spec(indptr=indptr, zstd_roles=("indptr",)))
    expect_error(tmp_path, data, ZTensorError, "indptr", tensor="s")


CSR_CONTENT_ERRORS = {
    "indptr-starts-at-1": (dict(indptr=[1, 2, 2, 4]), "indptr"),
    "indptr-decreases": (dict(indptr=[0, 3, 2, 4]), "decreases"),
    "indptr-ends-below-nnz": (dict(indptr=[0, 2, 2, 3]), "indptr"),
    "indptr-ends-above-nnz": (dict(indptr=[0, 2, 2, 5]), "indptr"),
    "indptr-huge": (dict(indptr=[0, 2**64 - 1, 2, 4]), "indptr"),
    "column-equals-cols": (dict(indices=[0, 4, 1, 2]), "column index"),
    "column-huge": (dict(indices=[0, 2**64 - 1, 1, 2]), "column index"),
    "indices-count": (dict(indices=[0, 3, 1]), "indices"),
    "values-count": (dict(values=[1.0, 2.0, 3.0]), "values"),
    "more-values-than-cells": (
        dict(values=[1.0] * 4, indices=[0, 0, 0, 0], indptr=[0, 4], shape=(1, 2)),
        "more than",
    ),
}


@pytest.mark.parametrize("zstd_roles", [(), ("values", "indices", "indptr")], ids=["raw", "zstd"])
@pytest.mark.parametrize(
    ("kwargs", "fragment"), CSR_CONTENT_ERRORS.values(), ids=CSR_CONTENT_ERRORS.keys()
)
def test_csr_content_invalid(
    tmp_path: Path, kwargs: dict[str, Any], fragment: str, zstd_roles: tuple[str, ...]
) -> None:
    data = build(csr_spec(**kwargs, zstd_roles=zstd_roles))
    expect_error(tmp_path, data, ZTensorError, fragment, tensor="s")


@pytest.mark.parametrize("shape", [[12], [3, 4, 1], [], [1, 3, 4]], ids=repr)
def test_csr_not_2d(tmp_path: Path, shape: list[int]) -> None:
    data = build(csr_spec(shape=shape))
    expect_error(tmp_path, data, ZTensorError, "2-D", tensor="s", at_open=True)


# --------------------------------------------------------------------------- sparse COO


@pytest.mark.parametrize(
    ("values", "coords"),
    [
        ([5.0, 6.0, 7.0], [0, 1, 2, 3, 0]),  # 5 coordinates, 6 needed
        ([5.0, 6.0, 7.0], [0, 1, 2, 3, 0, 1, 2]),  # 7
        ([5.0, 6.0], [[0, 1, 2], [3, 0, 1]]),  # 6 coordinates for 2 values
        ([5.0, 6.0, 7.0], []),
    ],
    ids=["short", "long", "few-values", "no-coords"],
)
@pytest.mark.parametrize("zstd_roles", [(), ("coords",), ("values", "coords")], ids=str)
def test_coo_coords_length_mismatch(
    tmp_path: Path, values: Any, coords: Any, zstd_roles: tuple[str, ...]
) -> None:
    data = build(coo_spec(values, coords, zstd_roles=zstd_roles))
    expect_error(tmp_path, data, ZTensorError, "coord", tensor="c", at_open=not zstd_roles)


@pytest.mark.parametrize(
    ("coords", "dim"),
    [([[0, 1, 3], [3, 0, 1]], 0), ([[0, 1, 2], [3, 4, 1]], 1), ([[0, 2**64 - 1, 2], [0, 0, 0]], 0)],
)
@pytest.mark.parametrize("zstd_roles", [(), ("values", "coords")], ids=["raw", "zstd"])
def test_coo_coordinate_out_of_range(
    tmp_path: Path, coords: Any, dim: int, zstd_roles: tuple[str, ...]
) -> None:
    data = build(coo_spec(coords=coords, zstd_roles=zstd_roles))
    expect_error(tmp_path, data, ZTensorError, "out of range", f"dimension {dim}", tensor="c")


def test_coo_values_not_whole_elements(tmp_path: Path) -> None:
    spec = coo_spec()
    spec["c"][3]["values"] = f32(COO_VALUES) + b"\x00"
    expect_error(tmp_path, build(spec), ZTensorError, "values", tensor="c", at_open=True)


def test_coo_zero_dim_with_one_value_reads(tmp_path: Path) -> None:
    # A 0-D COO tensor with one value has ndim x nnz = 0 coordinates (spec 5.3). The reader
    # must accept it, both hand-built and as tensorfile's own writer stores it.
    data = build({"c": ("float32", [], "sparse_coo", {"values": f32([5.0]), "coords": b""})})
    got = read_ok(tmp_path, data)
    assert got["c"].to_dense().tolist() == 5.0
    path = tmp_path / "written.zt"
    tensor = COOTensor(np.array([5.0], np.float32), np.zeros((0, 1), np.uint64), ())
    ztensor.save_file({"c": tensor}, path)
    assert ztensor.load_file(path)["c"].to_dense().tolist() == 5.0


# --------------------------------------------------------------------------- zstd sparse


def _frames(*parts: bytes) -> bytes:
    return b"".join(zstd(p) for p in parts)


def test_zstd_sparse_truncated_stream_is_an_error(tmp_path: Path) -> None:
    # values and coords are each two zstd frames; both second frames are cut short, so what
    # does decode is a consistent, valid-looking half of the tensor. A truncated frame is a
    # corrupt component and must not be served as a smaller tensor.
    rng = np.random.default_rng(0)
    n = 1000
    values = rng.standard_normal(n).astype(np.float32)
    coords = np.sort(rng.choice(10_000, size=n, replace=False)).astype(np.uint64)
    half = n // 2
    v_stream = _frames(values[:half].tobytes(), values[half:].tobytes())
    c_stream = _frames(coords[:half].tobytes(), coords[half:].tobytes())
    v_cut = v_stream[: len(zstd(values[:half].tobytes())) + 12]
    c_cut = c_stream[: len(zstd(coords[:half].tobytes())) + 12]
    whole = build(
        {
            "c": (
                "float32",
                [10_000],
                "sparse_coo",
                {
                    "values": (v_stream, {"encoding": "zstd"}),
                    "coords": (c_stream, {"encoding": "zstd"}),
                },
            )
        }
    )
    assert read_ok(tmp_path, whole)["c"].nnz == n
    cut = build(
        {
            "c": (
                "float32",
                [10_000],
                "sparse_coo",
                {"values": (v_cut, {"encoding": "zstd"}), "coords": (c_cut, {"encoding": "zstd"})},
            )
        }
    )
    expect_error(tmp_path, cut, ZTensorError, "zstd", tensor="c")


@pytest.mark.parametrize("cut", [1, 3, 100])
def test_zstd_extension_component_truncated_is_an_error(tmp_path: Path, cut: int) -> None:
    payload = np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    stream = zstd(payload)[:-cut]
    spec: Spec = {
        "q": ("uint8", [5000], "quantized_4bit", {"data": (stream, {"encoding": "zstd"})})
    }
    path = _write(tmp_path, build(spec))
    with ztensor.open(path) as reader:
        with pytest.raises(ZTensorError) as info:
            reader.read_component("q", "data")
        assert "zstd" in _message(info.value)
        with pytest.raises(ZTensorError) as info:
            reader.get_tensor("q")
        assert "zstd" in _message(info.value)


@pytest.mark.parametrize(
    ("role", "stored"),
    [
        ("values", f32([1.0, 2.0, 3.0, 4.0, 5.0])),  # 5 values, 4 indices
        ("indices", u64([0, 3, 1])),
        ("values", f32([1.0] * 4) + b"\x00\x00"),  # not whole float32 elements
        ("indices", u64(CSR_INDICES) + b"\x01"),  # not whole uint64 elements
        ("indptr", u64(CSR_INDPTR) + b"\x00" * 4),
        ("values", f32([1.0] * 13)),  # more than the 12 cells of a 3x4 matrix
    ],
    ids=["values-5", "indices-3", "values-ragged", "indices-ragged", "indptr-ragged", "values-13"],
)
def test_zstd_sparse_decoded_size_mismatch(tmp_path: Path, role: str, stored: bytes) -> None:
    spec = csr_spec()
    spec["s"][3][role] = (zstd(stored), {"encoding": "zstd"})
    expect_error(tmp_path, build(spec), ZTensorError, tensor="s")


@pytest.mark.parametrize("role", ["values", "coords"])
def test_zstd_coo_component_corrupt(tmp_path: Path, role: str) -> None:
    spec = coo_spec()
    spec["c"][3][role] = (b"\x28\xb5\x2f\xfd" + b"\xff" * 20, {"encoding": "zstd"})
    expect_error(tmp_path, build(spec), ZTensorError, "zstd", repr(role), tensor="c")


def test_zstd_sparse_absurd_indptr_rejected_at_open(tmp_path: Path) -> None:
    spec = csr_spec(shape=(2**40, 4))
    spec["s"][3]["indptr"] = (zstd(u64([0, 4])), {"encoding": "zstd"})
    data = build(spec)
    expect_error(tmp_path, data, ZTensorError, "zstd", tensor="s", at_open=True)


# --------------------------------------------------------------------------- extensions


def test_unknown_layout_is_an_extension_tensor(tmp_path: Path) -> None:
    packed = bytes(range(32))
    scale = np.array([0.5, 2.0], np.float16).tobytes()
    zero = zstd(bytes([7, 9]))
    spec: Spec = {
        "q": (
            "uint8",
            [8, 8],
            "quantized_4bit",
            {
                "data": packed,
                "scale": scale,
                "zero_point": (zero, {"encoding": "zstd", "digest": crc(zero)}),
            },
        )
    }
    data = build(spec)
    got = read_ok(tmp_path, data)
    ext = got["q"]
    assert isinstance(ext, ExtensionTensor)
    assert ext.layout == "quantized_4bit"
    assert ext.shape == (8, 8)
    assert ext.dtype == np.uint8
    assert sorted(ext.components) == ["data", "scale", "zero_point"]
    assert ext.components["data"].tobytes() == packed
    assert ext.components["scale"].dtype == np.uint8  # a role the spec does not type
    assert ext.components["scale"].tobytes() == scale
    assert ext.components["zero_point"].tolist() == [7, 9]
    with ztensor.open(_write(tmp_path, data)) as reader:
        assert reader.info("q").layout == "quantized_4bit"
        assert sorted(reader.info("q").components) == ["data", "scale", "zero_point"]
        assert reader.read_component("q", "scale", np.float16).tolist() == [0.5, 2.0]
        assert reader.read_component("q", "data").tobytes() == packed
        with pytest.raises(ZTensorUnsupportedError):
            reader.view("q")


def test_a_layout_named_quantized_is_no_ggml_blocks(tmp_path: Path) -> None:
    """A v1.0 extension layout named ``quantized`` (the spec defines dense and the two
    sparse layouts only) is not ggml's blocks: it was counted as quantized ``F32`` by
    inspect, and convert tried to dequantize it (a bare TypeError). It is
    ``ext:quantized``: no quantization, its ExtensionTensor named as the file names it,
    and convert refuses it as any extension layout."""
    values = np.arange(4, dtype=np.float32).tobytes()
    spec: Spec = {"q": ("float32", [4], "quantized", {"data": values, "scale": b"\x01\x02"})}
    path = _write(tmp_path, build(spec))
    with pytest.raises(tensorfile.UnsupportedError, match="extension layout 'ext:quantized'"):
        tensorfile.convert(str(path), str(tmp_path / "out.safetensors"))
    result = tensorfile.inspect(str(path))
    assert result.dequantized_bytes == result.total_bytes
    with ztensor.open(path) as reader:
        info = reader.info("q")
        assert (info.layout, info.quantization, info.decoded_nbytes) == ("ext:quantized", None, 16)
        ext = reader.get_tensor("q")
        assert isinstance(ext, ExtensionTensor) and ext.layout == "quantized"


def test_unknown_layout_without_known_components(tmp_path: Path) -> None:
    spec: Spec = {"g": ("float32", [5, 5], "ragged_v9", {"row_lengths": u64([1, 2])})}
    got = read_ok(tmp_path, build(spec))
    assert isinstance(got["g"], ExtensionTensor)
    assert got["g"].components["row_lengths"].tobytes() == u64([1, 2])


def test_unknown_layout_components_are_still_bounds_checked(tmp_path: Path) -> None:
    tensors, blobs = layout({"q": ("uint8", [4], "quantized_4bit", {"scale": b"abcd"})})
    tensors["q"]["components"]["scale"]["length"] = 10_000
    expect_error(tmp_path, assemble(root(tensors), blobs), ZTensorError, "'scale'", tensor="q")


def test_unknown_layout_digest_mismatch(tmp_path: Path) -> None:
    spec: Spec = {
        "q": ("uint8", [4], "quantized_4bit", {"scale": (b"abcd", {"digest": crc(b"x")})})
    }
    expect_error(tmp_path, build(spec), ZTensorChecksumError, "'scale'", tensor="q")


# --------------------------------------------------------------------------- missing names


def test_unknown_tensor_name(tmp_path: Path) -> None:
    path = _write(tmp_path, build(dense_spec()))
    for opener in (ztensor.open, tensorfile.open):
        with opener(path) as reader:
            for call in (
                reader.get_tensor,
                reader.info,
                reader.view,
                lambda n, r=reader: r.read_slice(n, 0),
            ):
                with pytest.raises(ZTensorMissingError) as info:
                    call("nope")
                assert isinstance(info.value, KeyError)
                assert isinstance(info.value, tensorfile.TensorNotFoundError)
                assert "'nope'" in _message(info.value)
            with pytest.raises(KeyError):
                reader.get_tensor("W")


def test_unknown_component_role(tmp_path: Path) -> None:
    path = _write(tmp_path, build({**dense_spec(), **csr_spec()}))
    with ztensor.open(path) as reader:
        for name, role in (("w", "values"), ("s", "data"), ("s", "coords"), ("nope", "data")):
            with pytest.raises(ZTensorMissingError) as info:
                reader.read_component(name, role)
            assert isinstance(info.value, KeyError)
            message = _message(info.value)
            assert repr(name) in message
            if name != "nope":
                assert repr(role) in message
        with pytest.raises(ZTensorMissingError):
            reader.component("w", "indices")


_FULL_DISK_CHILD = """
import os, resource, signal, sys
import numpy as np
from tensorfile import ztensor
from tensorfile.ztensor import ZTensorIOError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (6 << 20, 6 << 20))
rng = np.random.default_rng(0)
tensors = {f"t{i}": rng.random(1 << 19) for i in range(4)}  # 4 x 4 MiB, incompressible
try:
    ztensor.save_file(tensors, sys.argv[1], compression="zstd")
except ZTensorIOError as exc:
    print("refused:", exc)
    sys.exit(0)
sys.exit(1)
"""


def test_a_failed_background_write_of_a_zstd_component_is_an_error_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """zstd components are written by a background thread while the next one compresses:
    its failure (here EFBIG under RLIMIT_FSIZE) still surfaces as a ZTensorIOError and the
    destination keeps its old contents."""
    import subprocess
    import sys

    dest = tmp_path / "m.zt"
    dest.write_bytes(b"old")
    run = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(dest)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "refused:" in run.stdout
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.zt"]
