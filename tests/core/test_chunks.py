"""Chunks of streamed tensors are checked against the declared shape and dtype, in both
streaming writers, and a refused chunk leaves no file behind."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile import ztensor
from tensorfile.core.chunks import check_chunk
from tensorfile.errors import InvalidArgumentError
from tensorfile.safetensors import StreamWriter, safe_open

GOOD = [(2, 4), (4, 4), (1, 4), (8,), (16,), (3,), ()]
BAD = [(8, 2), (2, 3), (1, 1, 4, 4), (2, 2, 2), (16, 1)]


def _write_safetensors(path: str, chunks: list[Any]) -> None:
    with StreamWriter(path, {"w": ("F32", (4, 4))}) as w:
        for c in chunks:
            w.write("w", c)


def _write_ztensor(path: str, chunks: list[Any]) -> None:
    with ztensor.Writer(path) as w:
        w.add_stream("w", "float32", (4, 4), chunks)


WRITERS = {"safetensors": _write_safetensors, "ztensor": _write_ztensor}


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("shape", BAD, ids=str)
def test_a_chunk_of_the_wrong_shape_is_refused_by_number(
    tmp_path: Any, writer: str, shape: Any
) -> None:
    path = str(tmp_path / "out")
    first = np.zeros((1, 4), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"chunk 1 has shape"):
        WRITERS[writer](path, [first, np.zeros(shape, np.float32)])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_chunk_of_the_wrong_dtype_is_refused_by_number(tmp_path: Any, writer: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"chunk 0 is an array of float64"):
        WRITERS[writer](str(tmp_path / "out"), [np.zeros((4, 4), np.float64)])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer", list(WRITERS))
def test_rows_must_start_on_a_row(tmp_path: Any, writer: str) -> None:
    with pytest.raises(InvalidArgumentError, match="end inside such a row"):
        WRITERS[writer](
            str(tmp_path / "out"), [np.zeros(3, np.float32), np.zeros((1, 4), np.float32)]
        )
    assert os.listdir(tmp_path) == []


def test_an_incomplete_tensor_says_how_much_is_missing(tmp_path: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"1 tensor was not.*32 of 64"):
        _write_safetensors(str(tmp_path / "out"), [np.zeros((2, 4), np.float32)])


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.sampled_from(["row", "flat"]), min_size=1, max_size=6))
def test_any_mix_of_whole_rows_and_flat_runs_writes_the_tensor(
    tmp_path_factory: Any, cuts: list[str]
) -> None:
    full = np.arange(16, dtype=np.float32).reshape(4, 4)
    flat = full.reshape(-1)
    chunks, pos = [], 0
    for cut in cuts:
        if pos >= 16:
            break
        if cut == "row" and pos % 4 == 0:
            chunks.append(full[pos // 4 : pos // 4 + 1])
            pos += 4
        else:
            chunks.append(flat[pos : pos + 3])
            pos = min(16, pos + 3)
    if pos < 16:
        chunks.append(flat[pos:])
    folder = tmp_path_factory.mktemp("mix")
    _write_safetensors(str(folder / "a.safetensors"), chunks)
    _write_ztensor(str(folder / "a.zt"), chunks)
    with safe_open(str(folder / "a.safetensors"), framework="np") as f:
        np.testing.assert_array_equal(f.get_tensor("w"), full)
    np.testing.assert_array_equal(ztensor.load_file(str(folder / "a.zt"))["w"], full)


@pytest.mark.parametrize("shape", GOOD, ids=str)
def test_check_chunk_accepts_sub_blocks(shape: Any) -> None:
    check_chunk("w", (4, 4), shape, index=0, done=0)
