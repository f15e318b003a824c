"""A GGUF converted to zTensor v2 by ztensor 2.1.2 (``ztensor.convert``): its quantized
tensors are objects of layout ``gguf.<type>/1`` (one ``u8`` part holding the GGUF's blocks,
the shape in elements). tensorfile reads them as it reads the GGUF's quantized tensors:
the same type and byte length in ``inspect`` and ``diff``, the same content id, and
``convert`` dequantizes them as it does the GGUF's."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.errors import FormatError, UnsupportedError
from tensorfile.ops import content_hash, convert, diff, inspect, verify
from tensorfile.safetensors.numpy import load_file
from tests.ztensor import zt2

Q8_0 = gguf.GGMLQuantizationType.Q8_0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    """A GGUF (a Q8_0 and a plain tensor), the zTensor v2 file ztensor 2.1.2 makes of it,
    and the Q8_0 tensor's values as the gguf package dequantizes them."""
    d = tmp_path_factory.mktemp("zt2gguf")
    values = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(32, 128)
    q = gguf.quants.quantize(values, Q8_0)
    w = gguf.GGUFWriter(str(d / "m.gguf"), arch="llama")
    w.add_tensor("plain", np.ones((8, 4), np.float32))
    w.add_tensor("q", q, raw_dtype=Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    zt2.convert(d / "m.gguf", d / "m.zt")
    return d / "m.gguf", d / "m.zt", gguf.quants.dequantize(q, Q8_0)


def test_ztensor_writes_the_blocks_as_a_gguf_layout(files: tuple[Path, Path, np.ndarray]) -> None:
    _, zt, _ = files
    obj = zt2.read(zt)["objects"]["q"]
    assert obj["layout"] == "gguf.q8_0/1" and obj["shape"] == [32, 128]
    assert obj["parts"]["data"]["dtype"] == "u8" and obj["parts"]["data"]["bytes"].size == 4352


def test_read_as_the_gguf_is(files: tuple[Path, Path, np.ndarray]) -> None:
    src, zt, want = files
    with tensorfile.open(zt) as r:
        info = r.info("q")
        assert (info.quantization, info.shape, info.nbytes) == ("Q8_0", (32, 128), 4352)
        assert np.array_equal(r.get_tensor("q", dequantize=True), want)
        with pytest.raises(UnsupportedError, match="dequantize=True"):
            r.view("q")
    found = inspect(str(zt))
    assert [(t.name, t.nbytes) for t in found.tensors] == [("plain", 128), ("q", 4352)]
    assert diff(str(src), str(zt)).changed == []
    assert content_hash(str(zt)) == content_hash(str(src))


def test_verify_compares_the_digests_of_the_blocks(
    files: tuple[Path, Path, np.ndarray], tmp_path: Path
) -> None:
    _, zt, _ = files
    assert verify(zt, deep=True).digests_checked == 2
    with tensorfile.open(zt) as r:
        at = r.info("q").byte_range.start
    bad = tmp_path / "bad.zt"
    raw = bytearray(zt.read_bytes())
    raw[at + 5] ^= 0xFF
    bad.write_bytes(raw)
    report = verify(bad, deep=True)
    assert not report.ok and [f.subject for f in report.failures] == ["q"]


def test_converts_to_safetensors_as_the_gguf_does(
    files: tuple[Path, Path, np.ndarray], tmp_path: Path
) -> None:
    src, zt, want = files
    from_zt = convert(zt, tmp_path / "zt.safetensors")
    from_gguf = convert(src, tmp_path / "gguf.safetensors")
    assert from_gguf.notes == ("q: dequantized from q8_0",)
    assert from_zt.notes == (  # ztensor 2.1.2 digests every part (xxh3)
        "q: dequantized from q8_0",
        "checksums: the source's digests are not kept: xxh3 (1 tensor); pass checksum= "
        "(--checksum) to have safetensors store its own",
    )
    a, b = (
        load_file(str(tmp_path / "zt.safetensors")),
        load_file(str(tmp_path / "gguf.safetensors")),
    )
    assert np.array_equal(a["q"], want) and np.array_equal(b["q"], want)
    assert np.array_equal(a["plain"], b["plain"])


def test_blocks_that_do_not_fit_their_type_stay_an_extension_layout(tmp_path: Path) -> None:
    """An object that claims a ggml layout but whose bytes or attributes do not fit the
    type is not read as quantized: it stays an extension layout, exposed structurally."""
    block = np.float16(0.5).tobytes() + bytes(range(32))
    part = {"dtype": "u8", "bytes": block}
    zt2.write(
        tmp_path / "x.zt",
        {
            "ok": {"shape": [32], "layout": "gguf.q8_0/1", "parts": {"data": part},
                   "attributes": {"block_bytes": 34, "elems_per_block": 32}},
            "short": {"shape": [64], "layout": "gguf.q8_0/1", "parts": {"data": part}},
            "said": {"shape": [32], "layout": "gguf.q8_0/1", "parts": {"data": part},
                     "attributes": {"block_bytes": 36}},
            "plain": {"shape": [32], "layout": "gguf.f32/1", "parts": {"data": part}},
            "scalar": {"shape": [], "layout": "gguf.q8_0/1", "parts": {"data": part}},
        },
    )  # fmt: skip
    with tensorfile.open(tmp_path / "x.zt") as r:
        assert r.info("ok").quantization == "Q8_0"
        assert r.get_tensor("ok", dequantize=True)[:3].tolist() == [0.0, 0.5, 1.0]
        for name in ("short", "said", "plain", "scalar"):
            assert r.info(name).layout.startswith("gguf."), name
            assert r.info(name).quantization is None


@pytest.mark.parametrize(
    ("shape", "nbytes", "said"),
    [([], 144, "cannot be whole blocks"), ([1, 256], 100, "is 144 bytes")],
    ids=["no dimensions", "short"],
)
def test_blocks_that_do_not_fit_their_type_are_refused_by_convert(
    tmp_path: Path, shape: list[int], nbytes: int, said: str
) -> None:
    """An object of a ggml layout whose part is not the blocks of its shape (a Q4_K with no
    dimensions, as ztensor 2.1.2 writes it from such a GGUF; too few bytes) is not what it
    says: convert refuses it by name before it plans the output from its shape."""
    part = {"dtype": "u8", "bytes": bytes(nbytes)}
    zt2.write(tmp_path / "x.zt", {"w": {"shape": shape, "layout": "gguf.q4_k/1",
                                        "parts": {"data": part}}})  # fmt: skip
    with pytest.raises(FormatError, match=f"tensor 'w' .*{said}.*parts hold {nbytes}") as caught:
        convert(tmp_path / "x.zt", tmp_path / "out.safetensors")
    assert caught.value.tensor == "w"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("out", ".out"))]


def test_compressed_blocks_keep_the_gguf_content_id(tmp_path: Path) -> None:
    block = np.frombuffer(np.float16(0.5).tobytes() + bytes(range(32)), np.uint8)
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), arch="llama")
    w.add_tensor("q", block.reshape(1, 34), raw_dtype=Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    part = {"dtype": "u8", "bytes": block.tobytes(), "encoding": "zt.zstd-seekable/1"}
    zt2.write(tmp_path / "z.zt", {"q": {"shape": [1, 32], "layout": "gguf.q8_0/1",
                                        "parts": {"data": part}}}, canonical=False)  # fmt: skip
    with tensorfile.open(tmp_path / "z.zt") as r:
        assert r.info("q").encoding != "raw" and r.info("q").quantization == "Q8_0"
    assert content_hash(str(tmp_path / "z.zt")) == content_hash(str(tmp_path / "b.gguf"))
