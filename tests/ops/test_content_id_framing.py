"""The content id's stream is unambiguous (hostile review of issue 35, r04): an extension
layout's parts are framed by role, type and byte length, its head names the layout (and a
zTensor v2 object's attributes), so no two different tensor sets share an id: not parts
whose bytes moved across a boundary, not a plain tensor whose bytes spell a frame, not two
layout names. Plain tensors keep their ids. The three ways of computing the id (reading
the bytes, trusting stored digests, verifying them) agree on every file here."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.core.reader import holds_blocks
from tensorfile.errors import ZTensorUnsupportedError
from tensorfile.ops import content_hash, structural_hash
from tensorfile.ops.hash import CONTENT_PREFIX
from tests.ztensor.test_v2_hostile import assemble as assemble_v2
from tests.ztensor.test_zt_hardening import build, sha

Spec = dict[str, tuple[str, list[int], str, dict[str, bytes]]]


def _write(path: Path, spec: Spec) -> str:
    """A zTensor v1.0 file of ``spec`` (every component with its sha256 digest)."""
    with_digests = {
        name: (dtype, shape, layout, {r: (b, {"digest": sha(b)}) for r, b in parts.items()})
        for name, (dtype, shape, layout, parts) in spec.items()
    }
    path.write_bytes(build(with_digests))
    return str(path)


def _id(path: str) -> str:
    """The content id, the same by the three ways (asserted)."""
    got = content_hash(path)
    assert content_hash(path, trust_stored_digests=True) == got
    assert content_hash(path, verify=True) == got
    return got


P, Q, R = b"\x01" * 10, b"\x02" * 7, b"\x03" * 5
X = bytes(range(59))


def test_bytes_moved_across_parts_change_the_id(tmp_path: Path) -> None:
    a = _write(
        tmp_path / "a.zt", {"q": ("uint8", [8, 8], "q4", {"data": P + b"scale\n" + Q, "scale": R})}
    )
    b = _write(
        tmp_path / "b.zt", {"q": ("uint8", [8, 8], "q4", {"data": P, "scale": Q + b"scale\n" + R})}
    )
    assert _id(a) != _id(b)


def test_a_plain_tensor_spelling_a_part_is_not_an_extension_tensor(tmp_path: Path) -> None:
    dense = _write(tmp_path / "d.zt", {"q": ("uint8", [64], "dense", {"data": b"data\n" + X})})
    ext = _write(tmp_path / "e.zt", {"q": ("uint8", [64], "other_layout", {"data": X})})
    framed = b'["data","U8",null,59]\n' + X  # the new frame, spelled by plain bytes
    dense2 = _write(tmp_path / "d2.zt", {"q": ("uint8", [len(framed)], "dense", {"data": framed})})
    ext2 = _write(tmp_path / "e2.zt", {"q": ("uint8", [len(framed)], "other_layout", {"data": X})})
    assert _id(dense) != _id(ext)
    assert _id(dense2) != _id(ext2)


def test_the_layout_name_counts(tmp_path: Path) -> None:
    one = _write(tmp_path / "1.zt", {"q": ("uint8", [8, 8], "some_layout", {"data": X})})
    two = _write(tmp_path / "2.zt", {"q": ("uint8", [8, 8], "another_layout", {"data": X})})
    assert _id(one) != _id(two)


def test_a_v1_layout_named_quantized_is_an_extension_one(tmp_path: Path) -> None:
    """A zTensor v1.0 extension layout named ``quantized`` (not ggml's blocks: its dtype is
    an element type): every part counts, and it is not the dense tensor of its data part."""
    data = bytes(range(64))
    one = _write(
        tmp_path / "1.zt", {"q": ("uint8", [8, 8], "quantized", {"data": data, "scale": b"\x01"})}
    )
    two = _write(
        tmp_path / "2.zt", {"q": ("uint8", [8, 8], "quantized", {"data": data, "scale": b"\x02"})}
    )
    lone = _write(tmp_path / "3.zt", {"q": ("uint8", [8, 8], "quantized", {"data": data})})
    dense = _write(tmp_path / "4.zt", {"q": ("uint8", [8, 8], "dense", {"data": data})})
    assert len({_id(one), _id(two), _id(lone), _id(dense)}) == 4


def test_plain_tensors_keep_their_ids(tmp_path: Path) -> None:
    """The id of plain tensors is the v2 recipe as it was: written out here by hand."""
    w = bytes(range(24))
    path = _write(tmp_path / "p.zt", {"w": ("float32", [2, 3], "dense", {"data": w})})
    record = (
        b'{"name":"w","dtype":"F32","shape":[2,3]}\nsha256:'
        + hashlib.sha256(w).hexdigest().encode()
    )
    assert _id(path) == hashlib.sha256(b"tensorfile-content-v2\n" + record + b"\n").hexdigest()


_V2_DATA = b"\x01\x02\x03\x04"


def _v2(path: Path, attributes: Any) -> str:
    obj: dict[str, Any] = {
        "shape": [4],
        "layout": "x.custom/1",
        "parts": {"data": {"dtype": "u8", "blob": [4096, 4], "digest": sha(_V2_DATA)}},
    }
    if attributes is not None:
        obj["attributes"] = attributes
    path.write_bytes(assemble_v2({"objects": {"t": obj}}, {4096: _V2_DATA}))
    return str(path)


def test_a_v2_extension_objects_attributes_count(tmp_path: Path) -> None:
    ids = [
        _id(_v2(tmp_path / f"{i}.zt", a))
        for i, a in enumerate(
            (None, {"group": 32}, {"group": 64}, {"group": "32"}, {"group": b"2"})
        )
    ]
    assert len(set(ids)) == len(ids)
    same = (
        _id(_v2(tmp_path / "k.zt", {"b": 1, "a": 2})),
        _id(_v2(tmp_path / "l.zt", {"a": 2, "b": 1})),
    )
    assert same[0] == same[1]  # one value, one id: key order is the encoding's, not the value's


def _v2_object(path: Path, obj: dict[str, Any], blobs: dict[int, bytes]) -> str:
    """A v2 file of the one object ``obj`` (each part not encoded with its sha256)."""
    for part in obj["parts"].values():
        at, length = part["blob"]
        if "encoding" not in part:
            part["digest"] = sha(blobs[at][:length])
    path.write_bytes(assemble_v2({"objects": {"w": obj}}, blobs))
    return str(path)


def _part(dtype: str, length: int, at: int = 4096, **extra: Any) -> dict[str, Any]:
    return {"dtype": dtype, "blob": [at, length], **extra}


def test_a_v2_layout_id_quantized_is_no_ggml_blocks(tmp_path: Path) -> None:
    """Hostile re-review n01: an unregistered v2 layout id that is literally ``quantized``,
    whose one part has a logical type tensorfile does not know, passed for ggml's blocks
    and was hashed as a plain tensor: a dense object and two such objects with different
    attributes shared one id. It is an extension layout (``ext:quantized``): its parts,
    which tensorfile cannot decode, are refused as any extension layout's are, and of
    decodable parts its layout and attributes count."""
    data = bytes(range(1, 9))

    def obj(layout: str, attributes: Any = None, **logical: str) -> dict[str, Any]:
        o = {"shape": [8], "layout": layout, "parts": {"data": _part("u8", 8, **logical)}}
        return {**o, "attributes": attributes} if attributes is not None else o

    foo = {"type": "x.foo/1"}
    dense = _v2_object(tmp_path / "d.zt", obj("dense", **foo), {4096: data})
    content_hash(dense)  # the dense object: its stored bytes, under its own type's name
    for i, attributes in enumerate(({"scale": 2}, {"scale": 3})):
        q = _v2_object(tmp_path / f"q{i}.zt", obj("quantized", attributes, **foo), {4096: data})
        with pytest.raises(ZTensorUnsupportedError, match=re.escape("logical type 'x.foo/1'")):
            content_hash(q)  # as an object of any other extension layout id
        with tensorfile.open(q) as f:
            info = f.info("w")
            assert info.layout == "ext:quantized" and info.quantization is None
            assert not holds_blocks(info)
        other = _v2_object(tmp_path / f"o{i}.zt", obj("x.bar/1", attributes, **foo), {4096: data})
        with pytest.raises(ZTensorUnsupportedError, match=re.escape("logical type 'x.foo/1'")):
            content_hash(other)
    ids = {
        _id(_v2_object(tmp_path / f"k{i}.zt", obj(layout, attributes), {4096: data}))
        for i, (layout, attributes) in enumerate(
            (("dense", None), ("quantized", {"scale": 2}), ("quantized", {"scale": 3}))
        )
    }
    assert len(ids) == 3


def test_a_v2_layout_id_sparse_csr_is_an_extension_one(tmp_path: Path) -> None:
    """Hostile re-review n05: an unregistered v2 layout id that is literally ``sparse_csr``
    (the profile is ``zt.sparse_csr/1``) was taken as tensorfile's CSR layout: its part
    ``data`` was hashed alone under a plain head, so a dense object and two such objects
    whose other parts differ shared one id."""
    data = np.arange(4, dtype=np.float32).tobytes()
    dense = {"shape": [2, 2], "layout": "dense", "parts": {"data": _part("f32", 16)}}
    ids = {_id(_v2_object(tmp_path / "dense.zt", dense, {4096: data}))}
    for extra in (b"A" * 8, b"B" * 8):
        parts = {"data": _part("f32", 16), "other": _part("u8", 8, 8192)}
        obj = {"shape": [2, 2], "layout": "sparse_csr", "parts": parts}
        ids.add(
            _id(_v2_object(tmp_path / f"{extra[:1].decode()}.zt", obj, {4096: data, 8192: extra}))
        )
    assert len(ids) == 3


def test_distinct_v2_logical_types_get_distinct_ids(tmp_path: Path) -> None:
    """Hostile re-review n02: a logical type tensorfile does not know entered the id
    upper-cased, so ``x.foo/1``, ``X.FOO/1`` and ``X.Foo/1`` (zTensor v2 type ids are
    case-sensitive) shared one id; and an unregistered type spelled as one of tensorfile's
    names (``F32``, ``float32``, ``u8``, ``BOOL``, ``Q8_0``) passed for that type (``BOOL``'s
    bytes even read as 0 and 1). Each is its own type, and no type's id changes."""
    data = bytes([2, 0, 1, 3, 0, 0, 0, 0])
    logicals = ["x.foo/1", "X.FOO/1", "X.Foo/1", "F32", "f32", "float32", "u8", "U8"]
    logicals += ["BOOL", "Bool", "q8_0", "Q8_0", "ext:F32", "ext:ext:F32"]
    ids: dict[str, str] = {}
    structural: dict[str, str] = {}
    for i, logical in enumerate([None, *logicals]):
        shape = [2] if logical and "32" in logical else [8]
        part = _part("u8", 8, **({"type": logical} if logical else {}))
        obj = {"shape": shape, "layout": "dense", "parts": {"data": part}}
        path = _v2_object(tmp_path / f"{i}.zt", obj, {4096: data})
        ids[str(logical)], structural[str(logical)] = content_hash(path), structural_hash(path)
    f32 = {"shape": [2], "layout": "dense", "parts": {"data": _part("f32", 8)}}
    path = _v2_object(tmp_path / "f32.zt", f32, {4096: data})
    ids["the F32 type"], structural["the F32 type"] = content_hash(path), structural_hash(path)
    assert len(set(structural.values())) == len(structural), structural  # case kept there too
    ones = bytes(b != 0 for b in data)
    bools = {"shape": [8], "layout": "dense", "parts": {"data": _part("u8", 8, type="bool")}}
    ids["the BOOL type"] = content_hash(_v2_object(tmp_path / "bool.zt", bools, {4096: ones}))
    assert len(set(ids.values())) == len(ids), ids
    record = b'{"name":"w","dtype":"F32","shape":[2]}\nsha256:' + sha(data)[7:].encode()
    assert ids["the F32 type"] == hashlib.sha256(CONTENT_PREFIX + record + b"\n").hexdigest()


def test_the_storage_dtype_of_an_unknown_v2_type_is_in_the_id(tmp_path: Path) -> None:
    """Hostile review d06: the same bytes stored as ``f16``, ``i16``, ``u16`` or ``bf16``
    under the logical type ``x.foo/1`` (which ztensor 2.1.2 reads with four dtypes) got one
    content id and one structural hash: the head named the logical type only. It names the
    storage dtype after it now (``x.foo/1@u16``); a known type's head is unchanged (pinned in
    the test above)."""
    data = np.array([1.5, -2.0, 3.25, 0.0], np.float16).tobytes()
    ids, structural = set(), set()
    for storage in ("f16", "i16", "u16", "bf16"):
        obj = {
            "shape": [4],
            "layout": "dense",
            "parts": {"data": _part(storage, 8, type="x.foo/1")},
        }
        path = _v2_object(tmp_path / f"{storage}.zt", obj, {4096: data})
        ids.add(_id(path))
        structural.add(structural_hash(path))
        if storage == "u16":
            record = b'{"name":"w","dtype":"x.foo/1@u16","shape":[4]}\n' + sha(data).encode()
            assert _id(path) == hashlib.sha256(CONTENT_PREFIX + record + b"\n").hexdigest()
    assert len(ids) == 4 and len(structural) == 4


def test_a_v2_encoding_id_raw_is_not_unencoded(tmp_path: Path) -> None:
    """An unregistered v2 encoding id that is literally ``raw`` (or ``zstd``, zTensor
    v1.0's codec) was taken for tensorfile's own: its stored bytes were hashed as the data
    (the id of the unencoded part), even short of the decoded length the file claims.
    It is an encoding tensorfile does not know, refused as ztensor 2.1.2 refuses it."""
    data = np.arange(4, dtype=np.float32).tobytes()
    for encoding, stored in (("raw", data), ("raw", data[:8]), ("zstd", data)):
        part = _part("f32", len(stored), encoding=encoding, decoded_length=16)
        obj = {"shape": [4], "layout": "dense", "parts": {"data": part}}
        path = _v2_object(tmp_path / f"{encoding}{len(stored)}.zt", obj, {4096: stored})
        with pytest.raises(ZTensorUnsupportedError, match=f"encoded as '{encoding}'"):
            content_hash(path)


_ROLES = st.sampled_from(["data", "scale", "zeros", "values", "scales"])
_PARTS = st.dictionaries(_ROLES, st.binary(max_size=12), min_size=1, max_size=3)


@st.composite
def _tensor(draw: st.DrawFn) -> tuple[str, list[int], str, dict[str, bytes]]:
    layout = draw(st.sampled_from(["dense", "quantized", "q4", "other"]))
    if layout == "dense":
        dtype, size = draw(st.sampled_from([("uint8", 1), ("float32", 4), ("int16", 2)]))
        n = draw(st.integers(0, 6))
        data = draw(st.binary(min_size=n * size, max_size=n * size))
        return dtype, [n], layout, {"data": data}
    shape = draw(st.lists(st.integers(0, 4), max_size=2))
    # ("data" and "values" parts hold the dtype's elements: one-byte types split anywhere)
    return draw(st.sampled_from(["uint8", "int8"])), shape, layout, draw(_PARTS)


_SETS = st.dictionaries(st.sampled_from(["a", "b", "a\nb"]), _tensor(), min_size=1, max_size=3)


def _resplit(spec: Spec, data: st.DataObject) -> Spec:
    """``spec`` with each extension tensor's bytes (all parts, in role order) split again
    among the same roles: the hard case for a stream of parts."""
    out: Spec = {}
    for name, (dtype, shape, layout, parts) in spec.items():
        if layout != "dense":
            roles = sorted(parts)
            joined = b"".join(parts[r] for r in roles)
            cuts = sorted(
                data.draw(
                    st.lists(
                        st.integers(0, len(joined)),
                        min_size=len(roles) - 1,
                        max_size=len(roles) - 1,
                    )
                )
            )
            edges = [0, *cuts, len(joined)]
            parts = {r: joined[edges[i] : edges[i + 1]] for i, r in enumerate(roles)}
        out[name] = (dtype, shape, layout, parts)
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=_SETS, data=st.data())
def test_different_tensor_sets_have_different_ids(
    tmp_path: Path, first: Spec, data: st.DataObject
) -> None:
    second = _resplit(first, data) if data.draw(st.booleans()) else data.draw(_SETS)
    a, b = _id(_write(tmp_path / "a.zt", first)), _id(_write(tmp_path / "b.zt", second))
    assert (a == b) == (first == second)
