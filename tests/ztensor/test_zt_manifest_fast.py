"""The fast manifest path against the precise one: same catalog, or a fallback.

``fast_catalog`` must either return exactly what ``parse_manifest_precise`` returns (same
tensors, same order, same records) or return None; it must never accept a manifest the precise
path refuses or warns about.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile import ztensor
from tensorfile.core.errors import ZTensorError
from tensorfile.formats.ztensor.v1._manifest import encode_manifest, parse_manifest_precise
from tensorfile.formats.ztensor.v1._manifest_fast import fast_catalog

DTYPES = {"float32": 4, "int8": 1, "bfloat16": 2, "float64": 8, "bool": 1, "uint64": 8}
LIMIT = 1 << 40


def _entry(dtype: str, shape: list[int], offset: int, length: int, **extra: Any) -> Any:
    comp: dict[str, Any] = {"offset": offset, "length": length, **extra}
    return {"dtype": dtype, "shape": shape, "format": "dense", "components": {"data": comp}}


def _precise(blob: bytes, limit: int = LIMIT) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return parse_manifest_precise(blob, manifest_start=limit, file_size=limit + 8, name="f")


def _same(blob: bytes, limit: int = LIMIT) -> bool:
    """Fast agrees with precise (True), or fell back (False); fails if it accepts a manifest
    the precise path refuses or warns about."""
    fast = fast_catalog(blob, manifest_start=limit)
    if fast is None:
        return False
    slow = _precise(blob, limit)  # raises (the test fails) if the fast path was wrong
    assert list(fast.tensors) == list(slow.tensors)
    assert dict(fast.tensors.items()) == dict(slow.tensors.items())
    assert (fast.metadata, fast.version, fast.extra) == (slow.metadata, slow.version, slow.extra)
    return True


names = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40
) | st.sampled_from(["ä", "¤edtype", "model.layers.0.weight", "x" * 300])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            names,
            st.sampled_from(sorted(DTYPES)),
            st.lists(st.integers(0, 300), max_size=3),
            st.sampled_from([None, "raw", "zstd"]),
            st.sampled_from([None, "crc32c:0x0123ABCD", "sha256:" + "ab" * 32, "crc32c:1"]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=12,
        unique_by=lambda t: t[0],
    ),
    st.booleans(),
)
def test_fast_matches_precise(rows: list[Any], misplace: bool) -> None:
    tensors, offset = {}, 64
    for i, (name, dtype, shape, encoding, digest, gap) in enumerate(rows):
        size = int(np.prod(shape)) * DTYPES[dtype] if 0 not in shape else 0
        length = max(1, size // 3) if encoding == "zstd" else size
        extra: dict[str, Any] = {}
        if encoding is not None:
            extra["encoding"] = encoding
        if digest is not None:
            extra["digest"] = digest
        start = offset + (8 if misplace and i == len(rows) - 1 else 0)
        tensors[name] = _entry(dtype, shape, start, length, **extra)
        offset = start + (length + 63) // 64 * 64 + gap * 64
    blob = encode_manifest(tensors, {"k": "v"}, "gen")
    try:
        _precise(blob)
    except (ZTensorError, Warning):
        assert fast_catalog(blob, manifest_start=LIMIT) is None
        return
    _same(blob)


def test_common_files_take_the_fast_path(tmp_path: Any) -> None:
    arrays = {f"layer.{i}.w": np.full((i % 3 + 1, 2), i, np.float32) for i in range(50)}
    for kwargs in ({}, {"compression": "zstd", "checksum": "crc32c"}, {"checksum": "sha256"}):
        path = tmp_path / "m.zt"
        ztensor.save_file(arrays, path, **kwargs)  # type: ignore[arg-type]
        data = path.read_bytes()
        size = int.from_bytes(data[-8:], "little")
        blob, start = data[-8 - size : -8], len(data) - 8 - size
        assert _same(blob, start)
        got = ztensor.load_file(path)
        assert all(np.array_equal(got[k], v) for k, v in arrays.items())


def test_a_fake_entry_inside_a_name_is_not_trusted() -> None:
    # a name holding the bytes of a whole entry, where a lazy split would cut it: the name
    # heads then disagree with the split, so the fast path refuses (the bytes are not UTF-8,
    # which the precise path reports)
    inner = encode_manifest({"x": _entry("int8", [1], 64, 1)}, {}, "g")
    fake = b"a" + inner[inner.index(b"ax") :]
    placeholder = "z" * len(fake)
    tensors = {placeholder: _entry("int8", [1], 128, 1), "b": _entry("int8", [1], 192, 1)}
    blob = encode_manifest(tensors, {}, "g").replace(placeholder.encode(), fake)
    assert fast_catalog(blob, manifest_start=LIMIT) is None
    with pytest.raises(ZTensorError, match="UTF-8"):
        _precise(blob)
    # valid UTF-8 names with 0xa4 bytes ("ä", "¤edtype") take the slower pattern, same result
    ok = {"ä": _entry("int8", [1], 64, 1), "¤edtype": _entry("int8", [1], 128, 1)}
    assert _same(encode_manifest(ok, {}, "g"))


@pytest.mark.parametrize(
    "tensors",
    [
        {"a": _entry("int8", [2], 64, 2), "b": _entry("int8", [2], 65, 2)},  # overlap
        {"a": _entry("int8", [2], 64, 3)},  # wrong size
        {"a": _entry("int8", [2], 4, 2)},  # inside the magic
        {"a": _entry("int8", [2], 96, 2)},  # misaligned: warns
        {"a": _entry("float32", [2**62, 4], 64, 2, encoding="zstd")},  # bomb / overflow
        {"a": _entry("int8", [2], LIMIT - 1, 2)},  # past the manifest
        {"a": _entry("complex64", [2], 64, 16)},  # unknown dtype
    ],
)
def test_broken_entries_fall_back(tensors: dict[str, Any]) -> None:
    blob = encode_manifest(tensors, {}, "g")
    assert fast_catalog(blob, manifest_start=LIMIT) is None
    with pytest.raises((ZTensorError, Warning)):
        _precise(blob)


def test_duplicate_names_and_trailing_bytes_fall_back() -> None:
    blob = encode_manifest({"a": _entry("int8", [1], 64, 1)}, {}, "g")
    assert fast_catalog(blob + b"\x00", manifest_start=LIMIT) is None
    two = blob.replace(b"\xa1aa", b"\xa2aa", 1) + blob[blob.index(b"aa\xa4") :]
    assert b"\xa2aa" in two
    assert fast_catalog(two, manifest_start=LIMIT) is None
    with pytest.raises(ZTensorError, match="duplicate"):
        _precise(two)
