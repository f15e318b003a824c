"""Fuzz the safetensors reader with mutated copies of valid files.

A few valid files are written by the reference ``safetensors.numpy.save`` and then mutated:
byte flips, truncation, insertions and deletions, JSON fragments spliced into the header,
header values replaced, and the length prefix changed. For every mutant:

* ``deserialize``, ``numpy.load`` and ``tensorfile.open(bytes).get_tensors()`` either succeed
  or raise a ``SafetensorError``, never any other exception, and all three agree;
* when tensorfile accepts a file, the reference accepts it too, with the same tensors
  (names, dtypes, shapes and bytes);
* when the reference accepts a file that tensorfile rejects, the rejection is one of
  tensorfile's documented stricter rules.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import safetensors.numpy  # the reference implementation (also binds `safetensors`)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.errors import (
    DuplicateTensorError,
    GGUFError,
    HeaderSyntaxError,
    InvalidMetadataError,
    InvalidTensorEntryError,
    SafetensorError,
    UnknownFormatError,
    ValidationOverflowError,
    ZTensorError,
)
from tensorfile.formats import FORMATS, ZTENSOR, ZTENSOR_V2_MAGIC
from tensorfile.safetensors import deserialize
from tensorfile.safetensors import numpy as st_numpy

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------- seed files


def _seeds() -> list[bytes]:
    rng = np.random.default_rng(0)
    return [
        safetensors.numpy.save(
            {
                "w": rng.standard_normal((2, 3)).astype(np.float32),
                "b": np.arange(3, dtype=np.int64),
                "scalar": np.array(2.5, dtype=np.float64),
                "empty": np.zeros((0, 4), dtype=np.float16),
                "bytes": np.arange(5, dtype=np.uint8),
                "flags": np.array([True, False, True]),
            },
            # one key: the reference writes metadata in a random order (a Rust HashMap),
            # and the seeds must be the same in every run for failures to reproduce
            metadata={"note": "héllo wörld ✓"},
        ),
        safetensors.numpy.save(
            {"x": np.array([1, -2, 3, -4], dtype=np.int16)}, metadata={"format": "pt"}
        ),
        safetensors.numpy.save({}, metadata={"only": "metadata"}),
        safetensors.numpy.save(
            {
                "c": np.array([1 + 2j, 3 - 4j], dtype=np.complex64),
                "i8": np.array([-128, 127], dtype=np.int8),
                "u16": np.arange(6, dtype=np.uint16).reshape(2, 1, 3),
                "u32": np.array([0xDEADBEEF], dtype=np.uint32),
                "z": np.zeros((3, 0), dtype=np.int32),
            }
        ),
        safetensors.numpy.save({"s": np.array(7, dtype=np.uint64)}, metadata={}),
    ]


SEEDS = _seeds()
SEED_INDEX = st.integers(0, len(SEEDS) - 1)


def header_len(blob: bytes) -> int:
    return struct.unpack("<Q", blob[:8])[0]


# --------------------------------------------------------------------------- the check


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None


def _run(what: str, blob: bytes, fn: Any) -> Outcome:
    try:
        outcome = Outcome(value=fn(blob))
    except Exception as exc:
        outcome = Outcome(error=exc)
    assert outcome.error is None or isinstance(outcome.error, SafetensorError), (
        f"{what} raised {type(outcome.error).__name__}, not a SafetensorError: "
        f"{outcome.error!r}\ninput: {blob!r}"
    )
    return outcome


def _open_all(blob: bytes) -> dict[str, np.ndarray]:
    with tensorfile.open(blob) as reader:
        dict(reader.metadata)
        return reader.get_tensors()


def _open_as_safetensors(blob: bytes) -> dict[str, np.ndarray]:
    with tensorfile.open(blob, format="safetensors") as reader:
        dict(reader.metadata)
        return reader.get_tensors()


def _tensors_of(items: list[tuple[str, dict[str, Any]]]) -> dict[str, tuple[str, list[int], bytes]]:
    return {name: (d["dtype"], list(d["shape"]), bytes(d["data"])) for name, d in items}


def _stricter_rule(exc: BaseException, blob: bytes) -> bool:
    """Whether ``exc`` is a rule tensorfile documents as stricter than the reference."""
    if isinstance(exc, DuplicateTensorError):  # names must be unique (the spec)
        return True
    if isinstance(exc, HeaderSyntaxError) and blob[8:9] in (b" ", b"\t", b"\n", b"\r"):
        return True  # the header must begin with '{' (the spec)
    if isinstance(exc, InvalidMetadataError) and "more than once" in str(exc):
        return True  # a metadata key twice
    if isinstance(exc, ValidationOverflowError) and "tensorfile's rule" in str(exc):
        return True  # an empty tensor whose non-zero dimensions overflow 64 bits
    # sizes and offsets over 48 bits (the JSON schema), e.g. a huge dimension next to a 0
    return isinstance(exc, InvalidTensorEntryError) and "48 bits" in str(exc)


def check(blob: bytes) -> None:
    """Every entry point succeeds or raises a SafetensorError, consistently with the reference."""
    tf = _run("deserialize", blob, deserialize)
    np_load = _run("numpy.load", blob, st_numpy.load)
    other = next(
        (f for f in FORMATS.values() if f.tensor_file and f.magic and blob.startswith(f.magic)),
        None,
    )
    if blob.startswith(ZTENSOR_V2_MAGIC[:4]):  # zTensor v2: the ztensor format's container
        other = ZTENSOR
    if other is not None:
        # tensorfile.open detects zTensor (v1.0 and v2) and GGUF files by their magic (no
        # safetensors file can start with one: it would declare a header of over 1 GB) and
        # reads them in their format, so a mutated safetensors file that starts with one is
        # an invalid file of that format.
        with pytest.raises(ZTensorError if other.name == "ztensor" else GGUFError):
            _open_all(blob)
        opened = Outcome(error=tf.error)
    else:
        opened = _run("tensorfile.open(bytes).get_tensors()", blob, _open_as_safetensors)
        # detection: what it cannot name is an UnknownFormatError, and it names no file that
        # the safetensors reader accepts as anything but safetensors
        try:
            detected: Outcome = Outcome(value=_open_all(blob))
        except (SafetensorError, UnknownFormatError) as exc:
            detected = Outcome(error=exc)
        assert (detected.error is None) == (opened.error is None), (detected, opened, blob)

    # the three entry points share one parser: they agree
    kinds = [type(o.error) for o in (tf, np_load, opened)]
    assert kinds.count(kinds[0]) == 3, f"entry points disagree: {kinds} on {blob!r}"

    try:
        ref = Outcome(value=safetensors.deserialize(blob))
    except Exception as exc:  # the reference's errors are its business
        ref = Outcome(error=exc)

    if tf.error is None:
        assert ref.error is None, (
            f"tensorfile accepts a file the reference rejects ({ref.error!r}): {blob!r}"
        )
        tensors = _tensors_of(tf.value)
        assert tensors == _tensors_of(ref.value)
        assert list(np_load.value) == list(opened.value) == [name for name, _ in tf.value]
        for name, (dtype, shape, data) in tensors.items():
            for arrays in (np_load.value, opened.value):
                arr = arrays[name]
                assert list(arr.shape) == shape
                if dtype not in ("F4", "F6_E2M3", "F6_E3M2"):  # unpacked in numpy
                    assert arr.tobytes() == data
    elif ref.error is None:
        assert _stricter_rule(tf.error, blob), (
            f"tensorfile rejects a file the reference accepts, and not for one of its "
            f"documented stricter rules: {tf.error!r}\ninput: {blob!r}"
        )


def test_a_seed_behind_each_magic_is_an_invalid_file_of_that_format() -> None:
    # (hypothesis found the zTensor v2 magic inserted in front of a seed)
    for magic in (ZTENSOR_V2_MAGIC[:4], ZTENSOR_V2_MAGIC, b"ZTEN", b"GGUF"):
        check(magic + SEEDS[0])


def test_seeds_are_valid() -> None:
    for blob in SEEDS:
        check(blob)
        assert deserialize(blob) is not None


# --------------------------------------------------------------------------- mutations


@FUZZ
@given(st.data())
def test_byte_flips(data: st.DataObject) -> None:
    blob = bytearray(SEEDS[data.draw(SEED_INDEX)])
    in_header = data.draw(st.booleans())
    hi = min(len(blob), 8 + header_len(blob)) if in_header else len(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, hi - 1))
        blob[pos] ^= data.draw(st.integers(1, 255))
    check(bytes(blob))


@FUZZ
@given(st.data())
def test_byte_overwrites(data: st.DataObject) -> None:
    blob = bytearray(SEEDS[data.draw(SEED_INDEX)])
    hi = 8 + header_len(blob)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(8, hi - 1))
        blob[pos] = data.draw(st.sampled_from(b'{}[]",:0123456789-.eE \t\\u\x00\x80\xc3\xff'))
    check(bytes(blob))


@FUZZ
@given(st.data())
def test_truncation(data: st.DataObject) -> None:
    blob = SEEDS[data.draw(SEED_INDEX)]
    cut = data.draw(st.integers(0, len(blob)))
    check(blob[:cut])
    # and a truncated header whose length prefix was fixed up to match
    if cut > 8:
        check(struct.pack("<Q", cut - 8) + blob[8:cut])


@FUZZ
@given(st.data())
def test_insertions_and_deletions(data: st.DataObject) -> None:
    blob = SEEDS[data.draw(SEED_INDEX)]
    pos = data.draw(st.integers(0, len(blob)))
    if data.draw(st.booleans()):
        mutant = blob[:pos] + data.draw(st.binary(min_size=1, max_size=8)) + blob[pos:]
    else:
        mutant = blob[:pos] + blob[pos + data.draw(st.integers(1, 8)) :]
    check(mutant)
    # the same edit inside the header, with the length prefix adjusted
    n = header_len(blob)
    delta = len(mutant) - len(blob)
    if 8 <= pos < 8 + n and n + delta >= 0:
        check(struct.pack("<Q", n + delta) + mutant[8:])


JSON_TOKENS = [
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b'"',
    b" ",
    b"\n",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"2.5",
    b"1e400",
    b"18446744073709551616",
    b"281474976710656",
    b'"F32"',
    b'"F4"',
    b'"dtype"',
    b'"shape"',
    b'"data_offsets"',
    b'"__metadata__"',
    b'"w"',
    b'"\\u0077"',
    b'"\\ud800"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b"[0,0]",
    b"[]",
    b"{}",
    # integers past Python's 4,300-digit int() limit, numbers past a double
    b"9" * 5000,
    b"-" + b"9" * 5000,
    b"1" + b"0" * 320,
    b"1e400",
    b"[281474976710655,0,281474976710655]",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(["F32", "F4", "U8", "BOOL", "F6_E3M2", "C64", "dtype", "__metadata__"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)

DTYPE_NAMES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E4M3", "F16", "BF16", "F32"]
DTYPE_NAMES += ["I32", "U32", "C64", "F64", "I64", "U64", "F33", "f32", ""]

# values a header could plausibly hold, so that replacements reach the later checks
plausible_values = st.one_of(
    st.integers(0, 64),
    st.sampled_from(DTYPE_NAMES),
    st.lists(st.integers(0, 8), max_size=3),
    json_values,
)

fragments = st.one_of(
    st.lists(st.sampled_from(JSON_TOKENS), min_size=1, max_size=4).map(b"".join),
    json_values.map(lambda v: json.dumps(v).encode()),
)


@FUZZ
@given(st.data())
def test_json_splices(data: st.DataObject) -> None:
    blob = SEEDS[data.draw(SEED_INDEX)]
    n = header_len(blob)
    header, rest = blob[8 : 8 + n], blob[8 + n :]
    start = data.draw(st.integers(0, len(header)))
    end = data.draw(st.integers(start, min(len(header), start + 12)))
    header = header[:start] + data.draw(fragments) + header[end:]
    check(struct.pack("<Q", len(header)) + header + rest)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@FUZZ
@given(st.data())
def test_header_value_replacements(data: st.DataObject) -> None:
    blob = SEEDS[data.draw(SEED_INDEX)]
    n = header_len(blob)
    header = json.loads(blob[8 : 8 + n])
    paths = _paths(header)[1:]
    if not paths:
        return
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from(paths))
        parent = header
        for key in path[:-1]:
            parent = parent[key]
        if not isinstance(parent, dict | list):
            continue
        parent[path[-1]] = data.draw(plausible_values)
        paths = _paths(header)[1:] or paths
    indent = data.draw(st.sampled_from([None, 1]))
    text = json.dumps(header, indent=indent, ensure_ascii=data.draw(st.booleans())).encode()
    text += b" " * data.draw(st.integers(0, 9))
    check(struct.pack("<Q", len(text)) + text + blob[8 + n :])


@FUZZ
@given(st.data())
def test_length_prefix(data: st.DataObject) -> None:
    blob = SEEDS[data.draw(SEED_INDEX)]
    n = header_len(blob)
    new_n = data.draw(
        st.one_of(
            st.integers(0, 2**64 - 1),
            st.integers(max(0, n - 16), n + 16),
            st.integers(0, len(blob)),
            st.sampled_from([99_999_999, 100_000_000, 100_000_001, 2**63, 2**64 - 1]),
        )
    )
    check(struct.pack("<Q", new_n) + blob[8:])


FIELDS = ["dtype", "shape", "data_offsets"]


@FUZZ
@given(st.data())
def test_key_renames(data: st.DataObject) -> None:
    """Rename a tensor or an entry field, which can make a name or a field appear twice."""
    blob = SEEDS[data.draw(SEED_INDEX)]
    n = header_len(blob)
    header = blob[8 : 8 + n]
    keys = [k for k in json.loads(header) if k != "__metadata__"]
    if not keys:
        return
    old = json.dumps(data.draw(st.sampled_from(keys + FIELDS))).encode() + b":"
    new = json.dumps(data.draw(st.sampled_from([*keys, *FIELDS, "__metadata__", "", "w\0"])))
    parts = header.split(old)
    k = data.draw(st.integers(1, len(parts) - 1))
    header = old.join(parts[:k]) + new.encode() + b":" + old.join(parts[k:])
    check(struct.pack("<Q", len(header)) + header + blob[8 + n :])


def _dump_members(members: list[tuple[str, Any]]) -> bytes:
    return b"{" + b",".join(json.dumps(k).encode() + b":" + v for k, v in members) + b"}"


@FUZZ
@given(st.data())
def test_duplicated_members(data: st.DataObject) -> None:
    """Write one member of the header, or of one tensor entry, twice (maybe changed)."""
    blob = SEEDS[data.draw(SEED_INDEX)]
    n = header_len(blob)
    header = json.loads(blob[8 : 8 + n])
    members = list(header.items())
    i = data.draw(st.integers(0, len(members) - 1))
    name, value = members[i]
    dumped = [(k, json.dumps(v).encode()) for k, v in members]
    if name != "__metadata__" and data.draw(st.booleans()):
        # a field twice inside the entry
        fields = [(k, json.dumps(v).encode()) for k, v in value.items()]
        j = data.draw(st.integers(0, len(fields) - 1))
        second = fields[j][1]
        if data.draw(st.booleans()):
            second = json.dumps(data.draw(plausible_values)).encode()
        fields.insert(data.draw(st.integers(j + 1, len(fields))), (fields[j][0], second))
        dumped[i] = (name, _dump_members(fields))
    else:
        # the whole member twice
        second = dumped[i][1]
        if data.draw(st.booleans()):
            second = json.dumps(data.draw(plausible_values)).encode()
        dumped.insert(data.draw(st.integers(i + 1, len(dumped))), (name, second))
    text = _dump_members(dumped)
    text += b" " * (-len(text) % 8)
    check(struct.pack("<Q", len(text)) + text + blob[8 + n :])
