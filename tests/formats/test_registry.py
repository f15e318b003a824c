"""The format registry: one declaration per format, one detector, one door."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorfile
from tensorfile.core.source import RangeRequest, SuffixRequest
from tensorfile.errors import (
    GGUFError,
    InvalidArgumentError,
    UnknownFormatError,
    UnsupportedError,
)
from tensorfile.formats import FORMATS, GGUF, SAFETENSORS, ZTENSOR, detect, get, guess, read_catalog
from tensorfile.safetensors.numpy import save
from tensorfile.sources import MemorySource
from tests.helpers.checkpoints import write_gguf, write_zt


def test_every_format_is_declared_once_with_its_module() -> None:
    assert list(FORMATS) == ["safetensors", "ztensor", "gguf", "npz", "npy", "pytorch"]
    for fmt in FORMATS.values():
        impl = fmt.impl()
        assert callable(impl.read_catalog) and callable(impl.open_reader)
        assert callable(getattr(impl, "edit_metadata", None)) == fmt.editable


def test_detect_by_magic_and_header() -> None:
    assert detect(MemorySource(b"GGUF" + bytes(60))) is GGUF
    assert detect(MemorySource(b"ZTEN1000" + bytes(60))) is ZTENSOR
    assert detect(MemorySource(save({"a": np.zeros(1, np.int8)}))) is SAFETENSORS
    with pytest.raises(UnknownFormatError, match="is empty"):  # no fallback: says what it is
        detect(MemorySource(b""))


def test_guess_and_first_request_follow_the_format() -> None:
    assert guess("m.zt") is ZTENSOR and guess("x/m.gguf") is GGUF
    assert guess("m.safetensors") is SAFETENSORS and guess("m.bin") is None
    assert ZTENSOR.first_request(1000) == SuffixRequest(1000)  # the manifest ends the file
    assert SAFETENSORS.first_request(1000) == RangeRequest(0, 1000)


def test_unknown_format_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown format 'onnx'"):
        get("onnx")
    with pytest.raises(InvalidArgumentError, match="unknown format"):
        tensorfile.open(b"", format="onnx")


@pytest.mark.parametrize("bad", [123, None, 1.5, ["a"], object()])
def test_open_refuses_what_is_not_a_path_or_bytes(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="expected a path, a URL or bytes"):
        tensorfile.open(bad)  # type: ignore[arg-type]


def test_open_reads_every_format_through_the_registry(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    zt = write_zt(tmp_path / "m.zt", {"w": arr})
    gg = write_gguf(tmp_path / "m.gguf", {"w": arr})
    for path, fmt in ((zt, "ztensor"), (gg, "gguf")):
        with tensorfile.open(path) as r:
            assert r.format == fmt
            np.testing.assert_array_equal(r.get_tensor("w"), arr)
        cat = read_catalog(str(path))
        assert cat.format == fmt and cat.tensors["w"].shape == (2, 3)


def test_gguf_quantized_tensors_are_described_not_decoded(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    raw = np.zeros((4, 18), np.uint8)  # 4 rows of one Q4_0 block (32 elements, 18 bytes)
    w.add_tensor("q", raw, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with tensorfile.open(path) as r:
        info = r.info("q")
        assert (info.layout, info.stored_dtype, info.shape) == ("quantized", "q4_0", (4, 32))
        assert info.nbytes == 72
        with pytest.raises(UnsupportedError, match="quantized"):
            r.get_tensor("q")


def test_a_file_that_claims_gguf_is_read_as_gguf() -> None:
    with pytest.raises(GGUFError):
        tensorfile.open(b"GGUF" + bytes(4))
