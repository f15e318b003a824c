"""tensorfile.safetensors.flax with jax and flax: flax's own msgpack serialization as the
oracle (the reference's check), jax's 64-bit rule, and what only jax has (key arrays,
traced values, nested parameter trees)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorfile.errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import lazy, require

jax = lazy("jax")
jnp = lazy("jax.numpy")
st_flax = pytest.importorskip("tensorfile.safetensors.flax")


def _data() -> dict[str, Any]:
    key = jax.random.key(0)
    return {
        "f32": jax.random.normal(key, (64, 32), dtype=jnp.float32),
        "f16": jax.random.normal(key, (64, 32), dtype=jnp.float16),
        "bf16": jax.random.normal(key, (64, 32), dtype=jnp.bfloat16),
        "c64": jax.random.normal(key, (8,), dtype=jnp.complex64),
        "e4m3": jax.random.normal(key, (16,)).astype(jnp.float8_e4m3fn),
    }


def test_flax_msgpack_and_safetensors_agree(tmp_path: Any) -> None:
    serialization = require("flax.serialization")
    data = _data()
    restored = serialization.msgpack_restore(serialization.msgpack_serialize(data))
    st_flax.save_file(data, tmp_path / "m.safetensors")
    for loaded in (
        st_flax.load_file(tmp_path / "m.safetensors"),
        st_flax.load((tmp_path / "m.safetensors").read_bytes()),
    ):
        assert set(loaded) == set(restored)
        for k, v in loaded.items():
            assert isinstance(v, jax.Array)
            assert v.dtype == restored[k].dtype
            assert np.asarray(v).tobytes() == np.asarray(restored[k]).tobytes()


def test_the_jax_and_flax_names_are_one_framework(tmp_path: Any) -> None:
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file({"a": np.arange(4, dtype=np.int16)}, path)
    for name in ("jax", "flax", "JAX"):
        with safe_open(path, framework=name) as f:
            assert f.get_tensor("a").tolist() == [0, 1, 2, 3]


def test_64_bit_tensors_follow_jaxs_x64_setting(tmp_path: Any) -> None:
    arrays = {"f": np.array([0.1], np.float64), "i": np.array([2**40 + 5], np.int64)}
    path = str(tmp_path / "m.safetensors")
    st_numpy.save_file(arrays, path)
    with jax.enable_x64(False):  # the default: jax narrows every numpy input
        narrow = st_flax.load_file(path)
        assert (narrow["f"].dtype, narrow["i"].dtype) == (jnp.float32, jnp.int32)
        assert narrow["f"].tolist() == [np.float32(0.1)]
    with jax.enable_x64(True):
        wide = st_flax.load_file(path)
        assert (wide["f"].dtype, wide["i"].dtype) == (jnp.float64, jnp.int64)
        assert wide["i"].tolist() == [2**40 + 5]
        assert st_flax.save(wide) == st_numpy.save(arrays)


def test_numpy_arrays_save_as_in_the_reference() -> None:
    arrays = {"a": np.arange(3, dtype=np.uint16), "s": np.float32(2.5)}
    assert st_flax.save(arrays) == st_numpy.save(arrays)


def test_key_arrays_have_no_safetensors_dtype() -> None:
    with pytest.raises(UnsupportedError, match=r"tensor 'k': jax dtype key<fry>"):
        st_flax.save({"k": jax.random.key(0)})
    # their data can be saved
    assert st_flax.save({"k": jax.random.key_data(jax.random.key(0))})


def test_a_traced_value_has_no_values_to_save() -> None:
    @jax.jit
    def inside(x: Any) -> Any:
        st_flax.save({"x": x})
        return x

    with pytest.raises(InvalidArgumentError, match="jax cannot give its values"):
        inside(jnp.ones(2))


def test_nested_parameters_are_refused_with_a_hint() -> None:
    traverse_util = require("flax.traverse_util")
    params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.zeros(2)}}
    with pytest.raises(InvalidTypeError, match="flatten_dict"):
        st_flax.save(params)
    flat = traverse_util.flatten_dict(params, sep=".")
    assert set(st_flax.load(st_flax.save(flat))) == {"dense.kernel", "dense.bias"}
