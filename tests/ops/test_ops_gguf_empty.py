"""A valid GGUF file with an empty quantized tensor (Q8_0 of shape (0, 32)) opens, and
convert writes it as an empty F32 tensor to every destination (it said "cannot reshape")."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.ops import content_hash, convert, verify


@pytest.fixture
def empty_quantized(tmp_path: Path) -> Path:
    path = tmp_path / "e.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    q = gguf.quants.quantize(np.zeros((0, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("f", np.ones(3, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("dst", ["o.safetensors", "o.zt", "o2.zt", "o.npz"])
def test_an_empty_quantized_tensor_converts_to_every_destination(
    empty_quantized: Path, tmp_path: Path, dst: str
) -> None:
    out = tmp_path / dst
    r = convert(str(empty_quantized), str(out), to="zt2" if dst == "o2.zt" else None)
    assert r.tensors == 2
    with tensorfile.open(str(out)) as f:
        assert f.info("q").shape == (0, 32) and f.get_tensor("q").dtype == np.float32
        assert f.get_tensor("f").tolist() == [1.0, 1.0, 1.0]
    assert verify(str(out)).ok
    ref = tmp_path / "ref.safetensors"
    convert(str(empty_quantized), str(ref))
    assert content_hash(str(out)) == content_hash(str(ref))  # dequantized: one content


def test_the_empty_quantized_gguf_itself_verifies_and_hashes(empty_quantized: Path) -> None:
    report = verify(str(empty_quantized))  # quantized blocks: their stored bytes are read
    assert report.ok and report.tensors_checked == 2
    assert len(content_hash(str(empty_quantized))) == 64


def test_verify_reads_the_blocks_of_quantized_tensors(tmp_path: Path) -> None:
    """verify used to raise UnsupportedError on any quantized GGUF tensor (get_tensor cannot
    hold blocks): it reads their stored bytes instead."""
    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for kind in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        q = gguf.quants.quantize(np.ones((4, 64), np.float32), kind)
        w.add_tensor(kind.name.lower(), q, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    report = verify(str(path), deep=True)
    assert report.ok and report.tensors_checked == 2
