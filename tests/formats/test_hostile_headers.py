"""Headers that claim sizes or hold numbers meant to hurt: every one gets tensorfile's own
error (or is read) quickly, in memory proportional to the bytes really there.

* safetensors: integers of thousands of digits anywhere in the JSON (Python's ``int()``
  refuses over 4,300), numbers past a double's range, shapes of 100,000 dimensions;
* zTensor: CBOR bignums (tag 2) as shapes and versions, versions of thousands of digits,
  extension layouts of 100,000 dimensions, tags in keys tensorfile does not read;
* GGUF: a string claiming 512 MiB and arrays claiming billions of items, in sparse files that
  really are that large: refused before they are read, in a few megabytes of memory.
"""

from __future__ import annotations

import json
import struct
import time
import warnings
from pathlib import Path
from typing import Any

import cbor2
import numpy as np
import pytest
import safetensors  # the reference implementation

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.errors import (
    GGUFError,
    HeaderSyntaxError,
    InvalidMetadataError,
    InvalidTensorEntryError,
    SafetensorError,
    TensorFileError,
    ValidationOverflowError,
    ZTensorError,
    ZTensorUnsupportedError,
    ZTensorWarning,
)
from tensorfile.formats.ztensor import _cbor
from tensorfile.safetensors import deserialize, safe_open
from tensorfile.safetensors import numpy as st_numpy
from tests.formats.limits import run_limited
from tests.helpers.checkpoints import gguf_blob, gguf_kv, gguf_tensor, gstr

BIG = "9" * 5000  # over Python's 4,300-digit limit for int(str) and str(int)
MAX_MESSAGE = 2000  # an error message stays readable, whatever the file holds


def _st(header: bytes, data: bytes = b"\0") -> bytes:
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def _every_safetensors_reader(tmp_path: Path, blob: bytes) -> list[BaseException | None]:
    """Open and read ``blob`` every way the safetensors side can; the errors met."""
    path = tmp_path / "h.safetensors"
    path.write_bytes(blob)

    def generic() -> Any:
        with tensorfile.open(str(path)) as r:
            return r.get_tensors()

    def dropin() -> Any:
        with safe_open(str(path), framework="np") as f:
            return f.metadata(), f.get_tensors()

    out: list[BaseException | None] = []
    for read in (lambda: deserialize(blob), lambda: st_numpy.load(blob), generic, dropin):
        try:
            read()
            out.append(None)
        except SafetensorError as exc:
            out.append(exc)
    assert all(len(str(e)) < MAX_MESSAGE for e in out if e is not None)
    return out


# -- safetensors -----------------------------------------------------------------------------

ENTRY = b'"dtype":"U8","shape":[1],"data_offsets":[0,1]'
HUGE_INTS = {
    "metadata value": b'{"__metadata__":{"k":%s},"a":{%s}}',
    "negative metadata value": b'{"__metadata__":{"k":-%s},"a":{%s}}',
    "metadata value in a list": b'{"__metadata__":{"k":[%s]},"a":{%s}}',
    "metadata, spaced": b'{ "__metadata__" : { "k" : %s }, "a" : {%s} }',
    "shape": b'{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}%s',
    "offset": b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,%s]}}%s',
    "unknown field": b'{"a":{%s,"x":%s}}',
    "unknown field, spaced": b'{"a": {%s, "x": %s} }',
    "tensor entry": b'{"a":%s}%s',
    "duplicate name": b'{"a":{%s}, "a":%s}',
}


@pytest.mark.parametrize("where", sorted(HUGE_INTS))
def test_integer_of_5000_digits_anywhere(tmp_path: Path, where: str) -> None:
    template = HUGE_INTS[where]
    if where in ("unknown field", "unknown field, spaced", "duplicate name"):
        header = template % (ENTRY, BIG.encode())
    elif template.endswith(b"%s"):
        header = template % (BIG.encode(), b"")
    else:
        header = template % (BIG.encode(), ENTRY)
    blob = _st(header)
    errors = _every_safetensors_reader(tmp_path, blob)
    assert all(e is not None for e in errors), errors  # the reference refuses it too
    assert len({type(e) for e in errors}) == 1
    with pytest.raises(Exception):  # noqa: B017 - the reference's error is its own
        safetensors.deserialize(blob)


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 309, BIG])
def test_number_past_a_double_in_an_unknown_field(tmp_path: Path, number: str) -> None:
    # the reference's JSON parser refuses it ("number out of range"); tensorfile too
    blob = _st(b'{"a":{%s,"x":[%s]}}' % (ENTRY, number.encode()))
    errors = _every_safetensors_reader(tmp_path, blob)
    assert all(isinstance(e, HeaderSyntaxError) and "out of the range" in str(e) for e in errors)
    with pytest.raises(Exception):  # noqa: B017
        safetensors.deserialize(blob)


@pytest.mark.parametrize("number", ["1e308", "-1e-400", "1" + "0" * 300, "18446744073709551616"])
def test_number_within_a_double_in_an_unknown_field_is_fine(number: str) -> None:
    blob = _st(b'{"a":{%s,"x":%s}}' % (ENTRY, number.encode()))
    assert deserialize(blob)[0][0] == "a"
    assert safetensors.deserialize(blob)[0][0] == "a"


def test_metadata_number_is_described_not_printed() -> None:
    blob = _st(b'{"__metadata__":{"k":%s},"a":{%s}}' % (BIG.encode(), ENTRY))
    with pytest.raises(InvalidMetadataError, match="a number of 5,000 digits"):
        deserialize(blob)


def _shape_blob(shape: list[int]) -> bytes:
    entry = {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}
    return _st(json.dumps(entry, separators=(",", ":")).encode(), b"")


@pytest.mark.parametrize("where", ["first", "last"])
def test_empty_tensor_of_100000_huge_dims_is_refused_quickly(where: str) -> None:
    dims = [2**48 - 1] * 100_000
    shape = [0, *dims] if where == "first" else [*dims, 0]
    blob = _shape_blob(shape)
    # CPU time of this process, not the clock: what a quadratic loop or a huge allocation
    # costs, whatever else runs on the machine (make test runs the suite in parallel)
    start = time.process_time()
    with pytest.raises(ValidationOverflowError, match="100,001 dimensions") as info:
        tensorfile.open(blob)
    assert time.process_time() - start < 1.0
    assert len(str(info.value)) < MAX_MESSAGE


def test_tensor_of_100000_unit_dims_is_read_quickly(tmp_path: Path) -> None:
    blob = _shape_blob([1] * 100_000 + [0])
    path = tmp_path / "ones.safetensors"
    path.write_bytes(blob)
    start = time.process_time()
    with tensorfile.open(str(path)) as r:
        assert r.info("w").numel == 0
        with pytest.raises(InvalidTensorEntryError, match="numpy cannot hold"):
            r.get_tensor("w")
    assert ops.inspect(str(path)).parameter_count == 0
    assert time.process_time() - start < 2.0


# -- zTensor ---------------------------------------------------------------------------------


def _zt(root_over: dict[str, Any] | None = None, **entry_over: Any) -> bytes:
    """A one-tensor zTensor file (float32 [2], 8 bytes at offset 64) whose manifest, built
    with cbor2 (any value, any tag), has ``entry_over`` in the tensor's entry."""
    entry: dict[str, Any] = {
        "dtype": "float32",
        "shape": [2],
        "format": "dense",
        "components": {"data": {"offset": 64, "length": 8}},
    }
    entry.update(entry_over)
    root: dict[str, Any] = {"version": "1.0", "generator": "g", "attributes": {}}
    root["tensors"] = {"w": entry}
    root.update(root_over or {})
    manifest = cbor2.dumps(root)
    body = b"ZTEN1000" + bytes(56) + np.ones(2, "<f4").tobytes()
    return body + manifest + struct.pack("<Q", len(manifest))


def _zt_error(data: bytes, exc: type[ZTensorError] = ZTensorError) -> ZTensorError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZTensorWarning)
        with pytest.raises(exc) as info:
            with ztensor.open(data) as r:
                r.get_tensors()
    assert len(str(info.value)) < MAX_MESSAGE, len(str(info.value))
    return info.value


BIGNUM = cbor2.CBORTag(2, b"\x01" + bytes(4000))  # 2**32000: 9,633 digits


@pytest.mark.parametrize(
    "over",
    [
        {"shape": [BIGNUM]},
        {"shape": [2, BIGNUM]},
        {"shape": [cbor2.CBORTag(3, b"\x01" + bytes(4000))]},
        {"shape": [cbor2.CBORTag(2, b"\x05")]},  # a bignum of a small value: still refused
        {"components": {"data": {"offset": BIGNUM, "length": 8}}},
        {"components": {"data": {"offset": 64, "length": BIGNUM}}},
        {"dtype": BIGNUM},
        {"format": BIGNUM},
        {"shape": "x" * 1_000_000},
        {"dtype": "x" * 1_000_000},
    ],
    ids=repr,
)
def test_zt_bignums_and_huge_values_in_an_entry(over: dict[str, Any]) -> None:
    _zt_error(_zt(**over))


@pytest.mark.parametrize(
    ("version", "exc"),
    [
        (BIGNUM, ZTensorError),
        (10**40, ZTensorError),
        (BIG + ".0", ZTensorUnsupportedError),
        ("1." * 3000 + "0", ZTensorError),
    ],
    ids=["bignum", "int", "major-5000-digits", "3001-parts"],
)
def test_zt_hostile_versions(version: Any, exc: type[ZTensorError]) -> None:
    _zt_error(_zt({"version": version}), exc)


def test_zt_newer_minor_of_5000_digits_is_read_with_a_warning() -> None:
    with pytest.warns(ZTensorWarning, match="newer"):
        with ztensor.open(_zt({"version": "1." + BIG})) as r:
            assert r.get_tensor("w").tolist() == [1.0, 1.0]


def test_zt_tags_in_keys_tensorfile_does_not_read() -> None:
    # dates, decimals, sets, bignums, unknown tags in extra root keys and entry fields: the
    # file is read, and its manifest decodes to values the encoder can write back
    extra = {
        "created": cbor2.CBORTag(0, "2024-01-15T10:30:00Z"),
        "epoch": cbor2.CBORTag(1, 1700000000),
        "big": BIGNUM,
        "neg": cbor2.CBORTag(3, b"\x07" * 20),
        "unknown": cbor2.CBORTag(99, [1, 2]),
        "set": cbor2.CBORTag(258, [1, 2]),
    }
    data = _zt(extra, note=cbor2.CBORTag(55799, "self-described"))
    with ztensor.open(data) as r:
        assert r.get_tensor("w").tolist() == [1.0, 1.0]
    (size,) = struct.unpack("<Q", data[-8:])
    root = _cbor.decode(data[-8 - size : -8])
    assert root["big"] == 2**32000 and root["neg"] == -1 - int.from_bytes(b"\x07" * 20, "big")
    assert root["created"] == "2024-01-15T10:30:00Z" and root["unknown"] == [1, 2]
    again = _cbor.decode(_cbor.encode(root))
    assert again == root


def test_zt_encoder_refuses_with_its_own_error() -> None:
    for value in ({"a": object()}, ["\ud800"], {1j: 1}):
        with pytest.raises(_cbor.CBOREncodeError):
            _cbor.encode(value)


@pytest.mark.parametrize("layout", ["quantized_4bit", "dense", "sparse_coo"])
def test_zt_layout_of_100000_huge_dims_is_refused_quickly(tmp_path: Path, layout: str) -> None:
    # the reported file: 540 KB, an extension layout of many dimensions, 27 s in inspect
    data = _zt(shape=[2**31] * 100_000, format=layout)
    assert len(data) < 600_000
    path = tmp_path / "dims.zt"
    path.write_bytes(data)
    start = time.process_time()
    err = _zt_error(data)
    assert "64 bits" in str(err)
    with pytest.raises(ZTensorError):
        ops.inspect(str(path))
    assert time.process_time() - start < 1.0


def test_zt_extension_layout_of_100000_unit_dims_is_handled_quickly(tmp_path: Path) -> None:
    data = _zt(shape=[1] * 100_000, format="quantized_4bit")
    path = tmp_path / "ones.zt"
    path.write_bytes(data)
    start = time.process_time()
    with ztensor.open(str(path)) as r:
        value = r.get_tensor("w")
        assert value.layout == "quantized_4bit" and len(value.shape) == 100_000
        assert r.info("w").numel == 1
    assert ops.inspect(str(path)).parameter_count == 1
    assert time.process_time() - start < 1.0


# -- GGUF: claims checked before anything is read ----------------------------------------------


def _sparse_gguf(path: Path, head: bytes, size: int) -> None:
    """``head``, then holes up to ``size`` bytes: a file that really is that large, on no disk."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


GGUF_CLAIMS = {
    # a string value claiming 512 MiB (the reported remote file cost 5 GiB of RSS)
    "string-512MiB": gguf_kv("k", 8, struct.pack("<Q", 512 << 20)),
    "key-512MiB": struct.pack("<Q", 512 << 20),
    "u8-array-2**30": gguf_kv("k", 9, struct.pack("<IQ", 0, 1 << 30)),
    "f32-array-2**28": gguf_kv("k", 9, struct.pack("<IQ", 6, 1 << 28)),
    "string-array-2**26": gguf_kv("k", 9, struct.pack("<IQ", 8, 1 << 26)),
}


@pytest.mark.parametrize("claim", sorted(GGUF_CLAIMS))
def test_gguf_claims_are_refused_in_bounded_memory(tmp_path: Path, claim: str) -> None:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + GGUF_CLAIMS[claim]
    path = tmp_path / "claim.gguf"
    _sparse_gguf(path, head, (600 << 20) + len(head))  # every claimed byte is in the file
    code = (
        "import time\n"
        "import tensorfile\n"
        "from tensorfile.errors import GGUFError\n"
        "t = time.process_time()\n"
        "try:\n"
        f"    tensorfile.open({str(path)!r})\n"
        "except GGUFError as exc:\n"
        "    print('GGUFError', 'at most' in str(exc), time.process_time() - t < 1.0)\n"
    )
    printed, peak = run_limited(code, address_space=2 << 30)
    assert printed == "GGUFError True True", printed
    baseline = run_limited("import tensorfile\nprint('x')\n")[1]
    assert peak < baseline + (32 << 20), f"peak {peak >> 20} MiB"


def test_gguf_string_under_the_limit_is_read_without_copies(tmp_path: Path) -> None:
    # a real 48 MiB string (a tokenizer JSON, say): read, costing about twice its size
    size = 48 << 20
    blob = gguf_blob(kvs=[gguf_kv("tokenizer.huggingface.json", 8, gstr("x" * size))])
    path = tmp_path / "big-string.gguf"
    path.write_bytes(blob)
    code = (
        "import tensorfile\n"
        f"r = tensorfile.open({str(path)!r})\n"
        "print(len(r.metadata['tokenizer.huggingface.json']))\n"
    )
    printed, peak = run_limited(code)
    assert printed == str(size)
    baseline = run_limited("import tensorfile\nprint('x')\n")[1]
    assert peak - baseline < 3 * size, f"{(peak - baseline) >> 20} MiB for a 48 MiB string"


def test_gguf_header_over_the_total_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # the limits are module constants (256 MiB of header, 2**24 array items in all): run with
    # smaller ones, so that a header over them is a small file
    from tensorfile.formats import gguf

    assert (gguf.MAX_HEADER_BYTES, gguf.MAX_ARRAY_ITEMS) == (256 << 20, 1 << 24)
    monkeypatch.setattr(gguf, "MAX_HEADER_BYTES", 4096)
    kvs = [gguf_kv(f"k{i}", 8, gstr("x" * 1000)) for i in range(5)]
    with pytest.raises(GGUFError, match="header past tensorfile's limit of 4,096 bytes"):
        tensorfile.open(gguf_blob(kvs=kvs))
    assert len(tensorfile.open(gguf_blob(kvs=kvs[:3])).metadata) == 3
    monkeypatch.setattr(gguf, "MAX_HEADER_BYTES", 256 << 20)
    monkeypatch.setattr(gguf, "MAX_ARRAY_ITEMS", 100)
    arrays = [gguf_kv(f"a{i}", 9, struct.pack("<IQ", 0, 40) + bytes(40)) for i in range(3)]
    with pytest.raises(GGUFError, match="100 in all the arrays"):
        tensorfile.open(gguf_blob(kvs=arrays))
    assert len(tensorfile.open(gguf_blob(kvs=arrays[:2])).metadata) == 2


@pytest.mark.parametrize("dims", [[0, 2**63], [2**63, 1], [2**32, 2**31, 0], [2**64 - 1]], ids=repr)
def test_gguf_shape_over_ggml_s_element_count(dims: list[int]) -> None:
    blob = gguf_blob(tensors=[gguf_tensor("w", dims)])
    with pytest.raises(GGUFError, match="64-bit count"):
        tensorfile.open(blob)


@pytest.mark.parametrize(("dims", "type_id"), [([8], 8), ([4, 2], 12), ([33], 2)], ids=repr)
def test_gguf_rows_of_partial_blocks(dims: list[int], type_id: int) -> None:
    # ggml (and the reference reader) refuse a block type whose rows are not whole blocks
    blob = gguf_blob(tensors=[gguf_tensor("w", dims, type_id)], data=bytes(1024))
    with pytest.raises(GGUFError, match="blocks of"):
        tensorfile.open(blob)


def test_gguf_tensor_of_huge_empty_shape(tmp_path: Path) -> None:
    # a zero-byte tensor whose other dimension is 2**62: described, and every read is an
    # error of tensorfile's (a slice must not walk 2**62 rows)
    blob = gguf_blob(tensors=[gguf_tensor("w", [0, 2**62])])
    with tensorfile.open(blob) as r:
        assert r.info("w").shape == (2**62, 0)
        for read in (r.get_tensor, lambda n: r.read_slice(n, slice(None)), r.view):
            try:
                read("w")
            except TensorFileError:
                pass
