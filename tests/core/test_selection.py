"""Regions of tensors read in one planned pass (tensorfile.core.selection), against numpy
indexing of the whole tensor: every path (runs, mapped copy, span, decoded) and bad plans."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.core.selection import Intervals, region
from tensorfile.core.selection.read import (
    MANY_RUNS,
    Want,
    finish,
    new_box,
    read_regions,
)
from tensorfile.errors import InvalidArgumentError
from tensorfile.safetensors.numpy import save, save_file
from tensorfile.sources import MemorySource


def _expected(arr: np.ndarray, entry: Any) -> np.ndarray:
    """numpy's result for a plan entry (lists of intervals taken with np.take)."""
    if entry is None:
        return arr
    if isinstance(entry, Intervals):
        idx = np.concatenate([np.arange(a, b) for a, b in entry.intervals] or [np.zeros(0, int)])
        return np.take(arr, idx.astype(np.int64), axis=entry.dim)
    items = list(entry) if isinstance(entry, tuple) else [entry]
    axis = 0
    for d, item in enumerate(items):
        if isinstance(item, list):
            idx = [np.arange(*(i if isinstance(i, tuple) else (i.start, i.stop))) for i in item]
            flat = np.concatenate(idx or [np.zeros(0, int)]).astype(np.int64)
            arr = np.take(arr, flat, axis=axis)
            items[d] = slice(None)
        axis += item is not None
    return arr[tuple(items)]


def _read(reader: Any, name: str, entry: Any) -> np.ndarray:
    info = reader.info(name)
    reg = region(info.shape, entry, name)
    box = new_box(reg, info)
    read_regions([Want(reader, name, reg, box)])
    out = finish(reg, box)
    return out.view(info.dtype.numpy).reshape(reg.result_shape)


@st.composite
def _entries(draw: Any, shape: tuple[int, ...]) -> Any:
    items: list[Any] = []
    for n in shape:
        kind = draw(st.sampled_from(["all", "int", "slice", "step", "list"]))
        if kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            a, b = sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=2)))
            items.append(slice(a, b))
        elif kind == "step":
            items.append(slice(draw(st.integers(-n - 1, n)), draw(st.integers(-n - 1, n)),
                               draw(st.sampled_from([-3, -1, 2, 5]))))  # fmt: skip
        elif kind == "list":
            cuts = sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=6)))
            pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
            if draw(st.booleans()):
                pairs.reverse()
            items.append([slice(a, b) if k % 2 else (a, b) for k, (a, b) in enumerate(pairs)])
        else:
            items.append(slice(None))
    if items and draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


_SHAPES = st.lists(st.integers(0, 7), min_size=0, max_size=4).map(tuple)
_DTYPES = [np.float32, np.int8, np.float16, ml_dtypes.bfloat16, np.int64]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), shape=_SHAPES, dtype=st.sampled_from(_DTYPES))
def test_a_region_reads_what_numpy_indexing_gives(data: Any, shape: tuple[int, ...],
                                                    dtype: Any) -> None:  # fmt: skip
    arr = (np.arange(math.prod(shape)) % 97).astype(dtype).reshape(shape)
    entry = data.draw(_entries(shape))
    with tensorfile.open(save({"t": arr, "pad": np.ones(3, np.int8)})) as r:
        got = _read(r, "t", entry)
    want = _expected(arr, entry)
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("where", ["file", "memory"])
def test_many_runs_take_the_mapped_copy_or_the_span(tmp_path: Path, where: str) -> None:
    """A column block of a tall matrix (more than MANY_RUNS runs): from a local file out of
    its mapping, from memory as one span; both equal numpy."""
    arr = np.arange(600 * 10, dtype=np.float32).reshape(600, 10)
    path = tmp_path / "m.safetensors"
    save_file({"a": np.zeros(5, np.int8), "m": arr}, str(path))
    reader = tensorfile.open(str(path)) if where == "file" else tensorfile.open(path.read_bytes())
    with reader:
        entry = (slice(3, 590), [slice(1, 3), slice(7, 8)])
        assert region(arr.shape, entry).box_shape[0] > MANY_RUNS
        np.testing.assert_array_equal(_read(reader, "m", entry), _expected(arr, entry))
        qkv = Intervals(1, [(8, 10), (0, 2)])
        np.testing.assert_array_equal(_read(reader, "m", qkv), _expected(arr, qkv))


def test_one_pass_reads_every_region_of_many_tensors_and_only_their_bytes() -> None:
    """Many tensors' regions in one call: the bytes asked of the source are the regions'
    (row blocks are runs; nothing read twice, no whole tensor for a slice)."""
    tensors = {f"w{i}": np.full((64, 32), i, np.float32) for i in range(8)}
    src = MemorySource(save(tensors))
    reader = tensorfile.open(src.buffer().tobytes())
    wants, boxes = [], {}
    for name in tensors:
        reg = region((64, 32), slice(16, 32), name)
        boxes[name] = (reg, new_box(reg, reader.info(name)))
        wants.append(Want(reader, name, reg, boxes[name][1]))
    asked = read_regions(wants)
    assert asked == 8 * 16 * 32 * 4
    for name, (reg, box) in boxes.items():
        assert (finish(reg, box).view(np.float32) == int(name[1:])).all()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ((slice(0, 2), 6), "index 6 is out of range for dimension 1"),
        (([(0, 9)],), "interval 0:9 is out of range for dimension 0"),
        (([slice(0, 4, 2)],), "slice of step 1"),
        (Intervals(2, [(0, 1)]), "Intervals along dimension 2"),
        ((1.5,), "basic index"),
        ((..., ...), "single ellipsis"),
        ((0, 0, 0), "too many indices"),
        ((slice(0, "a"),), "slice bounds are ints"),
        ((slice(None, None, 0),), "step cannot be zero"),
        (([("a", 1)],), "bounds are ints"),
        (([3],), "slice or a (start, stop) pair"),
    ],
)
def test_bad_entries_are_refused_naming_the_tensor(entry: Any, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match="tensor 'w'") as info:
        region((8, 6), entry, "w")
    assert words in str(info.value)


def test_a_region_of_a_compressed_tensor_is_read_whole_and_taken(tmp_path: Path) -> None:
    """zTensor zstd: no byte runs to read, so the tensor is decoded and the region copied."""
    from tensorfile.ztensor import save_file as zsave

    arr = np.arange(200, dtype=np.int32).reshape(20, 10)
    path = tmp_path / "z.zt"
    zsave({"c": arr}, str(path), compression="zstd")
    with tensorfile.open(str(path)) as r:
        entry = (slice(2, 18, 3), [slice(0, 2), slice(8, 10)])
        np.testing.assert_array_equal(_read(r, "c", entry), _expected(arr, entry))


@pytest.mark.parametrize(
    "rows", [slice(0, None, 4095), slice(None, None, -4095), slice(4000, 5, -997), slice(7, 8, 65)]
)
def test_a_sparse_strided_slice_reads_only_its_rows(rows: slice) -> None:
    """review38a R38A-6: told the element size, a slice whose step skips >= 64 KiB reads
    its rows one by one, in its order (the first and last of 4096 rows: 2 KB, not 4 MB)."""
    w = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)
    reader = tensorfile.open(save({"w": w}))
    reg = region(w.shape, (rows,), "w", itemsize=4)
    assert reg.key is None and all(b - a == 1 for a, b in reg.dims[0])
    box = new_box(reg, reader.info("w"))
    asked = read_regions([Want(reader, "w", reg, box)])
    assert asked <= 2 * box.nbytes, (asked, box.nbytes)
    np.testing.assert_array_equal(finish(reg, box).view(np.float32)[..., 0], w[rows])


def test_a_dense_or_long_strided_slice_still_reads_its_hull() -> None:
    """A step that skips little, or more kept rows than SPARSE_ROWS, reads from the first
    row to the last (as without ``itemsize``)."""
    assert region((4096, 256), slice(0, None, 64), itemsize=4).dims[0] == ((0, 4033),)
    big = region((2 * 65536 + 2, 1 << 15), slice(None, None, 2), itemsize=4)  # claims only
    assert big.dims[0] == ((0, 2 * 65536 + 1),)
