"""``tensorfile.core.slicing.plan``: which rows of a C-ordered tensor a basic index needs,
checked against numpy's own indexing of the same array.

A plan is applied here the way a reader applies it: the rows of ``plan.axis`` listed in
``plan.rows`` are read from the flat buffer starting at element ``plan.prefix``, reshaped to
``(1,) * axis + (len(rows),) + rest``, and indexed with ``plan.key``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorfile.core.slicing import plan
from tensorfile.errors import InvalidArgumentError

NDArray = np.ndarray[Any, Any]


def apply(arr: NDArray, key: Any, itemsize: int = 1) -> tuple[NDArray, list[int], bool]:
    """``arr[key]`` computed from the rows the plan reads; also the rows and ``dense``."""
    p = plan(arr.shape, key, itemsize)
    if not p.rows:
        return np.empty(p.result_shape, arr.dtype), p.rows, p.dense
    ndim = arr.ndim
    rest = arr.shape[p.axis + 1 :]
    row = math.prod(rest)
    flat = arr.reshape(-1)
    block = np.stack([flat[p.prefix + r * row : p.prefix + (r + 1) * row] for r in p.rows])
    block = block.reshape((len(p.rows), *rest))
    if p.axis < ndim:
        sub = block.reshape((1,) * p.axis + block.shape)
    else:
        sub = block.reshape((1,) * ndim)
    out = sub[(*p.key, Ellipsis)]
    assert out.shape == p.result_shape, (out.shape, p.result_shape)
    return out, p.rows, p.dense


@st.composite
def arrays_and_keys(draw: st.DrawFn) -> tuple[NDArray, Any]:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
    key = draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    return np.arange(math.prod(shape), dtype=np.int32).reshape(shape), key


@settings(max_examples=150, deadline=None)
@given(arrays_and_keys())
def test_plan_reproduces_numpy_basic_indexing(case: tuple[NDArray, Any]) -> None:
    arr, key = case
    want = arr[key]
    got, rows, dense = apply(arr, key)
    assert got.shape == want.shape
    assert np.array_equal(got, want)
    if dense and rows:
        assert rows == list(range(rows[0], rows[-1] + 1))
    assert rows == sorted(set(rows))


def test_only_the_bounding_rows_are_read() -> None:
    arr = np.arange(40).reshape(10, 4)
    p = plan(arr.shape, (slice(2, 5), 1))
    assert (p.axis, p.rows, p.dense) == (0, [2, 3, 4], True)
    assert p.result_shape == (3,)
    p = plan(arr.shape, (slice(7, 1, -2),))  # rows 7, 5, 3: bounded by 3..7
    assert p.rows == [3, 4, 5, 6, 7] and p.dense
    got, _, _ = apply(arr, (slice(7, 1, -2),))
    assert np.array_equal(got, arr[7:1:-2])


def test_leading_ints_narrow_the_read_to_one_block() -> None:
    arr = np.arange(2 * 3 * 5).reshape(2, 3, 5)
    p = plan(arr.shape, (1, slice(1, 3)))
    assert p.axis == 1
    assert p.prefix == 1 * 3 * 5  # the block arr[1], in elements
    assert p.rows == [1, 2]
    got, _, _ = apply(arr, (1, slice(1, 3)))
    assert np.array_equal(got, arr[1, 1:3])


def test_all_ints_read_one_element() -> None:
    arr = np.arange(24).reshape(2, 3, 4)
    p = plan(arr.shape, (1, -1, 2))
    assert p.axis == 3 and p.rows == [0]
    assert p.prefix == 1 * 12 + 2 * 4 + 2
    assert p.result_shape == ()


def test_a_large_step_reads_only_the_selected_rows() -> None:
    shape = (100, 20_000)  # float32 rows of 80,000 bytes: a step of 2 skips more than 64 KiB
    p = plan(shape, slice(None, None, 2), itemsize=4)
    assert not p.dense
    assert p.rows == list(range(0, 100, 2))
    p = plan(shape, slice(None, None, -3), itemsize=4)
    assert not p.dense and p.rows == sorted(range(99, -1, -3))
    arr = np.arange(100 * 5).reshape(100, 5)  # small rows: read densely
    assert plan(arr.shape, slice(None, None, 2), itemsize=4).dense
    got, rows, dense = apply(np.arange(12).reshape(6, 2), slice(None, None, -3), itemsize=40_000)
    assert not dense and rows == [2, 5]
    assert np.array_equal(got, np.arange(12).reshape(6, 2)[::-3])


def test_empty_selections_read_nothing() -> None:
    p = plan((10, 4), slice(5, 5))
    assert p.rows == [] and p.result_shape == (0, 4)
    p = plan((0, 3), (slice(None), 1))
    assert p.rows == [] and p.result_shape == (0,)


@pytest.mark.parametrize("key", [[0, 1], np.array([1, 2]), np.array([True] * 10), True, 1.5])
def test_advanced_indices_are_not_planned(key: Any) -> None:
    with pytest.raises(TypeError):
        plan((10, 4), key)


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ((Ellipsis, 0, Ellipsis), "ellipsis"),
        ((0, 0, 0), "too many indices"),
        (10, "out of range"),
        ((slice(None), -5), "out of range"),
    ],
)
def test_invalid_indices_are_invalid_argument_errors(key: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        plan((10, 4), key)
    assert issubclass(InvalidArgumentError, ValueError)
