"""tensorfile.safetensors.tensorflow with tensorflow itself: what only tensorflow has
(variables, string, sparse and ragged tensors, graph tensors), and h5py, the reference's
own oracle for tensorflow weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorfile.errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import lazy, require

tf = lazy("tensorflow")
st_tf = pytest.importorskip("tensorfile.safetensors.tensorflow")


def test_variables_save_like_tensors() -> None:
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    assert st_tf.save({"v": v}) == st_tf.save({"v": tf.constant([[1.0, 2.0], [3.0, 4.0]])})


def test_tensors_without_a_safetensors_dtype_are_refused_by_name() -> None:
    for t, name in [
        (tf.constant(["a", "b"]), "string"),
        (tf.constant([1 + 2j], dtype=tf.complex128), "complex128"),
        (tf.constant([1], dtype=tf.qint8), "qint8"),
    ]:
        with pytest.raises(UnsupportedError, match=f"tensor 'x': tensorflow dtype {name}"):
            st_tf.save({"x": t})


def test_sparse_and_ragged_tensors_are_refused_with_a_hint() -> None:
    for t in (tf.sparse.from_dense([[1, 0]]), tf.ragged.constant([[1], [1, 2]])):
        with pytest.raises(InvalidTypeError, match="make it dense first"):
            st_tf.save({"x": t})


def test_a_graph_tensor_has_no_values_to_save() -> None:
    @tf.function(autograph=False)  # (autograph would wrap the error in its own)
    def inside(x: Any) -> Any:
        st_tf.save({"x": x})
        return x

    with pytest.raises(InvalidArgumentError, match="tensorflow cannot give its values"):
        inside(tf.ones(2))


def test_bfloat16_and_float8_keep_their_bits(tmp_path: Any) -> None:
    data = {
        "bf16": tf.random.normal((64, 64), dtype=tf.bfloat16),
        "e4m3": tf.cast(tf.random.normal((8,)), tf.dtypes.experimental.float8_e4m3fn),
    }
    path = str(tmp_path / "m.safetensors")
    st_tf.save_file(data, path)
    with safe_open(path, framework="tf") as f:
        for k, v in data.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype
            assert got.numpy().tobytes() == v.numpy().tobytes()


def test_h5py_weights_equal_safetensors_weights(tmp_path: Any) -> None:
    """The reference's check: the same weights through h5py and through safetensors."""
    h5py = require("h5py")
    data = {
        "w": tf.random.normal((32, 16)),
        "c": tf.complex(tf.random.normal((4,)), tf.random.normal((4,))),
        "i": tf.range(10, dtype=tf.int64),
    }
    with h5py.File(tmp_path / "w.h5", "w") as f:
        for k, v in data.items():
            f.create_dataset(k, data=v.numpy())
    st_tf.save_file(data, tmp_path / "w.safetensors")
    loaded = st_tf.load_file(tmp_path / "w.safetensors")
    with h5py.File(tmp_path / "w.h5", "r") as f:
        for k in data:
            assert loaded[k].dtype == tf.as_dtype(f[k].dtype)
            np.testing.assert_array_equal(loaded[k].numpy(), np.array(f[k]))
