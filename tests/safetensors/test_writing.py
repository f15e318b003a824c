"""Writing: byte-exact output, atomic replacement, streaming, arrays saved by value."""

from __future__ import annotations

import os
import stat
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.numpy as ref_np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.errors import InvalidArgumentError, SourceError, UnsupportedError
from tensorfile.safetensors import StreamWriter, serialize_file
from tensorfile.safetensors import numpy as tf_np
from tests.helpers.samples import REFERENCE_NUMPY_DTYPES, assert_same, sample


def test_strided_transposed_fortran_and_big_endian_saved_by_value(tmp_file: str) -> None:
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    tensors = {
        "transposed": base.T,
        "strided": base[::2, ::3],
        "fortran": np.asfortranarray(base),
        "big_endian": base.astype(">f4"),
        "negative_step": base[::-1],
    }
    tf_np.save_file(tensors, tmp_file)
    loaded = tf_np.load_file(tmp_file)
    for key, arr in tensors.items():
        np.testing.assert_array_equal(loaded[key], arr)
        assert loaded[key].dtype == np.float32
    # the reference writes the raw memory of such arrays: the values come back wrong
    wrong = ref_np.load(ref_np.save({"t": base.T}))["t"]
    assert not np.array_equal(wrong, base.T)


def test_file_mode_follows_the_umask(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    old = os.umask(0o022)
    try:
        tf_np.save_file({"a": np.zeros(1)}, path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # the reference makes 0600


def test_failed_write_leaves_the_original_intact(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    tf_np.save_file({"a": np.ones(4)}, path)
    original = open(path, "rb").read()
    with pytest.raises(UnsupportedError):
        tf_np.save_file({"a": np.ones(4), "b": np.array(["text"])}, path)
    with pytest.raises(RuntimeError, match="boom"):
        with StreamWriter(path, {"a": ("F64", (4,))}) as w:
            w.write("a", np.zeros(2))
            raise RuntimeError("boom")
    with pytest.raises(InvalidArgumentError, match="not completely written"):
        with StreamWriter(path, {"a": ("F64", (4,))}) as w:
            w.write("a", np.zeros(2))
    assert open(path, "rb").read() == original
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]  # no temporary files left


def test_write_into_missing_folder_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(SourceError, match="cannot write"):
        tf_np.save_file({"a": np.zeros(1)}, str(tmp_path / "no" / "such" / "m.safetensors"))
    with pytest.raises(SourceError, match="directory"):
        tf_np.save_file({"a": np.zeros(1)}, str(tmp_path))


def test_fsync_option_writes_the_same_bytes(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    tensors = {"x": np.arange(5, dtype=np.int16)}
    tf_np.save_file(tensors, a, fsync=True)
    tf_np.save_file(tensors, b)
    assert open(a, "rb").read() == open(b, "rb").read()


def test_stream_writer_matches_save_file_and_accepts_chunks(tmp_path: Any) -> None:
    tensors = {
        "emb": sample("F32", (64, 16), seed=1),
        "bias": sample("F16", (16,), seed=2),
        "ids": sample("I64", (7,), seed=3),
        "f4": sample("F4", (4, 2), seed=4),
        "empty": sample("U8", (0, 3), seed=5),
    }
    expected = str(tmp_path / "expected.safetensors")
    streamed = str(tmp_path / "streamed.safetensors")
    tf_np.save_file(tensors, expected, {"k": "v"})
    specs = {name: (str(arr.dtype), arr.shape) for name, arr in tensors.items()}
    specs["f4"] = ("F4", (4, 2))
    with StreamWriter(streamed, specs, {"k": "v"}) as w:
        for name in ["ids", "bias", "f4", "empty"]:  # any order of tensors
            w.write(name, tensors[name])
        for start in range(0, 64, 16):  # one tensor in chunks of rows
            w.write("emb", tensors["emb"][start : start + 16])
        assert w.missing() == []
    assert open(streamed, "rb").read() == open(expected, "rb").read()
    with pytest.raises(InvalidArgumentError, match="overflow"):
        with StreamWriter(streamed, {"a": ("U8", (2,))}) as w:
            w.write("a", b"abc")
    with pytest.raises(InvalidArgumentError, match="not declared"):
        with StreamWriter(streamed, {"a": ("U8", (2,))}) as w:
            w.write("b", b"ab")


def test_bad_arguments_are_clear_errors(tmp_file: str) -> None:
    with pytest.raises(InvalidArgumentError, match="strings to strings"):
        tf_np.save({"a": np.zeros(1)}, {"k": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="reserved"):
        tf_np.save({"__metadata__": np.zeros(1)})
    with pytest.raises(InvalidArgumentError, match="numpy array"):
        tf_np.save({"a": [1, 2, 3]})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="dict"):
        tf_np.save([("a", np.zeros(1))])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        serialize_file({"a": {"dtype": "F32", "shape": [2], "data": b"1234"}}, tmp_file)
    assert isinstance(InvalidArgumentError("x"), ValueError)


_names = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=12
).filter(lambda s: s != "__metadata__")
_meta = st.dictionaries(
    _names, st.text(alphabet=st.characters(blacklist_categories=["Cs"])), max_size=4
)


@st.composite
def _tensor_dicts(draw: Any) -> dict[str, np.ndarray]:
    names = draw(st.lists(_names, min_size=0, max_size=6, unique=True))
    out = {}
    for i, name in enumerate(names):
        dtype = draw(st.sampled_from(REFERENCE_NUMPY_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        out[name] = sample(dtype, shape, seed=i)
    return out


@settings(max_examples=150, deadline=None)
@given(_tensor_dicts(), st.one_of(st.none(), _meta))
def test_round_trip_and_reference_agree(tensors: dict[str, np.ndarray], meta: Any) -> None:
    ours = tf_np.save(tensors, meta)
    loaded = tf_np.load(ours)
    assert list(loaded) == sorted(tensors, key=lambda k: (-_order(tensors[k]), k))
    for key, arr in tensors.items():
        assert_same(loaded[key], arr)
    theirs = ref_np.save(tensors, meta)
    assert len(ours) == len(theirs)
    if (not meta or len(meta) == 1) and (tensors or meta is None):
        assert ours == theirs  # byte-identical when metadata order cannot differ
    flat = dict(safetensors.deserialize(ours))
    assert set(flat) == set(tensors)
    with_meta = tf_np.load(ours)
    assert set(with_meta) == set(tensors)


def _order(arr: np.ndarray) -> int:
    from tensorfile.core import dtypes

    return dtypes.from_numpy(arr.dtype).order


def test_empty_metadata_without_tensors_is_valid_unlike_the_reference() -> None:
    # safetensors 0.8.0 writes b'{},"__metadata__":{}}' here, which nothing can read back.
    broken = ref_np.save({}, {})
    with pytest.raises(safetensors.SafetensorError):
        safetensors.deserialize(broken)
    ours = tf_np.save({}, {})
    assert ours[8:].rstrip() == b'{"__metadata__":{}}'
    assert safetensors.deserialize(ours) == []
