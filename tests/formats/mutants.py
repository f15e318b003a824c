"""Valid files of each format, and deterministic mutants of them, for fuzzing.

Seeds are written by the reference libraries where there is one (``safetensors.numpy.save``,
``gguf.GGUFWriter``) and by ``tensorfile.ztensor`` (checked against the reference zTensor
elsewhere). :func:`mutants` derives a reproducible list of hostile variants from a seed
with a ``random.Random``: byte flips, truncations, insertions, and format-aware edits that
plant the values attackers use (lengths and counts of 2**63, 512 MiB, 2**64 - 1; integers of
5,000 digits; numbers past a double; shapes of thousands of dimensions; CBOR bignums and tags).
"""

from __future__ import annotations

import functools
import json
import random
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import numpy as np

HOSTILE_U64 = [
    0,
    1,
    7,
    2**31,
    2**32 - 1,
    2**32,
    512 << 20,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 32,
    2**64 - 1,
]
"""Lengths and counts an attacker puts in a header."""


# -- seeds ---------------------------------------------------------------------------------------


@functools.cache
def safetensors_seeds() -> tuple[bytes, ...]:
    import safetensors.numpy

    rng = np.random.default_rng(1)
    return (
        safetensors.numpy.save(
            {
                "w": rng.standard_normal((3, 4)).astype(np.float32),
                "b": np.arange(5, dtype=np.int64),
                "e": np.zeros((0, 3), np.float16),
                "s": np.array(1.5, np.float64),
            },
            metadata={"format": "pt"},
        ),
        safetensors.numpy.save({"x": np.arange(24, dtype=np.uint8).reshape(2, 3, 4)}),
    )


@functools.cache
def ztensor_seeds() -> tuple[bytes, ...]:
    from tensorfile import ztensor

    m = np.zeros((4, 5), np.float32)
    m[0, 1], m[2, 4], m[3, 0] = 1.5, -2.0, 3.0
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, kw in enumerate(({}, {"compression": "zstd", "checksum": "crc32c"})):
            path = Path(tmp) / f"{i}.zt"
            ztensor.save_file(
                {
                    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
                    "b": np.ones(3, np.int16),
                    "csr": ztensor.CSRTensor.from_dense(m),
                    "coo": ztensor.COOTensor.from_dense(m),
                },
                path,
                attributes={"license": "MIT"},
                **kw,
            )
            out.append(path.read_bytes())
    return tuple(out)


@functools.cache
def gguf_seeds() -> tuple[bytes, ...]:
    import gguf

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.gguf"
        w = gguf.GGUFWriter(str(path), arch="llama")
        w.add_uint32("llama.block_count", 2)
        w.add_int8("i8", -3)
        w.add_uint64("u64", 2**40)
        w.add_float32("f32", 0.5)
        w.add_float64("f64", -2.25)
        w.add_bool("flag", True)
        w.add_string("general.name", "tiny ✓")
        w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc", "", "é"])
        w.add_array("tokenizer.ggml.scores", [0.5, 0.25, 0.125, 0.0, -1.0])
        w.add_array("ints", [1, 2, 3])
        w.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
        w.add_tensor("norm", np.ones(4, np.float16))
        w.add_tensor("q", np.zeros((1, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("i", np.arange(6, dtype=np.int32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out.append(path.read_bytes())
        path = Path(tmp) / "b.gguf"
        w = gguf.GGUFWriter(str(path), arch="gpt2")
        w.add_custom_alignment(64)
        w.add_tensor("x", np.arange(8, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out.append(path.read_bytes())
    return tuple(out)


SEEDS: dict[str, Callable[[], tuple[bytes, ...]]] = {
    "safetensors": safetensors_seeds,
    "ztensor": ztensor_seeds,
    "gguf": gguf_seeds,
}


# -- byte mutations ------------------------------------------------------------------------------


def _header_end(fmt: str, data: bytes) -> tuple[int, int]:
    """The range of the header (manifest, for zTensor) in a seed."""
    if fmt == "safetensors":
        return 8, 8 + struct.unpack("<Q", data[:8])[0]
    if fmt == "ztensor":
        (n,) = struct.unpack("<Q", data[-8:])
        return len(data) - 8 - n, len(data)
    return 0, min(len(data), 1024)  # a GGUF header is at the front


def flip(rng: random.Random, fmt: str, data: bytes) -> bytes:
    out = bytearray(data)
    lo, hi = _header_end(fmt, data) if rng.random() < 0.8 else (0, len(data))
    for _ in range(rng.choice((1, 1, 2, 4))):
        at = rng.randrange(lo, hi)
        if rng.random() < 0.5:
            out[at] ^= 1 << rng.randrange(8)
        else:  # a byte that keeps text text: a digit, a bracket, a quote...
            out[at] = rng.choice(b'0123456789{}[]",:-. \x00\xff')
    return bytes(out)


def cut(rng: random.Random, fmt: str, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def insert_or_drop(rng: random.Random, fmt: str, data: bytes) -> bytes:
    lo, hi = _header_end(fmt, data)
    at = rng.randrange(lo, hi)
    if rng.random() < 0.5:
        return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]
    return data[:at] + data[at + rng.randint(1, 16) :]


def plant_u64(rng: random.Random, fmt: str, data: bytes) -> bytes:
    """A hostile u64 (little-endian) over 8 bytes of the header: GGUF's counts and lengths,
    the safetensors length prefix, the zTensor footer."""
    lo, hi = _header_end(fmt, data)
    at = rng.randrange(lo, max(lo + 1, hi - 8))
    if fmt == "safetensors" and rng.random() < 0.3:
        at = 0
    if fmt == "ztensor" and rng.random() < 0.3:
        at = len(data) - 8
    value = rng.choice(HOSTILE_U64)
    return data[:at] + struct.pack("<Q", value) + data[at + 8 :]


# -- format-aware mutations ------------------------------------------------------------------------

BIG_INT = "9" * 5000
JSON_FRAGMENTS = [
    BIG_INT,
    "-" + BIG_INT,
    "1e400",
    "1" + "0" * 320,
    "[" * 5000 + "]" * 5000,
    json.dumps([2**48 - 1] * 3000 + [0]),
    json.dumps([1] * 3000),
    json.dumps([2**40, 0, 2**40]),
    '"\\ud800"',
    "null",
    "{}",
    '{"dtype":"F32","shape":[' + BIG_INT + '],"data_offsets":[0,0]}',
    # plausible values, so that mutants reach the later checks
    "0",
    "1",
    "2",
    "12",
    "-1",
    "[]",
    "[0]",
    "[3,4]",
    "[0,0]",
    "[0,48]",
    '"F32"',
    '"U8"',
    '"F4"',
    '"BOOL"',
    '"x"',
]


def _paths(value: Any, prefix: tuple[Any, ...] = (), max_list: int = 1 << 30) -> Iterator[Any]:
    """The path to every item of a decoded JSON or CBOR value (lists of over ``max_list``
    items are not entered)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k), max_list)
    elif isinstance(value, list) and len(value) < max_list:
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i), max_list)


def safetensors_splice(rng: random.Random, data: bytes) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    header = data[8 : 8 + n]
    text = json.loads(header)
    paths = list(_paths(text))
    path = rng.choice(paths[1:])
    parent = text
    for key in path[:-1]:
        parent = parent[key]
    marker = "__FRAGMENT__"
    parent[path[-1]] = marker
    fragment = rng.choice(JSON_FRAGMENTS)
    new = json.dumps(text).replace(json.dumps(marker), fragment).encode()
    new += b" " * (-len(new) % 8)
    return struct.pack("<Q", len(new)) + new + data[8 + n :]


_SAME_WIDTH = [["F64", "I64", "U64"], ["F32", "I32", "U32"], ["F16", "BF16", "I16", "U16"],
               ["U8", "I8", "F8_E4M3", "F8_E5M2", "BOOL"]]  # fmt: skip


def safetensors_plausible(rng: random.Random, data: bytes) -> bytes:
    """A change that keeps the file valid, or nearly: a tensor reshaped (same element
    count), retyped (same width), given an unknown field or a hostile metadata string."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    names = [k for k in header if k != "__metadata__"]
    kind = rng.choice(["reshape", "retype", "field", "metadata"]) if names else "metadata"
    if kind == "metadata":
        meta = header.setdefault("__metadata__", {})
        meta[rng.choice(["k", "format", "x" * 1000])] = rng.choice(
            [BIG_INT, "é" * 1000, "", "\x00", "1e400", "null", "\u202e"]
        )
    else:
        entry = header[rng.choice(names)]
        numel = 1
        for d in entry["shape"]:
            numel *= d
        if kind == "reshape":
            entry["shape"] = rng.choice(
                [[numel], [1, numel], [numel, 1], [1] * 70 + [numel], [numel] + [1] * 3000]
            )
        elif kind == "retype":
            group = next((g for g in _SAME_WIDTH if entry["dtype"] in g), [entry["dtype"]])
            entry["dtype"] = rng.choice(group)
        else:
            entry[rng.choice(["x", "offsets", "dtype2"])] = rng.choice(
                [0, -1, 2**64, 1e308, "s", [1, [2, [3]]], {"a": None}]
            )
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    return struct.pack("<Q", len(new)) + new + data[8 + n :]


CBOR_VALUES: list[Any] = [
    2**64,
    -(2**64) - 1,
    10**5000,
    cbor2.CBORTag(2, b"\x01" + bytes(3000)),
    cbor2.CBORTag(2, b"\x05"),
    cbor2.CBORTag(0, "2024-01-01T00:00:00Z"),
    cbor2.CBORTag(99, [1]),
    [2**31] * 2000,
    [0] + [2**64 - 1] * 500,
    [1] * 5000,
    "1." + BIG_INT,
    BIG_INT + ".0",
    "x" * 100_000,
    {"nested": [[[[[]]]]]},
    -1,
    1.5,
    None,
    b"\xff" * 9,
    # plausible values, so that mutants reach the later checks
    0,
    1,
    8,
    64,
    128,
    [2],
    [0],
    [3, 4],
    [],
    "float32",
    "uint8",
    "dense",
    "sparse_coo",
    "quantized_4bit",
    "zstd",
    "raw",
    "crc32c:0x00000000",
    {},
]


def ztensor_manifest(rng: random.Random, data: bytes) -> bytes:
    (n,) = struct.unpack("<Q", data[-8:])
    start = len(data) - 8 - n
    root = cbor2.loads(data[start:-8])
    for _ in range(rng.randint(1, 2)):
        paths = list(_paths(root, max_list=50))
        path = rng.choice(paths[1:])
        parent = root
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = rng.choice(CBOR_VALUES)
    manifest = cbor2.dumps(root)
    return data[:start] + manifest + struct.pack("<Q", len(manifest))


def gguf_fields(data: bytes) -> list[tuple[int, int]]:
    """``(offset, width)`` of every fixed-size field of a GGUF header (counts, lengths,
    types, dimensions, offsets), found by walking it as the spec lays it out (a count that
    an earlier mutation made huge ends the walk at the end of the data: struct.error)."""
    fields: list[tuple[int, int]] = [(4, 4), (8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    n_tensors, n_kv = min(n_tensors, len(data)), min(n_kv, len(data))
    pos = 24

    def string() -> None:
        nonlocal pos
        fields.append((pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        if pos > len(data):
            raise struct.error("past the end")

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    for _ in range(n_kv):
        string()
        fields.append((pos, 4))
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if kind == 8:
            string()
        elif kind == 9:
            fields += [(pos, 4), (pos + 4, 8)]
            elem, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(min(count, len(data))):
                if pos > len(data):
                    raise struct.error("past the end")
                if elem == 8:
                    string()
                else:
                    pos += sizes[elem]
        else:
            pos += sizes[kind]
    for _ in range(n_tensors):
        string()
        fields.append((pos, 4))
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if pos + 8 * n_dims > len(data):
            raise struct.error("past the end")
        fields += [(pos + 8 * i, 8) for i in range(n_dims)]
        pos += 8 * n_dims
        fields += [(pos, 4), (pos + 4, 8)]
        pos += 12
    return fields


def gguf_field(rng: random.Random, data: bytes) -> bytes:
    """One field of a GGUF header given a hostile (or merely different) value."""
    at, width = rng.choice(gguf_fields(data))
    if width == 8:
        value = rng.choice([*HOSTILE_U64, rng.randrange(64), rng.randrange(1 << 16)])
    else:
        value = rng.choice([0, 1, 2, 3, 4, 8, 9, 12, 13, 30, 39, 99, 2**31, 2**32 - 1])
    fmt = "<Q" if width == 8 else "<I"
    return data[:at] + struct.pack(fmt, value) + data[at + width :]


_ZT_SAME_WIDTH = [
    ["float64", "int64", "uint64"],
    ["float32", "int32", "uint32"],
    ["float16", "bfloat16", "int16", "uint16"],
    ["uint8", "int8", "bool"],
]


def ztensor_plausible(rng: random.Random, data: bytes) -> bytes:
    """A manifest change that keeps the file valid, or nearly: a tensor reshaped or retyped
    (same size), its layout renamed to an extension, tags and bignums in unread keys, hostile
    attribute text, a newer minor version."""
    (n,) = struct.unpack("<Q", data[-8:])
    start = len(data) - 8 - n
    root = cbor2.loads(data[start:-8])
    tensors = root["tensors"]
    name = rng.choice(sorted(tensors))
    entry = tensors[name]
    kind = rng.choice(["reshape", "retype", "layout", "extra", "attribute", "version", "digest"])
    numel = 1
    for d in entry["shape"]:
        numel *= d
    if kind == "reshape" and entry["format"] == "dense":
        entry["shape"] = rng.choice([[numel], [1, numel], [1] * 70 + [numel], [numel] + [1] * 3000])
    elif kind == "retype":
        group = next((g for g in _ZT_SAME_WIDTH if entry["dtype"] in g), [entry["dtype"]])
        entry["dtype"] = rng.choice(group)
    elif kind == "layout":
        entry["format"] = rng.choice(["quantized_4bit", "ragged", "sparse_csc"])
    elif kind == "extra":
        target = rng.choice([root, entry, *entry["components"].values()])
        target[rng.choice(["x", "note", "created"])] = rng.choice(CBOR_VALUES[:7])
    elif kind == "attribute":
        root["attributes"][rng.choice(["k", "x" * 1000])] = rng.choice(["é" * 1000, "", BIG_INT])
    elif kind == "version":
        root["version"] = rng.choice(["1.1", "1.0.0", "1." + BIG_INT, "1.00"])
    else:
        for comp in entry["components"].values():
            comp.pop("digest", None)
    manifest = cbor2.dumps(root)
    return data[:start] + manifest + struct.pack("<Q", len(manifest))


MUTATORS: dict[str, list[Callable[[random.Random, str, bytes], bytes]]] = {
    "safetensors": [
        flip,
        cut,
        insert_or_drop,
        plant_u64,
        lambda r, f, d: safetensors_splice(r, d),
        lambda r, f, d: safetensors_plausible(r, d),
        lambda r, f, d: safetensors_plausible(r, d),
        lambda r, f, d: safetensors_plausible(r, d),
    ],
    "ztensor": [
        flip,
        cut,
        insert_or_drop,
        plant_u64,
        lambda r, f, d: ztensor_manifest(r, d),
        lambda r, f, d: ztensor_plausible(r, d),
        lambda r, f, d: ztensor_plausible(r, d),
        lambda r, f, d: ztensor_plausible(r, d),
    ],
    "gguf": [flip, cut, insert_or_drop, plant_u64] + [lambda r, f, d: gguf_field(r, d)] * 4,
}


def mutants(fmt: str, count: int, seed: int = 0) -> Iterator[bytes]:
    """``count`` reproducible mutants of the seeds of ``fmt``."""
    rng = random.Random(f"{fmt}-{seed}")
    seeds = SEEDS[fmt]()
    for _ in range(count):
        data = rng.choice(seeds)
        for _ in range(rng.choice((1, 1, 1, 2))):
            if not data:
                break
            try:
                data = rng.choice(MUTATORS[fmt])(rng, fmt, data)
            except Exception:  # a mutator that cannot parse this (already mutated) file
                continue
        yield data
