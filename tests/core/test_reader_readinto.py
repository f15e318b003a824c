"""``Reader.readinto``, the public way to a file's stored bytes for bridges that plan their own
reads (the pinned torch stream): the bytes as stored, scattered over several buffers, a failed
read raised as the format's own error, and a sharded checkpoint refused with a message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import (
    SafetensorIOError,
    TensorFileError,
    UnsupportedError,
    ZTensorIOError,
)
from tensorfile.safetensors.numpy import save_file, save_sharded

TENSOR = np.arange(12, dtype=np.int16)


def _write(kind: str, path: Path) -> None:
    if kind == "safetensors":
        save_file({"w": TENSOR}, str(path))
    else:
        ztensor.save_file({"w": TENSOR}, path, version=1 if kind == "zt1" else 2)


@pytest.mark.parametrize(
    ("kind", "error"),
    [("safetensors", SafetensorIOError), ("zt1", ZTensorIOError), ("zt2", ZTensorIOError)],
)
def test_readinto_gives_the_stored_bytes_and_the_formats_error(
    tmp_path: Path, kind: str, error: type[TensorFileError]
) -> None:
    path = tmp_path / "m.bin"
    _write(kind, path)
    with tensorfile.open(path) as r:
        start = r.info("w").byte_range.start
        head, tail = bytearray(10), bytearray(14)
        r.readinto(start, [memoryview(head), memoryview(tail)])
        assert bytes(head + tail) == TENSOR.tobytes()
        with pytest.raises(error, match=r"m\.bin"):
            r.readinto(r.source.size - 2, [memoryview(bytearray(4))])


def test_a_sharded_checkpoint_has_no_one_file_to_read_from(tmp_path: Path) -> None:
    save_sharded({"a": TENSOR, "b": TENSOR}, str(tmp_path), max_shard_size="16B")
    with (
        tensorfile.open(tmp_path) as ck,
        pytest.raises(UnsupportedError, match="one source per shard"),
    ):
        ck.readinto(0, [memoryview(bytearray(4))])
