"""A ``file://`` URL is its local path to every operation that writes: the same-file rule of
convert and the metadata editor hold for it as for the plain path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorfile import InvalidArgumentError
from tensorfile.ops import content_hash, convert, edit_metadata, read_metadata
from tensorfile.safetensors.numpy import save_file


def test_convert_refuses_its_own_source_given_as_a_file_url(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"w": np.arange(4, dtype=np.float32)}, str(path))
    before = path.read_bytes()
    with pytest.raises(InvalidArgumentError, match="the same file"):
        convert(f"file://{path}", str(path))
    with pytest.raises(InvalidArgumentError, match="the same file"):
        convert(str(path), f"file://{path}")
    assert path.read_bytes() == before


def test_a_file_url_destination_is_written_locally(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    save_file({"w": np.arange(4, dtype=np.float32)}, str(src))
    convert(f"file://{src}", f"file://{tmp_path / 'm.zt'}")
    assert content_hash(str(tmp_path / "m.zt")) == content_hash(str(src))


def test_metadata_of_a_file_url_is_edited_in_place(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, str(path), metadata={"a": "1"})
    edit_metadata(f"file://{path}", set={"b": "2"})
    assert read_metadata(str(path)) == {"a": "1", "b": "2"}


def test_convert_writes_in_name_order_whatever_the_source_order(tmp_path: Path) -> None:
    """One output for one input: tensors go out in name order (as before the registry
    rework), so a zTensor written from a file stored in another order is the same file."""
    from tensorfile import ztensor

    arrays = {n: np.full(3, i, np.float32) for i, n in enumerate(["s", "a", "c", "b"])}
    src = tmp_path / "m.safetensors"
    save_file(arrays, str(src))  # safetensors stores them by name; reorder through zt v2
    ztensor.save_file(arrays, tmp_path / "ordered.zt", version=2)  # file order s, a, c, b
    convert(str(tmp_path / "ordered.zt"), str(tmp_path / "out.zt"), to="zt")
    ztensor.save_file({n: arrays[n] for n in sorted(arrays)}, tmp_path / "want.zt")
    assert (tmp_path / "out.zt").read_bytes() == (tmp_path / "want.zt").read_bytes()
