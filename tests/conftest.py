"""Shared fixtures: sample tensors of every dtype, built with numpy and ml_dtypes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensorfile import dtypes

# Dtypes both tensorfile and the reference `safetensors.numpy` can read and write.
REFERENCE_NUMPY_DTYPES = [
    "BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "C64", "F64", "I64", "U64",
]  # fmt: skip
BYTE_DTYPES = [d.name for d in dtypes.ALL if not d.is_subbyte]
SUBBYTE_DTYPES = [d.name for d in dtypes.ALL if d.is_subbyte]


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """A deterministic array of safetensors dtype ``name`` (every bit pattern is fine)."""
    dt = dtypes.from_safetensors(name)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.is_subbyte:
        codes = rng.integers(0, 1 << dt.bits, size=n, dtype=np.uint8)
        return codes.view(dt.numpy).reshape(shape)
    if dt.kind in ("float", "complex") and dt.numpy_name in ("float16", "float32", "float64"):
        return np.asarray(rng.standard_normal(size=shape)).astype(dt.numpy)
    if dt.kind == "complex":
        re, im = rng.standard_normal(size=shape), rng.standard_normal(size=shape)
        return np.asarray(re + 1j * im).astype(dt.numpy)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    arr = raw.view(dt.numpy).reshape(shape)
    if dt.numpy_name.startswith("float8") or dt.numpy_name == "bfloat16":
        # avoid NaN payloads so that == comparisons are meaningful
        arr = np.where(np.isnan(arr.astype(np.float32)), np.zeros((), dt.numpy), arr)
    return arr


def assert_same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    """Same dtype, shape and bytes."""
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.fixture
def tmp_file(tmp_path: Any) -> str:
    return str(tmp_path / "model.safetensors")


_ = ml_dtypes  # imported so that the ml_dtypes numpy types are registered
