"""No silent loss in convert: what a destination cannot keep (metadata in ``.npz``, values
that are not text, GGUF's value types, stored digests, zTensor v2 object attributes) is
said in the result's notes, and what is kept is checked with the real readers
(``numpy.load``, the reference safetensors, ztensor 2.1.2)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import safetensors
import safetensors.numpy

from tensorfile import ztensor
from tensorfile.ops import convert
from tests.ztensor import zt2

GGUF_TYPES = (
    "metadata: GGUF's value types are not kept ({} has none of its own: a uint32 and an int64 "
    "are both a number, a float32 is written as its shortest decimal)"
)


def _gguf(path: Path) -> None:
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_uint32("llama.context_length", 2048)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "hi"])
    w.add_tensor("w", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_npz_says_the_metadata_is_not_kept(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    safetensors.numpy.save_file({"w": w}, str(src), metadata={"format": "pt", "epoch": "3"})
    r = convert(src, tmp_path / "m.npz")
    assert r.notes == ("metadata: 2 keys not kept (npz holds no metadata): 'epoch', 'format'",)
    with np.load(tmp_path / "m.npz", allow_pickle=False) as kept:  # the real numpy reader
        assert kept.files == ["w"] and np.array_equal(kept["w"], w)
    r = convert(src, tmp_path / "w.npy")
    assert r.notes == ("metadata: 2 keys not kept (npy holds no metadata): 'epoch', 'format'",)
    assert np.array_equal(np.load(tmp_path / "w.npy", allow_pickle=False), w)


def test_gguf_metadata_losses_are_noted(tmp_path: Path) -> None:
    _gguf(tmp_path / "m.gguf")
    r = convert(tmp_path / "m.gguf", tmp_path / "m.safetensors")
    assert r.notes == (
        "metadata: 3 values not text, written as JSON text (safetensors holds text only): "
        "'llama.attention.layer_norm_rms_epsilon', 'llama.context_length', "
        "'tokenizer.ggml.tokens'",
        GGUF_TYPES.format("safetensors"),
    )
    with safetensors.safe_open(str(tmp_path / "m.safetensors"), "np") as f:
        assert f.metadata() == {
            "general.architecture": "llama",
            "llama.context_length": "2048",
            "llama.attention.layer_norm_rms_epsilon": "1e-05",
            "tokenizer.ggml.tokens": '["<s>", "hi"]',
        }
    r = convert(tmp_path / "m.gguf", tmp_path / "m.zt", to="zt2")
    assert r.notes == (GGUF_TYPES.format("zt2"),)
    assert zt2.read(tmp_path / "m.zt")["attributes"]["llama.context_length"] == 2048
    r = convert(tmp_path / "m.gguf", tmp_path / "m.npz")
    assert r.notes == (
        "metadata: 4 keys not kept (npz holds no metadata): 'general.architecture', "
        "'llama.attention.layer_norm_rms_epsilon', 'llama.context_length', "
        "'tokenizer.ggml.tokens'",
    )
    with np.load(tmp_path / "m.npz", allow_pickle=False) as kept:
        assert kept.files == ["w"]


def test_gguf_text_only_metadata_loses_nothing(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), arch="llama")
    w.add_tensor("w", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert convert(tmp_path / "t.gguf", tmp_path / "t.safetensors").notes == ()


def test_stored_digests_not_kept_are_noted(tmp_path: Path) -> None:
    arrays = {"a": np.ones(3, np.float32), "b": np.arange(4, dtype=np.int64)}
    ztensor.save_file(arrays, str(tmp_path / "m.zt"), checksum="crc32c")
    r = convert(tmp_path / "m.zt", tmp_path / "m.npz")
    assert r.notes == ("checksums: the source's digests are not kept (npz stores none): "
                       "crc32c (2 tensors)",)  # fmt: skip
    r = convert(tmp_path / "m.zt", tmp_path / "v2.zt", to="zt2")
    assert r.notes == (
        "checksums: the source's digests are not kept: crc32c (2 tensors); pass checksum= "
        "(--checksum) to have zt2 store its own",
    )
    assert zt2.read(tmp_path / "v2.zt")["verify"] == [0, 2]  # ztensor 2.1.2: none digested
    r = convert(tmp_path / "m.zt", tmp_path / "v2x.zt", to="zt2", checksum="xxh3")
    assert r.notes == ()
    assert zt2.read(tmp_path / "v2x.zt")["verify"] == [2, 0]


def test_object_attributes_not_kept_are_noted(tmp_path: Path) -> None:
    data = np.arange(4, dtype=np.float32)
    zt2.write(
        tmp_path / "o.zt",
        {
            "w": {"shape": [4], "parts": {"data": {"dtype": "f32", "bytes": data.tobytes()}},
                  "attributes": {"role": "embedding"}},
            "v": {"shape": [4], "parts": {"data": {"dtype": "f32", "bytes": data.tobytes()}}},
        },
    )  # fmt: skip
    r = convert(tmp_path / "o.zt", tmp_path / "o2.zt", to="zt2", checksum="xxh3")
    assert r.notes == (
        "object attributes: those of 1 tensor are not kept (convert writes file metadata "
        "only): 'w'",
    )
    assert [o.get("attributes") for o in zt2.read(tmp_path / "o2.zt")["objects"].values()] == [
        None,
        None,
    ]
