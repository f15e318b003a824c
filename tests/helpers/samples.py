"""Sample values and how tests compare them: deterministic tensors of every safetensors
dtype, byte-exact array comparisons, dataset samples (rows), float bit patterns."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tensorfile.core import dtypes

NDArray = np.ndarray[Any, Any]

# Dtypes both tensorfile and the reference `safetensors.numpy` can read and write.
REFERENCE_NUMPY_DTYPES = [
    "BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "C64", "F64", "I64", "U64",
]  # fmt: skip
BYTE_DTYPES = [d.name for d in dtypes.ALL if not d.is_subbyte]
SUBBYTE_DTYPES = [d.name for d in dtypes.ALL if d.is_subbyte]


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> NDArray:
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


def assert_same(a: Any, b: Any) -> None:
    """Same dtype, shape and bytes (numpy scalars count as 0-d arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), (a, b)


def assert_same_array(got: Any, want: NDArray) -> None:
    """``got`` is a numpy array (not a scalar) with the dtype, shape and bytes of ``want``."""
    assert isinstance(got, np.ndarray), type(got)
    assert_same(got, want)


def expected_rows(columns: dict[str, NDArray], n: int) -> list[dict[str, NDArray]]:
    """The first ``n`` samples of a dict of column arrays."""
    return [{c: v[i] for c, v in columns.items()} for i in range(n)]


def assert_samples(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Two lists of samples are equal, column by column, dtype and bytes included."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert set(g) == set(w), (i, set(g), set(w))
        for c in w:
            if c == "key":
                assert g[c] == w[c], (i, g[c], w[c])
            else:
                assert_same(g[c], w[c])


def f32_bits(values: Any) -> NDArray:
    """float32 bit patterns."""
    return np.asarray(values, np.float32).view(np.uint32)


def bf16_nearest_even(values: Any) -> NDArray:
    """float32 -> BF16 bits, round to nearest, ties to even (finite inputs)."""
    bits = f32_bits(values).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_to_f32(bits: Any) -> NDArray:
    """BF16 bit patterns -> float32 values."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)


_ = ml_dtypes  # imported so that the ml_dtypes numpy types are registered
