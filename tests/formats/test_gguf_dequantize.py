"""Quantized GGUF tensors in Python: named by their ggml type as the CLI names them, and
dequantized on request, checked against the ``gguf`` package (its writer and
``gguf.quants.dequantize``) as the oracle."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.errors import GGUFError, UnsupportedError
from tensorfile.formats.ggml import dequantize
from tensorfile.ops import convert, inspect
from tests.helpers.checkpoints import gguf_blob, gguf_tensor

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


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"])
def test_a_block_type_without_dimensions_is_refused_when_the_header_is_read(
    kind: str, tmp_path: Path
) -> None:
    """ggml's row of a 0-dim tensor is one element, not a block: llama.cpp refuses such a
    tensor. tensorfile used to open it, then give one value of a block (Q8_0, Q4_0) or
    crash in the gguf package (a raw ValueError; convert said "internal error")."""
    size = gguf.GGML_QUANT_SIZES[Q[kind]][1]
    path = tmp_path / "scalar.gguf"
    path.write_bytes(gguf_blob(tensors=[gguf_tensor("w", [], Q[kind].value)], data=bytes(size)))
    with pytest.raises(GGUFError, match=r"tensor 'w' is .* it has no dimensions") as caught:
        tensorfile.open(path)
    assert caught.value.tensor == "w"
    with pytest.raises(GGUFError, match="no dimensions"):
        convert(path, tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


def test_a_plain_type_without_dimensions_is_a_scalar(tmp_path: Path) -> None:
    path = tmp_path / "scalar.gguf"
    value = np.float32(2.5).tobytes()
    path.write_bytes(gguf_blob(tensors=[gguf_tensor("s", [], 0)], data=value + bytes(28)))
    with tensorfile.open(path) as r:
        assert r.get_tensor("s").shape == () and float(r.get_tensor("s")) == 2.5


@pytest.mark.parametrize("kind", ["q8_0", "q4_k"])
def test_dequantize_refuses_a_shape_that_is_not_rows_of_blocks(kind: str) -> None:
    with pytest.raises(UnsupportedError, match=r"shape \[\] is not rows of whole"):
        dequantize(np.zeros(144, np.uint8), kind, (), "w")


@pytest.mark.parametrize("kind", ["Q5_1", "Q2_K", "IQ2_XS"])  # (these draws warn)
def test_garbage_blocks_dequantize_as_ggml_does_without_numpy_warnings(
    kind: str, tmp_path: Path
) -> None:
    """Random bytes as blocks hold float16 scales that are inf or NaN: the values are what
    the gguf package makes of them, and numpy's "invalid value encountered" warnings stay
    inside (they used to reach the user)."""
    block, size = gguf.GGML_QUANT_SIZES[Q[kind]]
    raw = np.random.default_rng(0).integers(0, 256, (64, size), dtype=np.uint8)
    path = tmp_path / "garbage.gguf"
    _write(path, {"g": (raw, Q[kind])})
    with np.errstate(all="ignore"):
        want = gguf.quants.dequantize(raw, Q[kind])
    assert not np.isfinite(want).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tensorfile.open(path) as r:
            got = r.get_tensor("g", dequantize=True)
    assert got.shape == (64, block) and np.array_equal(got, want, equal_nan=True)
