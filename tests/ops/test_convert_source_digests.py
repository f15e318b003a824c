"""``convert`` checks the digests its source stores as it reads the bytes: a source whose
own digests prove a tensor changed is refused, with the error naming the tensor and the
file, and no destination is left (no fresh digests over corrupted bytes, no byte-for-byte
copy of them either). A source that stores no digests converts without a word, and an
intact one converts as before. Sources are written by tensorfile's writers (with
``checksum=``); outputs are verified by ``tensorfile.ops.verify``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import ChecksumError
from tensorfile.ops import convert, verify
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import write_sharded
from tests.helpers.cli import run
from tests.helpers.digests import flip_byte

ARRAYS = {"w": np.arange(1024, dtype=np.float32), "v": np.ones(16, np.float32)}

OUTPUTS: list[tuple[str, dict[str, Any]]] = [
    ("out.safetensors", {"checksum": "sha256"}),
    ("out-zt2.zt", {"to": "zt2", "checksum": "xxh3"}),
    ("out-zt1.zt", {"to": "zt", "checksum": "crc32c"}),
    ("copy.safetensors", {}),  # a lone safetensors file: copied byte for byte
    ("out.npz", {}),
]


def _source(tmp_path: Path, checksum: str = "sha256") -> Path:
    src = tmp_path / "src" / "m.safetensors"
    src.parent.mkdir()
    save_file(ARRAYS, str(src), checksum=checksum)
    return src


def _refused(exc: pytest.ExceptionInfo[ChecksumError], src: Path, tensor: str) -> None:
    text = str(exc.value)
    assert str(src) in text and repr(tensor) in text, text
    assert exc.value.tensor == tensor


@pytest.mark.parametrize(("name", "options"), OUTPUTS)
def test_a_source_failing_its_digests_is_refused(
    tmp_path: Path, name: str, options: dict[str, Any]
) -> None:
    src = _source(tmp_path)
    flip_byte(src, "w", at=100)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ChecksumError) as exc:
        convert(src, out / name, **options)
    _refused(exc, src, "w")
    assert list(out.iterdir()) == []  # no destination, no temporary file


@pytest.mark.parametrize(("name", "options"), OUTPUTS)
def test_an_intact_source_with_digests_converts(
    tmp_path: Path, name: str, options: dict[str, Any]
) -> None:
    src = _source(tmp_path, "xxh3")
    result = convert(src, tmp_path / name, **options)
    assert result.tensors == 2
    assert verify(str(tmp_path / name)).ok


def test_the_last_byte_of_a_copied_file_is_checked(tmp_path: Path) -> None:
    """The byte-for-byte copy compares each digest as the bytes pass: the last byte of the
    file (the end of its last tensor) included."""
    src = _source(tmp_path, "crc32c")
    with tensorfile.open(str(src)) as f:
        last = max(f.keys(), key=lambda n: f.info(n).byte_range.stop)
        size = f.info(last).byte_range.length
        assert f.info(last).byte_range.stop == src.stat().st_size
    flip_byte(src, last, at=size - 1)
    with pytest.raises(ChecksumError) as exc:
        convert(src, tmp_path / "copy.safetensors")
    _refused(exc, src, last)
    assert not (tmp_path / "copy.safetensors").exists()


def test_a_checkpoint_shard_failing_its_digests_is_refused(tmp_path: Path) -> None:
    index = write_sharded(
        tmp_path / "ck", [{"a.w": ARRAYS["w"]}, {"b.v": ARRAYS["v"]}], {"format": "pt"}
    )
    shard = tmp_path / "ck" / "model-00001-of-00002.safetensors"
    save_file({"a.w": ARRAYS["w"]}, str(shard), {"format": "pt"}, checksum="sha256")
    flip_byte(shard, "a.w", at=8)
    with pytest.raises(ChecksumError) as exc:
        convert(index, tmp_path / "out.zt", to="zt2", checksum="sha256")
    _refused(exc, shard, "a.w")
    assert not (tmp_path / "out.zt").exists()


@pytest.mark.parametrize(("version", "checksum"), [(1, "crc32c"), (2, "sha256")])
def test_a_ztensor_source_failing_its_digests_is_refused(
    tmp_path: Path, version: int, checksum: str
) -> None:
    src = tmp_path / "m.zt"
    convert(_source(tmp_path), src, to="zt" if version == 1 else "zt2", checksum=checksum)
    flip_byte(src, "w", at=100)
    with pytest.raises(ChecksumError) as exc:
        convert(src, tmp_path / "out.safetensors", checksum="sha256")
    assert repr("w") in str(exc.value) and str(src) in str(exc.value)
    assert not (tmp_path / "out.safetensors").exists()


def test_a_source_without_digests_converts_without_a_warning(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    save_file(ARRAYS, str(src))
    ztensor.save_file(ARRAYS, str(tmp_path / "m.zt"))
    index = write_sharded(tmp_path / "ck", [{"a.w": ARRAYS["w"]}, {"b.v": ARRAYS["v"]}], {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        convert(src, tmp_path / "out.zt", to="zt2", checksum="xxh3")
        convert(tmp_path / "m.zt", tmp_path / "out.safetensors", checksum="xxh3")
        convert(index, tmp_path / "ck.safetensors")
    assert verify(str(tmp_path / "out.safetensors")).ok


def test_the_command_line_refuses_and_leaves_nothing(tmp_path: Path, capsys: Any) -> None:
    src = _source(tmp_path)
    flip_byte(src, "w", at=100)
    out = tmp_path / "cli.safetensors"
    got = run(capsys, "convert", src, out, "--checksum", "sha256")
    assert got.code == 2 and got.out == ""
    assert got.err.startswith("tensorfile: error: ") and str(src) in got.err, got.err
    assert "tensor 'w'" in got.err and "changed after it was written" in got.err
    assert not out.exists()
