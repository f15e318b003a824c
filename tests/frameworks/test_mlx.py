"""tensorfile.safetensors.mlx with mlx itself: mlx's own safetensors writer and reader as
oracles (both ways), bf16 (which the reference cannot save), and mlx's float64 rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tests.helpers.frameworks import lazy

mx = lazy("mlx.core")
st_mlx = pytest.importorskip("tensorfile.safetensors.mlx")


def _data() -> dict[str, Any]:
    mx.random.seed(0)
    return {
        "f32": mx.random.uniform(shape=(64, 32)),
        "bf16": mx.random.uniform(shape=(8, 8)).astype(mx.bfloat16),
        "c64": mx.random.uniform(shape=(8,)).astype(mx.complex64),
        "u64": mx.arange(5).astype(mx.uint64),
        "b": mx.array([True, False, True]),
        "empty": mx.zeros((2, 0), dtype=mx.int16),
        "scalar": mx.array(3.5, dtype=mx.float16),
    }


def _same(a: Any, b: Any) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert mx.array_equal(a, b).item()


def test_files_mlx_writes_load_here(tmp_path: Any) -> None:
    data = _data()
    path = str(tmp_path / "mx.safetensors")
    mx.save_safetensors(path, data, metadata={"k": "v"})
    loaded = st_mlx.load_file(path)
    assert set(loaded) == set(data)
    for k, v in data.items():
        _same(loaded[k], v)
    with safe_open(path, framework="mlx") as f:
        assert f.metadata() == {"k": "v"}
        _same(f.get_slice("f32")[3:9, ::4], data["f32"][3:9, ::4])


def test_files_written_here_load_in_mlx(tmp_path: Any) -> None:
    data = _data()
    path = str(tmp_path / "ours.safetensors")
    st_mlx.save_file(data, path, metadata={"k": "v"})
    loaded, metadata = mx.load(path, return_metadata=True)
    assert metadata == {"k": "v"}
    for k, v in data.items():
        _same(loaded[k], v)
    assert st_mlx.load(st_mlx.save(data)).keys() == data.keys()


def test_bfloat16_keeps_its_bits() -> None:
    x = mx.random.normal((4, 4)).astype(mx.bfloat16)
    back = st_mlx.load(st_mlx.save({"x": x}))["x"]
    assert back.dtype == mx.bfloat16
    assert np.asarray(back.view(mx.uint16)).tobytes() == np.asarray(x.view(mx.uint16)).tobytes()


def test_float64_saves_as_f64_and_loads_as_float32_as_in_the_reference() -> None:
    x = mx.array(np.array([0.1, 2.0]), dtype=mx.float64)
    blob = st_mlx.save({"x": x})
    assert blob == st_numpy.save({"x": np.array([0.1, 2.0])})
    back = st_mlx.load(blob)["x"]
    assert back.dtype == mx.float32  # mx.array of a float64 numpy array, as the reference
    assert back.tolist() == np.array([0.1, 2.0], np.float32).tolist()
