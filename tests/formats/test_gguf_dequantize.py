"""Quantized GGUF tensors in Python: named by their ggml type as the CLI names them, and
dequantized on request, checked against the ``gguf`` package (its writer and
``gguf.quants.dequantize``) as the oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.errors import UnsupportedError
from tensorfile.ops import inspect

Q = gguf.GGMLQuantizationType
SIMPLE = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # decoded by tensorfile itself


def _write(path: Path, tensors: dict[str, tuple[np.ndarray[Any, Any], Any]]) -> None:
    """A GGUF of ``name: (stored array, ggml type or None for a plain one)``."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    for name, (arr, qtype) in tensors.items():
        if qtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A GGUF with one tensor of each simple block type, a Q6_K one (any bytes with finite
    scales) and a plain one; with the oracle's float32 values of each."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((3, 64)).astype(np.float32)
    tensors: dict[str, tuple[np.ndarray[Any, Any], Any]] = {
        "plain": (values, None),
    }
    for kind in SIMPLE:
        tensors[kind.lower()] = (gguf.quants.quantize(values, Q[kind]), Q[kind])
    q6k = rng.integers(0, 256, (2, 210), dtype=np.uint8)
    q6k[:, 208:] = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)  # the block's scale d
    tensors["q6_k"] = (q6k, Q.Q6_K)
    path = tmp_path_factory.mktemp("gguf") / "q.gguf"
    _write(path, tensors)
    want = {"plain": values}
    for name, (arr, qtype) in tensors.items():
        if qtype is not None:
            want[name] = gguf.quants.dequantize(arr, qtype)
    return path, want


def test_quantized_tensors_name_their_type_as_the_cli_does(
    quantized: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = quantized
    found = inspect(str(path))
    listed = {t.name: found.dtype_of(t) for t in found.tensors}
    with tensorfile.open(path) as r:
        for kind in [*SIMPLE, "Q6_K"]:
            info = r.info(kind.lower())
            assert info.quantization == kind == listed[kind.lower()]
        assert r.info("plain").quantization is None


@pytest.mark.parametrize("kind", [*SIMPLE, "Q6_K"])
def test_dequantize_matches_the_gguf_package(
    quantized: tuple[Path, dict[str, Any]], kind: str
) -> None:
    path, want = quantized
    with tensorfile.open(path) as r:
        got = r.get_tensor(kind.lower(), dequantize=True)
    assert got.dtype == np.float32 and got.shape == want[kind.lower()].shape
    assert np.array_equal(got, want[kind.lower()])


def test_get_tensors_dequantizes_on_request(quantized: tuple[Path, dict[str, Any]]) -> None:
    path, want = quantized
    with tensorfile.open(path) as r:
        got = r.get_tensors(dequantize=True)
        assert list(got) == r.keys()
        assert np.array_equal(r.get_tensor("plain", dequantize=True), want["plain"])
    for name, arr in want.items():
        assert np.array_equal(got[name], arr), name


def test_a_plain_read_of_a_quantized_tensor_says_how(
    quantized: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = quantized
    with tensorfile.open(path) as r:
        for read in (r.get_tensor, r.view, lambda n: r.get_tensors([n])):
            with pytest.raises(UnsupportedError) as err:
                read("q8_0")
            assert str(err.value) == (
                "tensor 'q8_0' is quantized (Q8_0): get_tensor('q8_0', dequantize=True) "
                "returns it as float32"
            )
