"""Fuzz the zTensor reader with mutated copies of valid files.

A few valid files are written by ``tensorfile.ztensor`` itself (raw and zstd components,
crc32c and sha256 digests, dense tensors of several dtypes, sparse CSR and COO tensors) and
then mutated: bytes flipped anywhere (mostly in the manifest and footer), truncated,
spliced, the footer rewritten, the manifest replaced by arbitrary CBOR, by random but
structurally plausible manifests, or by the real manifest with one value swapped for junk.
Every mutant is opened and every tensor and component read, from bytes and from a file:
the only exception allowed is a :class:`~tensorfile.ztensor.ZTensorError` (and the only
warning a :class:`~tensorfile.ztensor.ZTensorWarning`); anything else fails the test.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile import ztensor
from tensorfile.ztensor import COOTensor, CSRTensor, ZTensorError, ZTensorWarning

FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------- seed files


def _dense() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((2, 3)).astype(np.float32),
        "b": np.arange(5, dtype=np.int64),
        "flags": np.array([True, False, True, True]),
        "scalar": np.array(2.5, dtype=np.float16),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "bf": np.arange(3).astype(ml_dtypes.bfloat16),
        "bytes": np.arange(100, dtype=np.uint8),
    }


def _sparse() -> dict[str, Any]:
    m = np.zeros((4, 5), np.float32)
    m[0, 1], m[2, 0], m[2, 4], m[3, 3] = 1.5, -2.0, 3.0, 4.0
    t = np.zeros((2, 3, 4), np.float64)
    t[0, 1, 2], t[1, 2, 3] = 7.0, 8.0
    return {"csr": CSRTensor.from_dense(m), "coo": COOTensor.from_dense(t)}


@functools.cache
def seeds() -> tuple[bytes, ...]:
    import tempfile

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        variants: list[tuple[dict[str, Any], dict[str, Any]]] = [
            (_dense(), {"attributes": {"license": "MIT", "k": "v"}}),
            (_dense(), {"compression": "zstd", "checksum": "crc32c"}),
            ({**_sparse(), "x": np.arange(6, dtype=np.float64)}, {"checksum": "sha256"}),
            (
                {**_sparse(), "y": np.ones(40, np.int16)},
                {"compression": "zstd", "checksum": "crc32c"},
            ),
        ]
        for i, (tensors, kw) in enumerate(variants):
            path = os.path.join(tmp, f"seed{i}.zt")
            ztensor.save_file(tensors, path, **kw)
            out.append(Path(path).read_bytes())
        # one file mixing encodings and digests per tensor
        path = os.path.join(tmp, "mixed.zt")
        with ztensor.Writer(path) as w:
            w.add("raw", np.arange(12, dtype=np.int32).reshape(3, 4))
            w.add("z", np.arange(50, dtype=np.float32), compression="zstd", checksum="sha256")
            w.add("c", _sparse()["csr"], compression="zstd")
            w.add("d", np.ones((2, 2), np.uint16), checksum="crc32c")
        out.append(Path(path).read_bytes())
    return tuple(out)


def split(data: bytes) -> tuple[bytes, bytes]:
    """(everything before the manifest, the manifest) of a valid file."""
    (size,) = struct.unpack("<Q", data[-8:])
    start = len(data) - 8 - size
    return data[:start], data[start:-8]


def with_manifest(body: bytes, manifest: bytes) -> bytes:
    return body + manifest + struct.pack("<Q", len(manifest))


# --------------------------------------------------------------------------- the oracle


_FILES = itertools.count()


def _attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ZTensorError:
        return None


def _read_everything(reader: Any) -> None:
    for name in reader.keys():
        info = reader.info(name)
        _attempt(lambda name=name: reader.get_tensor(name))
        for role in info.components:
            _attempt(lambda name=name, role=role: reader.read_component(name, role))
        _attempt(lambda name=name: reader.component(name, "nope"))
        if info.layout == "dense":
            _attempt(lambda name=name: reader.view(name))
            _attempt(lambda name=name: reader.read_slice(name, ...))
    _attempt(reader.get_tensors)
    _ = reader.attributes, reader.metadata, len(reader), repr(reader)


def _exercise(data: bytes, directory: Path) -> None:
    """Open ``data`` every way and read all of it; only ZTensorErrors may escape."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for verify in (True, False):
            try:
                reader = ztensor.open(data, verify=verify)
            except ZTensorError:
                continue
            with reader:
                _read_everything(reader)
        path = directory / f"fuzz{next(_FILES)}.zt"
        path.write_bytes(data)
        try:
            try:
                reader = ztensor.open(path)
            except ZTensorError:
                pass
            else:
                with reader:
                    _read_everything(reader)
            _attempt(lambda: ztensor.load_file(path))
            if data[:4] == b"ZTEN":

                def generic() -> None:
                    with tensorfile.open(path) as r:
                        r.get_tensors()

                _attempt(generic)
        finally:
            path.unlink()
    others = [w for w in caught if not issubclass(w.category, ZTensorWarning)]
    assert not others, [f"{w.category.__name__}: {w.message}" for w in others]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ztfuzz")


def test_seeds_are_valid(fuzz_dir: Path) -> None:
    assert len(seeds()) == 5
    for data in seeds():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with ztensor.open(data) as reader:
                got = reader.get_tensors()
                for name in reader.keys():
                    for role in reader.info(name).components:
                        reader.read_component(name, role)
        assert got
        _exercise(data, fuzz_dir)


def test_oracle_rejects_foreign_exceptions(fuzz_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the check itself can fail: an exception that is not a ZTensorError gets through
    def boom(self: Any, name: str) -> Any:
        raise ValueError("not a ZTensorError")

    monkeypatch.setattr(ztensor.ZTensorReader, "get_tensor", boom)
    with pytest.raises(ValueError):
        _exercise(seeds()[0], fuzz_dir)


# --------------------------------------------------------------------------- byte mutations

seed_index = st.integers(0, 4)


@st.composite
def flipped(draw: st.DrawFn) -> bytes:
    data = bytearray(seeds()[draw(seed_index)])
    _, manifest = split(bytes(data))
    tail = len(manifest) + 8
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):  # half in the manifest and the footer
            pos = len(data) - 1 - draw(st.integers(0, tail - 1))
        else:
            pos = draw(st.integers(0, len(data) - 1))
        data[pos] ^= draw(st.integers(1, 255))
    return bytes(data)


@st.composite
def cut_and_spliced(draw: st.DrawFn) -> bytes:
    data = seeds()[draw(seed_index)]
    other = seeds()[draw(seed_index)]
    n = len(data)
    kind = draw(st.sampled_from(["truncate", "drop", "insert", "splice", "keep-footer"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, n - 1))]
    a = draw(st.integers(0, n))
    b = draw(st.integers(a, min(n, a + 64)))
    if kind == "drop":
        return data[:a] + data[b:]
    if kind == "insert":
        return data[:a] + draw(st.binary(min_size=1, max_size=32)) + data[a:]
    if kind == "splice":
        c = draw(st.integers(0, len(other)))
        return data[:a] + other[c : c + (b - a) + draw(st.integers(0, 16))] + data[b:]
    # cut bytes out of the middle but keep the footer's (now wrong) manifest size
    return data[:a] + data[b:-8] + data[-8:]


@st.composite
def refootered(draw: st.DrawFn) -> bytes:
    data = seeds()[draw(seed_index)]
    (size,) = struct.unpack("<Q", data[-8:])
    new = draw(
        st.one_of(
            st.integers(0, 2**64 - 1),
            st.integers(max(0, size - 16), size + 16),
            st.sampled_from([0, 1, len(data) - 16, len(data) - 15, 2**63, 2**64 - 1]),
        )
    )
    return data[:-8] + struct.pack("<Q", new)


@FUZZ
@given(data=flipped())
def test_fuzz_flipped_bytes(fuzz_dir: Path, data: bytes) -> None:
    _exercise(data, fuzz_dir)


@FUZZ
@given(data=st.one_of(cut_and_spliced(), refootered()))
def test_fuzz_truncated_spliced_refootered(fuzz_dir: Path, data: bytes) -> None:
    _exercise(data, fuzz_dir)


# --------------------------------------------------------------------------- random manifests

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64 - 1),
    st.sampled_from([0, 1, 8, 64, 128, 2**32, 2**63, 2**64 - 1, -1]),
    # bignums (cbor2 writes tag 2 or 3), one past Python's 4,300-digit str() limit (as its
    # tag, which even hypothesis can print)
    st.sampled_from([2**64, -(2**64) - 1, 2**200, cbor2.CBORTag(2, b"\x01" + bytes(3000))]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=12),
)
KEYS = [
    "version", "generator", "attributes", "tensors", "dtype", "shape", "format",
    "components", "data", "values", "indices", "indptr", "coords", "offset", "length",
    "encoding", "digest",
]  # fmt: skip
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=6), st.integers(-5, 5))
# CBOR tags: those cbor2 gives meaning to (datetimes, bignums, decimals, rationals, regular
# expressions, MIME, UUIDs, sets, IP addresses, shared and string references, self-describe)
# and unknown ones
TAGS = [0, 1, 2, 3, 4, 5, 21, 24, 25, 28, 29, 30, 32, 35, 36, 37, 256, 258, 260, 261, 55799, 99]
cbor_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
        st.builds(cbor2.CBORTag, st.sampled_from(TAGS), children),
    ),
    max_leaves=25,
)


@st.composite
def arbitrary_manifest(draw: st.DrawFn) -> bytes:
    """Any CBOR value, its encoding cut or grown by a byte or two, or plain random bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=64))
    try:
        raw = cbor2.dumps(draw(cbor_values))
    except (cbor2.CBOREncodeError, ValueError, TypeError):
        raw = b"\xf6"
    edit = draw(st.sampled_from(["as-is", "as-is", "as-is", "cut", "grow"]))
    if edit == "cut" and raw:
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if edit == "grow":
        return raw + draw(st.binary(min_size=1, max_size=2))
    return raw


@FUZZ
@given(index=seed_index, manifest=arbitrary_manifest())
def test_fuzz_arbitrary_cbor_manifest(fuzz_dir: Path, index: int, manifest: bytes) -> None:
    body, _ = split(seeds()[index])
    _exercise(with_manifest(body, manifest), fuzz_dir)


junk = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(keys, scalars, max_size=3))
uint_like = st.one_of(
    st.integers(0, 300),
    st.sampled_from([0, 8, 64, 128, 192, 256, 2**32, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "dtype": st.sampled_from(
        ["float32", "float64", "float16", "bfloat16", "int64", "uint8", "bool", "float128", ""]
    ),
    "shape": st.one_of(
        st.lists(st.integers(0, 6), max_size=4),
        st.lists(uint_like, max_size=3),
        # many dimensions: products over them must stay cheap
        st.sampled_from([[1] * 5000, [2**31] * 5000, [0] + [2**64 - 1] * 3000, [2**64]]),
    ),
    "format": st.sampled_from(["dense", "sparse_csr", "sparse_coo", "quantized_4bit", "Dense"]),
    "offset": uint_like,
    "length": uint_like,
    "encoding": st.sampled_from(["raw", "zstd", "gzip", None]),
    "digest": st.sampled_from(
        ["crc32c:0x00000000", "sha256:" + "0" * 64, "md5:00", "crc32c:zz", "crc32c:0x1"]
    ),
}


# a uniform roll (hypothesis' own integers lean hard towards their bounds)
_rolls = st.randoms(use_true_random=True)


def _pick(draw: st.DrawFn, field: str, own: Any, borrowed: list[Any], rate: int) -> Any:
    """Mostly the real value; about once in ``rate`` picks another tensor's (or component's)
    value, a plausible value of the field's type, junk of any type, or nothing at all."""
    roll = draw(_rolls).randrange(7 * rate)
    if roll >= 7:
        return own
    if roll < 3 and borrowed:
        return draw(st.sampled_from(borrowed))
    if roll < 5 and field in FIELD_VALUES:
        return draw(FIELD_VALUES[field])
    if roll < 6:
        return draw(junk)
    return _DROP


_DROP: Any = object()


def _entry(
    draw: st.DrawFn, own: dict[Any, Any], others: list[dict[Any, Any]], rate: int
) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    extra = draw(st.lists(st.sampled_from(["encoding", "digest"]), max_size=1))
    for field in list(own) + extra:
        value = _pick(draw, field, own.get(field), [o[field] for o in others if field in o], rate)
        if value is None and field not in own:
            continue
        if value is not _DROP:
            out[field] = value
    return out


@st.composite
def plausible_manifest(draw: st.DrawFn) -> tuple[int, dict[str, Any]]:
    """The seed's own tensors, each field kept, borrowed from another tensor, replaced by
    a plausible or junk value, or dropped: structurally right, often subtly wrong."""
    index = draw(seed_index)
    rate = draw(st.sampled_from([4, 30, 100]))
    _, manifest = split(seeds()[index])
    real = cbor2.loads(manifest)
    entries = list(real["tensors"].values())
    components = [c for t in entries for c in t["components"].values()]
    names = draw(
        st.lists(st.sampled_from(sorted(real["tensors"])), unique=True, min_size=1, max_size=6)
    )
    tensors: dict[Any, Any] = {}
    for name in names:
        own = real["tensors"][name]
        fields = {k: v for k, v in own.items() if k != "components"}
        entry = _entry(draw, fields, entries, rate)
        borrowed = [t["components"] for t in entries]
        comps = _pick(draw, "components", own["components"], borrowed, rate)
        if isinstance(comps, dict):
            comps = {
                role: _entry(draw, comp, components, rate) if isinstance(comp, dict) else comp
                for role, comp in comps.items()
            }
            if draw(st.integers(0, 2 * rate)) == 0:
                comps[draw(st.sampled_from(["data", "values", "indptr", "scale"]))] = draw(
                    st.sampled_from(components)
                )
        if comps is not _DROP:
            entry["components"] = comps
        tensors[name if draw(st.integers(0, rate)) else draw(st.text(max_size=3))] = entry
    root = {
        "version": _pick(draw, "version", "1.0", ["1.1", "2.0", "1.0.0", "x"], rate),
        "generator": _pick(draw, "generator", real["generator"], [], rate),
        "attributes": _pick(draw, "attributes", real["attributes"], [{"a": "b"}], rate),
        "tensors": tensors,
    }
    return index, {k: v for k, v in root.items() if v is not _DROP}


@FUZZ
@given(case=plausible_manifest())
def test_fuzz_plausible_manifest(fuzz_dir: Path, case: tuple[int, dict[str, Any]]) -> None:
    index, root = case
    body, _ = split(seeds()[index])
    _exercise(with_manifest(body, cbor2.dumps(root)), fuzz_dir)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_real_manifest(draw: st.DrawFn) -> bytes:
    index = draw(seed_index)
    body, manifest = split(seeds()[index])
    root = cbor2.loads(manifest)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(root) if p]
        path = draw(st.sampled_from(paths))
        parent = root
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "delete", "int", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "int" and isinstance(parent[path[-1]], int):
            parent[path[-1]] = draw(
                st.one_of(
                    st.integers(-2, 2**64 - 1),
                    st.integers(-64, 64).map(lambda d, v=parent[path[-1]]: v + d),
                )
            )
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(junk)
        else:
            parent[path[-1]] = draw(junk)
    return with_manifest(body, cbor2.dumps(root))


def _empty_tensor_with_huge_dim() -> bytes:
    """A mutant the fuzzer finds: the 0 x 4 tensor "empty" made 0 x 2**61. Still zero bytes,
    so the manifest is valid, but numpy cannot allocate that shape."""
    body, manifest = split(seeds()[0])
    root = cbor2.loads(manifest)
    root["tensors"]["empty"]["shape"] = [0, 2**61]
    return with_manifest(body, cbor2.dumps(root))


@FUZZ
@given(data=mutated_real_manifest())
def test_fuzz_mutated_real_manifest(fuzz_dir: Path, data: bytes) -> None:
    _exercise(data, fuzz_dir)


def test_mutant_found_by_fuzzing_empty_tensor_with_huge_dim(fuzz_dir: Path) -> None:
    # kept as a fixed case: random runs hit it only now and then
    _exercise(_empty_tensor_with_huge_dim(), fuzz_dir)
