"""The content id's stream is unambiguous (hostile review of issue 35, r04): an extension
layout's parts are framed by role, type and byte length, its head names the layout (and a
zTensor v2 object's attributes), so no two different tensor sets share an id: not parts
whose bytes moved across a boundary, not a plain tensor whose bytes spell a frame, not two
layout names. Plain tensors keep their ids. The three ways of computing the id (reading
the bytes, trusting stored digests, verifying them) agree on every file here."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile.ops import content_hash
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
