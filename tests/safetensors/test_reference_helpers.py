"""What code in the wild imports from the reference beyond its four functions: the torch
module's underscore helpers, ``safetensors._safe_open_handle``, the exact words and types of
its exceptions, and its ``get_slice`` rules. The real ``safetensors`` package is the oracle
throughout."""

from __future__ import annotations

import io
import os
from typing import Any

import fsspec
import numpy as np
import pytest
import safetensors as ref
import safetensors.torch as ref_torch
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorfile.safetensors as ours
import tensorfile.safetensors.torch as ours_torch
from tensorfile.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SafetensorError,
    SafetensorIOError,
    SafetensorSliceError,
    SharedTensorsError,
    TensorFileError,
)
from tensorfile.safetensors.numpy import save, save_file

# ---------------------------------------------------------------- state dicts to compare on


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.b = self.a


class _Copy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(100, 100)
        self.b = torch.nn.Linear(100, 100)


def _state_dicts() -> dict[str, dict[str, torch.Tensor]]:
    w = torch.zeros((3, 3))
    big = torch.arange(20.0)
    return {
        "tied": _Tied().state_dict(),
        "copy": _Copy().state_dict(),
        "slices": {"A": w, "B": w[:1, :], "C": w},
        "overlap": {"x": big[:10], "y": big[5:15], "z": big[15:]},
        "disjoint views": {"lo": big[:10], "hi": big[10:]},
        "alone incomplete": {"B": w[:1, :]},
        "empty and scalar": {"e": torch.zeros(0), "s": torch.tensor(3.0)},
        "meta": {"m": torch.zeros(4, device="meta"), "n": torch.ones(2)},
    }


@pytest.mark.parametrize("case", list(_state_dicts()))
def test_find_shared_tensors_matches_the_reference(case: str) -> None:
    sd = _state_dicts()[case]
    assert ours_torch._find_shared_tensors(sd) == ref_torch._find_shared_tensors(sd)


@pytest.mark.parametrize("case", list(_state_dicts()))
def test_is_complete_and_end_ptr_match_the_reference(case: str) -> None:
    for t in _state_dicts()[case].values():
        if t.device.type == "meta":
            continue
        assert ours_torch._is_complete(t) == ref_torch._is_complete(t)
        assert ours_torch._end_ptr(t) == ref_torch._end_ptr(t)


@pytest.mark.parametrize("case", list(_state_dicts()))
@pytest.mark.parametrize(
    "options",
    [{}, {"preferred_names": ["b.weight", "C"]}, {"discard_names": ["a.weight", "A"]}],
)
def test_remove_duplicate_names_matches_the_reference(case: str, options: Any) -> None:
    sd = _state_dicts()[case]
    outcomes = []
    for module in (ref_torch, ours_torch):
        try:
            outcomes.append(dict(module._remove_duplicate_names(sd, **options)))
        except RuntimeError as exc:  # no name covers a whole storage
            outcomes.append("None is covering the entire storage" in str(exc))
    assert outcomes[0] == outcomes[1]
    if outcomes[1] is True:
        with pytest.raises(SharedTensorsError):
            ours_torch._remove_duplicate_names(sd, **options)


def test_load_model_error_is_worded_as_the_reference(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    ours_torch.save_model(_Tied(), path)
    messages = []
    for module in (ours_torch, ref_torch):
        with pytest.raises(RuntimeError) as info:
            module.load_model(_Copy(), path)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_save_model_without_force_contiguous_says_how(tmp_path: Any) -> None:
    class Strided(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4, 6).t())

    path = str(tmp_path / "s.safetensors")
    for module in (ours_torch, ref_torch):
        with pytest.raises(ValueError, match=r"use save_model\(\.\.\., force_contiguous=True\)"):
            module.save_model(Strided(), path, force_contiguous=False)
    assert not os.path.exists(path)
    ours_torch.save_model(Strided(), path)
    assert ref_torch.load_file(path)["w"].shape == (6, 4)


# ---------------------------------------------------------------- the reference's exceptions


def test_exceptions_have_the_reference_types_and_words(tmp_path: Any) -> None:
    sparse = {"test": torch.sparse_coo_tensor(size=(2, 3))}
    meta = {"test": torch.zeros((10, 10), device="meta")}
    target = str(tmp_path / "x.safetensors")
    for data, kind in ((sparse, ValueError), (meta, RuntimeError)):
        with pytest.raises(kind) as theirs:
            ref_torch.save_file(data, target)
        with pytest.raises(kind) as mine:
            ours_torch.save_file(data, target)
        assert isinstance(mine.value, TensorFileError)
        if kind is ValueError:
            assert str(mine.value) == str(theirs.value)
        assert "Cannot copy out of meta tensor" in str(theirs.value) or kind is ValueError
        if kind is RuntimeError:
            assert "Cannot copy out of meta tensor" in str(mine.value)
    with pytest.raises(SafetensorError):
        ours.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    bad = {"test": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}}
    for module in (ours, ref):
        with pytest.raises(TypeError):
            module.serialize(bad)
    with pytest.raises(InvalidTypeError):
        ours.serialize(bad)
    for data in ([1, 2], "not a dict"):
        with pytest.raises(TypeError):
            ours_torch.save(data)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ours_torch.save({"x": [1, 2]})  # type: ignore[dict-item]


def test_a_missing_file_is_a_file_not_found_error_in_the_reference_words() -> None:
    for module in (ours, ref):
        with pytest.raises(FileNotFoundError) as info:
            module.safe_open("notafile", framework="np")
        assert str(info.value) == "No such file or directory: notafile"
    with pytest.raises(SafetensorIOError):
        ours.safe_open("notafile", framework="np")


# ---------------------------------------------------------------- _safe_open_handle


def _sample() -> dict[str, np.ndarray[Any, Any]]:
    return {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.uint8)}


def _read_all(handle: Any) -> dict[str, Any]:
    with handle as g:
        return {k: g.get_tensor(k) for k in g.keys()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("mode", ["r", "rb", "r+b"])
def test_safe_open_handle_over_an_open_file_matches_the_reference(tmp_path: Any, mode: str) -> None:
    path = str(tmp_path / "h.safetensors")
    save_file(_sample(), path, {"k": "v"})
    with open(path, mode) as f:
        mine = _read_all(ours._safe_open_handle(f, framework="np", device="cpu"))
        with ours._safe_open_handle(f, framework="np") as g:
            assert g.metadata() == {"k": "v"}
            assert g.offset_keys() == ["a", "b"]
            assert g.get_slice("a")[1, 1:].tolist() == [4.0, 5.0]
        assert not f.closed  # the object stays the caller's
        theirs = _read_all(ref._safe_open_handle(f, framework="np", device="cpu"))
    _same(mine, theirs)
    _same(mine, _sample())


def test_safe_open_handle_reads_fsspec_files_with_and_without_a_descriptor(tmp_path: Any) -> None:
    blob = save(_sample())
    local = fsspec.filesystem("file")
    path = str(tmp_path / "fs.safetensors")
    with local.open(path, "wb") as f:
        f.write(blob)
    with local.open(path, "rb") as f:
        _same(_read_all(ours._safe_open_handle(f, framework="np")), _sample())
    memory = fsspec.filesystem("memory")
    memory.pipe("/handle/fs.safetensors", blob)
    with memory.open("/handle/fs.safetensors", "rb") as f:  # no OS file behind it
        f.seek(5)
        _same(_read_all(ours._safe_open_handle(f, framework="pt")), _sample())
        assert f.tell() == 5  # put back where it was
    _same(_read_all(ours._safe_open_handle(io.BytesIO(blob), framework="np")), _sample())


class _Lying(io.RawIOBase):
    """A file object that claims ``size`` bytes and hands out ``data``, ``chunk`` at a time
    (more than asked when ``extra``)."""

    def __init__(self, data: bytes, size: int, chunk: int = 1 << 20, extra: bool = False):
        self._data, self._size, self._chunk, self._extra = data, size, chunk, extra
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = self._size if whence == io.SEEK_END else pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        stop = self._pos + (n + 64 if self._extra else min(n, self._chunk))
        out = self._data[self._pos : stop]
        self._pos += len(out)
        return out


def test_safe_open_handle_against_hostile_file_objects() -> None:
    blob = save(_sample())
    # short reads are fine; reads that give more than asked are cut to what was asked
    _same(_read_all(ours._safe_open_handle(_Lying(blob, len(blob), chunk=3), "np")), _sample())
    _same(_read_all(ours._safe_open_handle(_Lying(blob, len(blob), extra=True), "np")), _sample())
    # a size the object only claims: the header's offsets fail, nothing is allocated for it
    with pytest.raises(SafetensorError):
        ours._safe_open_handle(_Lying(blob, 1 << 60), "np")
    # a file that shrinks under the reader
    lying = _Lying(blob[:-4], len(blob))
    with pytest.raises(SafetensorIOError, match="ended at offset"):
        _read_all(ours._safe_open_handle(lying, "np"))
    with pytest.raises(InvalidTypeError, match="text mode"):
        ours._safe_open_handle(io.StringIO("x" * 100), "np")
    for thing in (42, None, b"bytes are no file object", object()):
        with pytest.raises(TypeError):
            ours._safe_open_handle(thing, "np")
    closed = io.BytesIO(blob)
    closed.close()
    with pytest.raises(SafetensorIOError, match="closed"):
        ours._safe_open_handle(closed, "np")
    with pytest.raises(InvalidArgumentError, match="backend"):
        ours._safe_open_handle(io.BytesIO(blob), "np", backend="nonsense")


def test_safe_open_handle_refuses_a_descriptor_that_is_no_regular_file() -> None:
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb", closefd=False) as pipe:
            with pytest.raises(SafetensorIOError, match="FIFO"):
                ours._safe_open_handle(pipe, "np")
    finally:
        os.close(read_end)
        os.close(write_end)


# ---------------------------------------------------------------- get_slice's rules

_SHAPE = (10, 5)

_index = st.one_of(
    st.integers(-12, 12),
    st.builds(
        slice,
        st.none() | st.integers(0, 12),
        st.none() | st.integers(0, 12),
    ),
)


def _outcome(module: Any, path: str, key: Any) -> tuple[str, Any]:
    with module.safe_open(path, framework="np") as f:
        try:
            return "ok", f.get_slice("a")[key].tolist()
        except Exception as exc:  # the reference raises its own SafetensorError
            return "error", str(exc)


@pytest.fixture(scope="module")
def slice_file(tmp_path_factory: Any) -> str:
    path = str(tmp_path_factory.mktemp("slices") / "a.safetensors")
    save_file({"a": np.arange(50, dtype=np.int32).reshape(_SHAPE)}, path)
    return path


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(_index, st.tuples(_index), st.tuples(_index, _index)))
def test_get_slice_refuses_and_reads_exactly_as_the_reference(slice_file: str, key: Any) -> None:
    if any(
        isinstance(k, slice) and k.start is not None and k.stop is not None and k.start > k.stop
        for k in (key if isinstance(key, tuple) else (key,))
    ):
        return  # the reference cannot take a slice that runs backwards (its Rust panics)
    assert _outcome(ours, slice_file, key) == _outcome(ref, slice_file, key)


@pytest.mark.parametrize("key", [[], [0, 1], (slice(2, None), -6), (slice(None), slice(None, 20))])
def test_get_slice_known_answers(slice_file: str, key: Any) -> None:
    assert _outcome(ours, slice_file, key) == _outcome(ref, slice_file, key)
    if _outcome(ours, slice_file, key)[0] == "error":
        with ours.safe_open(slice_file, framework="np") as f, pytest.raises(SafetensorSliceError):
            f.get_slice("a")[key]


def test_get_slice_beyond_the_reference_keeps_numpy_rules(slice_file: str) -> None:
    full = np.arange(50, dtype=np.int32).reshape(_SHAPE)
    with ours.safe_open(slice_file, framework="np") as f:
        s = f.get_slice("a")
        np.testing.assert_array_equal(s[::3, None, -2:], full[::3, None, -2:])
        np.testing.assert_array_equal(s[..., 1], full[..., 1])
        with pytest.raises(SafetensorSliceError, match="too many indices"):
            s[1, 2, 3]
