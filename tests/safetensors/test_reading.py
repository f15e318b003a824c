"""Reading: zero-copy views, owned copies, slices that read only what they need."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.core import dtypes
from tensorfile.errors import (
    InvalidArgumentError,
    MissingTensorError,
    SafetensorError,
    SafetensorIOError,
    TensorNotFoundError,
    UnsupportedError,
)
from tensorfile.safetensors import numpy as tf_np
from tensorfile.safetensors import safe_open
from tests.helpers.samples import BYTE_DTYPES, SUBBYTE_DTYPES, assert_same, sample


@pytest.mark.parametrize("name", BYTE_DTYPES + SUBBYTE_DTYPES)
def test_every_dtype_round_trips(tmp_file: str, name: str) -> None:
    shapes = [(4,), (2, 8), (0,), (8, 0)] + ([()] if name not in SUBBYTE_DTYPES else [])
    tensors = {f"t{i}": sample(name, s, seed=i) for i, s in enumerate(shapes)}
    tf_np.save_file(tensors, tmp_file)
    loaded = tf_np.load_file(tmp_file)
    for key, arr in tensors.items():
        assert_same(loaded[key], arr)
    with tensorfile.open(tmp_file) as r:
        for key, arr in tensors.items():
            assert r.info(key).dtype.name == name
            assert_same(r.get_tensor(key), arr)
            if name not in SUBBYTE_DTYPES:
                assert_same(r.view(key), arr)


def test_subbyte_files_are_bit_packed(tmp_file: str) -> None:
    codes = np.array([1, 2, 3, 4, 5, 6, 7, 8], np.uint8)
    f4 = codes.view(dtypes.from_safetensors("F4").numpy)
    f6 = codes[:4].view(dtypes.from_safetensors("F6_E2M3").numpy)
    tf_np.save_file({"f4": f4, "f6": f6}, tmp_file)
    with tensorfile.open(tmp_file) as r:
        assert r.info("f4").byte_range.length == 4
        assert r.info("f6").byte_range.length == 3
        raw = open(tmp_file, "rb").read()
        start = r.info("f4").byte_range.start
        assert raw[start : start + 4] == bytes([0x21, 0x43, 0x65, 0x87])
        with pytest.raises(UnsupportedError, match="bit-packed"):
            r.view("f4")


def test_view_is_zero_copy_and_read_only(tmp_file: str) -> None:
    arr = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)
    tf_np.save_file({"w": arr}, tmp_file)
    with tensorfile.open(tmp_file) as r:
        v = r.view("w")
        assert not v.flags.writeable
        assert not v.flags.owndata
        assert r.source.stats.bytes_read < 1024  # only the header was read
        assert v.ctypes.data % 8 == 0  # the data region is 8-byte aligned
        np.testing.assert_array_equal(v, arr)
        with pytest.raises(ValueError, match="read-only"):
            v[0, 0] = 1
    np.testing.assert_array_equal(v, arr)  # still valid after the reader is closed


def test_get_tensor_is_owned_and_writable(tmp_file: str) -> None:
    tf_np.save_file({"w": np.ones(10, np.int32)}, tmp_file)
    with safe_open(tmp_file, "np") as f:
        t = f.get_tensor("w")
    t[0] = 5
    assert t.flags.owndata and t.flags.writeable
    assert tf_np.load_file(tmp_file)["w"][0] == 1


def test_align_puts_data_on_the_boundary(tmp_file: str) -> None:
    arr = np.arange(10, dtype=np.float64)
    for align in (64, 4096):
        tf_np.save_file({"w": arr, "b": np.zeros(3, np.uint8)}, tmp_file, align=align)
        with tensorfile.open(tmp_file) as r:
            assert r.catalog.data_start % align == 0
            assert r.view("w").ctypes.data % 64 == 0 or align == 64
            assert_same(r.get_tensor("w"), arr)
        import safetensors.numpy as ref_np

        assert_same(ref_np.load_file(tmp_file)["w"], arr)
    with pytest.raises(InvalidArgumentError, match="multiple of 8"):
        tf_np.save_file({"w": arr}, tmp_file, align=12)


def test_missing_tensor_is_safetensor_error_and_key_error(tmp_file: str) -> None:
    tf_np.save_file({"w": np.ones(1)}, tmp_file)
    with safe_open(tmp_file, "np") as f:
        with pytest.raises(MissingTensorError, match="'nope'") as info:
            f.get_tensor("nope")
        assert isinstance(info.value, SafetensorError)
        assert isinstance(info.value, TensorNotFoundError)
        assert isinstance(info.value, KeyError)
        with pytest.raises(KeyError):
            f.get_slice("nope")


def test_missing_file_and_closed_handle(tmp_path: Any) -> None:
    absent = str(tmp_path / "absent.safetensors")
    with pytest.raises(SafetensorIOError) as info:
        safe_open(absent, "np")
    # the reference's exception type and words, which code in the wild matches on
    assert isinstance(info.value, FileNotFoundError)
    assert str(info.value) == f"No such file or directory: {absent}"
    path = str(tmp_path / "m.safetensors")
    tf_np.save_file({"w": np.ones(1)}, path)
    f = safe_open(path, "np")
    f.close()
    with pytest.raises(SafetensorError, match="closed"):
        f.keys()


def test_unknown_framework_and_backend(tmp_file: str) -> None:
    tf_np.save_file({"w": np.ones(1)}, tmp_file)
    with pytest.raises(UnsupportedError, match="framework"):
        safe_open(tmp_file, "tensorflowish")
    with pytest.raises(InvalidArgumentError, match="backend"):
        safe_open(tmp_file, "np", backend="carrier-pigeon")
    for backend in ("mmap", "pread"):
        assert tf_np.load_file(tmp_file, backend=backend)["w"].tolist() == [1.0]


def test_truncated_after_open_is_a_safetensor_error(tmp_file: str) -> None:
    tf_np.save_file({"w": np.ones(1024)}, tmp_file)
    with safe_open(tmp_file, "np") as f:
        with open(tmp_file, "r+b") as g:
            g.truncate(100)
        with pytest.raises(SafetensorIOError, match="truncated"):
            f.get_tensor("w")


# -- slicing ---------------------------------------------------------------------------


def _index_strategy(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    def one_axis(n: int) -> st.SearchStrategy[Any]:
        bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
        step = st.one_of(st.none(), st.integers(-4, 4).filter(lambda s: s != 0))
        ints = st.integers(-n, n - 1) if n else st.nothing()
        return st.one_of(st.builds(slice, bound, bound, step), ints)

    per_axis = st.tuples(*[one_axis(n) for n in shape])

    def decorate(items: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
        out = list(items)
        if data[0] and out:
            k = data[1] % (len(out) + 1)
            j = min(k + data[2] % (len(out) - k + 1), len(out))
            out[k:j] = [Ellipsis]
        if data[3]:
            out.insert(data[4] % (len(out) + 1), None)
        return tuple(out)

    return st.builds(
        decorate,
        per_axis,
        st.tuples(st.booleans(), *[st.integers(0, 9)] * 2, st.booleans(), st.integers(0, 9)),
    )


@st.composite
def _shape_and_index(draw: Any) -> tuple[tuple[int, ...], Any]:
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
    return shape, draw(_index_strategy(shape))


@settings(max_examples=150, deadline=None)
@given(_shape_and_index())
def test_get_slice_matches_numpy_basic_indexing(case: tuple[tuple[int, ...], Any]) -> None:
    shape, key = case
    arr = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    blob = tf_np.save({"t": arr})
    with tensorfile.open(blob) as r:
        got = r.read_slice("t", key)
    assert_same(got, np.array(arr[key], order="C"))


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), slice(1, None)),
        -1,
        (Ellipsis, slice(None, None, 2)),
        (None, 0),
        (1, None, slice(None, None, -1)),
        (),
    ],
)
def test_safe_open_get_slice(tmp_file: str, key: Any) -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    tf_np.save_file({"w": arr}, tmp_file)
    with safe_open(tmp_file, "np") as f:
        s = f.get_slice("w")
        assert s.get_shape() == [3, 4]
        assert s.get_dtype() == "F32"
        assert_same(s[key], np.array(arr[key], order="C"))


def test_slices_read_only_the_rows_they_need(tmp_file: str) -> None:
    rows, cols = 1000, 256
    arr = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    tf_np.save_file({"w": arr}, tmp_file)
    row_bytes = cols * 4
    with tensorfile.open(tmp_file) as r:
        before = r.source.stats.bytes_read
        np.testing.assert_array_equal(r.read_slice("w", slice(10, 20)), arr[10:20])
        assert r.source.stats.bytes_read - before == 10 * row_bytes
        before = r.source.stats.bytes_read
        np.testing.assert_array_equal(r.read_slice("w", (5, slice(3, 7))), arr[5, 3:7])
        assert r.source.stats.bytes_read - before == 4 * 4  # four elements of one row
        before = r.source.stats.bytes_read
        np.testing.assert_array_equal(r.read_slice("w", (7, 9)), arr[7, 9])
        assert r.source.stats.bytes_read - before == 4
    big = np.arange(64 * 65536, dtype=np.uint8).reshape(64, 65536)
    tf_np.save_file({"b": big}, tmp_file)
    with tensorfile.open(tmp_file) as r:
        before = r.source.stats.bytes_read
        np.testing.assert_array_equal(r.read_slice("b", slice(None, None, 8)), big[::8])
        assert r.source.stats.bytes_read - before == 8 * 65536  # only the selected rows


def test_advanced_indexing_falls_back_to_a_full_read(tmp_file: str) -> None:
    arr = np.arange(20, dtype=np.int64).reshape(4, 5)
    tf_np.save_file({"w": arr}, tmp_file)
    with tensorfile.open(tmp_file) as r:
        assert_same(r.read_slice("w", ([0, 2], slice(None))), arr[[0, 2]])
        assert_same(r.read_slice("w", arr > 10), arr[arr > 10])
        with pytest.raises(InvalidArgumentError, match="out of range"):
            r.read_slice("w", 7)
        with pytest.raises(InvalidArgumentError, match="too many indices"):
            r.read_slice("w", (0, 0, 0))


def test_open_bytes_and_format_argument() -> None:
    blob = tf_np.save({"a": np.zeros(2, np.float32)})
    assert tensorfile.open(blob, format="safetensors").keys() == ["a"]
    with pytest.raises(InvalidArgumentError, match="unknown format"):
        tensorfile.open(blob, format="pickle")


@pytest.mark.parametrize("shape", [[1] * 65, [1] * 64 + [0]], ids=["65-dims", "65-dims-empty"])
def test_shape_numpy_cannot_hold_is_a_safetensor_error(shape: list[int]) -> None:
    # A valid header (the byte count is right) whose shape no numpy array can have.
    import json
    import math
    import struct

    from tensorfile.errors import SafetensorError

    nbytes = 4 * math.prod(shape)
    header = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, nbytes]}})
    blob = struct.pack("<Q", len(header)) + header.encode() + bytes(nbytes)
    with tensorfile.open(blob) as f:
        for read in (f.get_tensor, f.view, lambda n: f.read_slice(n, ...)):
            with pytest.raises(SafetensorError, match="numpy cannot hold"):
                read("w")


def test_empty_tensor_whose_other_dimensions_overflow_is_refused() -> None:
    # Zero elements, but its non-zero dimensions x bits do not fit in 64 bits: tensorfile's
    # rule (the reference accepts it), so that no later product over the shape is a huge
    # number; an empty tensor whose other dimensions fit is valid.
    import json
    import struct

    from tensorfile.errors import ValidationOverflowError

    def blob(shape: list[int]) -> bytes:
        header = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
        return struct.pack("<Q", len(header)) + header.encode()

    with pytest.raises(ValidationOverflowError, match="non-zero dimensions"):
        tensorfile.open(blob([2**40, 0, 2**40]))
    with tensorfile.open(blob([2**30, 0, 2**20])) as f:
        assert f.get_tensor("w").shape == (2**30, 0, 2**20)
