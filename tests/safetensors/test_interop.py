"""Interop with the reference `safetensors==0.8.0`, both ways, byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors
import safetensors.numpy as ref_np

import tensorfile
from tensorfile.safetensors import deserialize, safe_open, serialize
from tensorfile.safetensors import numpy as tf_np
from tests.helpers.samples import BYTE_DTYPES, REFERENCE_NUMPY_DTYPES, assert_same, sample

SHAPES = [(), (0,), (3,), (2, 0, 3), (4, 5), (2, 3, 4)]


def _tensors(names: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for i, name in enumerate(names):
        for j, shape in enumerate(SHAPES):
            out[f"{name.lower()}.{j}"] = sample(name, shape, seed=i * 10 + j)
    return out


@pytest.mark.parametrize("name", REFERENCE_NUMPY_DTYPES)
def test_bytes_identical_to_reference(name: str) -> None:
    tensors = _tensors([name])
    assert tf_np.save(tensors) == ref_np.save(tensors)


def test_mixed_dtypes_and_metadata_identical_to_reference() -> None:
    tensors = _tensors(REFERENCE_NUMPY_DTYPES)
    metadata = {"format": "np", "zeta": "1", "alpha": 'é ü \n \t " \\ \x01 \x7f 😀'}
    ours = tf_np.save(tensors, metadata)
    # the reference writes metadata keys in hash order; decode both and compare everything
    theirs = ref_np.save(tensors, metadata)
    assert len(ours) == len(theirs)
    assert dict(safetensors.deserialize(ours)) == dict(safetensors.deserialize(theirs))

    # Everything but the order of metadata keys is byte-identical, escapes included.
    def split(blob: bytes) -> tuple[bytes, dict[str, str], bytes]:
        head = blob[8 : 8 + int.from_bytes(blob[:8], "little")]
        meta_end = head.index(b"}") + 1  # metadata values here contain no '}'
        return head[meta_end:], json.loads(head[16:meta_end]), blob[8 + len(head) :]

    assert split(ours) == split(theirs)
    assert ours[8:].startswith(b'{"__metadata__":{"alpha":"')


def test_metadata_keys_are_written_sorted(tmp_file: str) -> None:
    tf_np.save_file({"a": np.zeros(1)}, tmp_file, {"b": "2", "a": "1", "c": "3"})
    raw = open(tmp_file, "rb").read()
    assert b'{"__metadata__":{"a":"1","b":"2","c":"3"}' in raw


@pytest.mark.parametrize("name", REFERENCE_NUMPY_DTYPES)
def test_reference_files_load_in_tensorfile(tmp_file: str, name: str) -> None:
    tensors = _tensors([name])
    ref_np.save_file(tensors, tmp_file, metadata={"k": "v"})
    loaded = tf_np.load_file(tmp_file)
    assert list(loaded) == [k for k in safe_open(tmp_file, "np").offset_keys()]
    for key, arr in tensors.items():
        assert_same(loaded[key], arr)
        assert loaded[key].flags.writeable and loaded[key].flags.owndata
    with safe_open(tmp_file, "np") as f, safetensors.safe_open(tmp_file, "np") as g:
        assert f.keys() == g.keys()
        assert f.offset_keys() == g.offset_keys()
        assert f.metadata() == g.metadata() == {"k": "v"}


@pytest.mark.parametrize("name", BYTE_DTYPES)
def test_tensorfile_files_load_in_reference(tmp_file: str, name: str) -> None:
    tensors = _tensors([name])
    tf_np.save_file(tensors, tmp_file)
    # the reference numpy module lacks bf16/f8; read its raw bytes through deserialize
    flat = dict(safetensors.deserialize(open(tmp_file, "rb").read()))
    for key, arr in tensors.items():
        assert flat[key]["dtype"] == name
        assert flat[key]["shape"] == list(arr.shape)
        assert bytes(flat[key]["data"]) == np.ascontiguousarray(arr).tobytes()
    if name in REFERENCE_NUMPY_DTYPES:
        ref = ref_np.load_file(tmp_file)
        for key, arr in tensors.items():
            assert_same(ref[key], arr)


def test_no_tensors_and_metadata_only() -> None:
    assert tf_np.save({}) == ref_np.save({})
    blob = tf_np.save({}, {"a": "b"})
    assert safetensors.deserialize(blob) == []
    assert tf_np.load(blob) == {}
    assert tensorfile.open(blob).metadata == {"a": "b"}


def test_deserialize_matches_reference() -> None:
    tensors = _tensors(["F32", "U8", "BOOL"])
    blob = ref_np.save(tensors)
    ours = deserialize(blob)
    # the reference lists tensors in hash order; tensorfile in file order
    assert dict(ours) == dict(safetensors.deserialize(blob))
    with safe_open_ref(blob) as names:
        assert [k for k, _ in ours] == names


class safe_open_ref:
    """The reference's offset_keys() of in-memory bytes (through a temporary file)."""

    def __init__(self, blob: bytes) -> None:
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        self.path = f"{self._dir.name}/x.safetensors"
        open(self.path, "wb").write(blob)

    def __enter__(self) -> list[str]:
        with safetensors.safe_open(self.path, "np") as f:
            return list(f.offset_keys())

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()


def test_serialize_accepts_reference_tensorspecs_and_dicts() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    spec = tensorfile.safetensors.TensorSpec(
        dtype="float32", shape=[2, 3], data_ptr=x.ctypes.data, data_len=x.nbytes
    )
    ref_spec = safetensors.TensorSpec(
        dtype="float32", shape=[2, 3], data_ptr=x.ctypes.data, data_len=x.nbytes
    )
    expected = bytes(safetensors.serialize({"x": ref_spec}))
    assert serialize({"x": spec}) == expected
    assert serialize({"x": {"dtype": "F32", "shape": [2, 3], "data": x.tobytes()}}) == expected


def test_tensor_order_is_the_references(tmp_file: str) -> None:
    tensors = {
        "b_u8": np.zeros(3, np.uint8),
        "a_u8": np.zeros(3, np.uint8),
        "z_f64": np.zeros(1, np.float64),
        "c_i64": np.zeros(1, np.int64),
        "m_bool": np.zeros(1, bool),
        "k_f16": np.zeros(1, np.float16),
    }
    tf_np.save_file(tensors, tmp_file)
    with safe_open(tmp_file, "np") as f:
        # widest types first (by the reference enumeration, descending), then by name
        assert f.offset_keys() == ["c_i64", "z_f64", "k_f16", "a_u8", "b_u8", "m_bool"]
    assert open(tmp_file, "rb").read() == ref_np.save(tensors)
