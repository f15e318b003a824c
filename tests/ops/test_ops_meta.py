"""ops.edit_metadata / ops.read_metadata: in place when the header fits, else by an atomic
rewrite; zTensor attributes; sharded checkpoints; GGUF read-only; failures change nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import safetensors.numpy as ref_st
import ztensor as ref_zt
from safetensors import safe_open

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.errors import InvalidArgumentError, UnsupportedError
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import header_len, write_sharded


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(5)
    return {
        "w": rng.standard_normal((16, 8)).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float16),
        "ids": np.arange(5, dtype=np.int64),
    }


def _ref_meta(path: str) -> dict[str, str] | None:
    with safe_open(path, "np") as f:
        return f.metadata()


def _assert_tensors(path: str, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
    loaded = ref_st.load_file(path)
    assert set(loaded) == set(arrays)
    for k, v in arrays.items():
        assert loaded[k].dtype == v.dtype
        assert loaded[k].tobytes() == v.tobytes()


def _data_region(path: str) -> bytes:
    blob = Path(path).read_bytes()
    return blob[8 + header_len(path) :]


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- safetensors ------------------------------------------------------------------------------


def test_safetensors_in_place(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path, {"description": "a fairly long description to make room", "k": "v"})
    size, hlen, data = os.path.getsize(path), header_len(path), _data_region(path)
    inode = os.stat(path).st_ino
    r = ops.edit_metadata(path, set={"license": "MIT", "k": "w"}, delete=["description"])
    assert r.in_place is True
    assert r.before == {"description": "a fairly long description to make room", "k": "v"}
    assert r.after == {"license": "MIT", "k": "w"}
    assert r.paths == (path,)
    assert os.path.getsize(path) == size
    assert header_len(path) == hlen
    assert _data_region(path) == data
    assert os.stat(path).st_ino == inode  # not replaced by another file
    assert _ref_meta(path) == {"license": "MIT", "k": "w"}
    assert ops.read_metadata(path) == {"license": "MIT", "k": "w"}
    _assert_tensors(path, arrays)


def test_safetensors_in_place_on_reference_written_file(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    ref_st.save_file(arrays, path, {"format": "pt", "note": "x" * 40})
    size, hlen, data = os.path.getsize(path), header_len(path), _data_region(path)
    r = ops.edit_metadata(path, set={"note": "short"})
    assert r.in_place
    assert (os.path.getsize(path), header_len(path)) == (size, hlen)
    assert _data_region(path) == data
    assert _ref_meta(path) == {"format": "pt", "note": "short"}
    _assert_tensors(path, arrays)


def test_safetensors_rewrite_when_header_grows(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path, {"k": "v"})
    size, data = os.path.getsize(path), _data_region(path)
    long = "é" * 500 + ' "quoted" \\ \n'
    r = ops.edit_metadata(path, set={"description": long})
    assert r.in_place is False
    assert r.after == {"k": "v", "description": long}
    assert os.path.getsize(path) > size
    assert _data_region(path) == data
    assert _ref_meta(path) == {"k": "v", "description": long}
    _assert_tensors(path, arrays)
    assert _temp_files(tmp_path) == []


def test_safetensors_rewrite_keeps_alignment(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path, align=4096)
    assert (8 + header_len(path)) % 4096 == 0
    ops.edit_metadata(path, set={"big": "x" * 5000})
    assert (8 + header_len(path)) % 4096 == 0
    _assert_tensors(path, arrays)
    assert _ref_meta(path) == {"big": "x" * 5000}


def test_safetensors_clear(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path, {"a": "1", "b": "2"})
    r = ops.edit_metadata(path, clear=True)
    assert r.after == {}
    assert not _ref_meta(path)
    assert ops.read_metadata(path) == {}
    _assert_tensors(path, arrays)


def test_safetensors_clear_then_set(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file(_arrays(), path, {"a": "1", "b": "2"})
    r = ops.edit_metadata(path, clear=True, set={"c": "3"})
    assert r.after == {"c": "3"}
    assert _ref_meta(path) == {"c": "3"}


def test_set_on_file_without_metadata(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path)
    ops.edit_metadata(path, set={"format": "pt"})
    assert _ref_meta(path) == {"format": "pt"}
    _assert_tensors(path, arrays)


def test_delete_missing_key_raises_and_changes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file(_arrays(), path, {"a": "1"})
    before = Path(path).read_bytes()
    with pytest.raises(InvalidArgumentError, match="nope"):
        ops.edit_metadata(path, delete=["nope"])
    with pytest.raises(InvalidArgumentError):
        ops.edit_metadata(path, set={"b": "2"}, delete=["nope"])
    assert Path(path).read_bytes() == before


def test_non_text_value_rejected(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file(_arrays(), path, {"a": "1"})
    before = Path(path).read_bytes()
    with pytest.raises(InvalidArgumentError):
        ops.edit_metadata(path, set={"n": 3})  # type: ignore[dict-item]
    assert Path(path).read_bytes() == before


@pytest.mark.parametrize("kind", ["safetensors", "ztensor"])
def test_failed_rewrite_leaves_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    arrays = _arrays()
    if kind == "safetensors":
        path = str(tmp_path / "m.safetensors")
        save_file(arrays, path, {"k": "v"})
    else:
        path = str(tmp_path / "m.zt")
        ztensor.save_file(arrays, path, attributes={"k": "v"})
    before = Path(path).read_bytes()
    calls: list[tuple[Any, Any]] = []

    def failing_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        calls.append((src, dst))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(tensorfile.TensorFileError):
        ops.edit_metadata(path, set={"description": "x" * 10_000})
    monkeypatch.undo()
    assert calls, "the edit did not go through a rewrite"
    assert Path(path).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [os.path.basename(path)]


# -- zTensor -------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_ztensor_attributes_edit(tmp_path: Path, compression: str | None) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.zt")
    ztensor.save_file(
        arrays, path, attributes={"license": "apache-2.0", "x": "y"}, compression=compression
    )
    # shorter manifest: in place
    r = ops.edit_metadata(path, set={"license": "MIT"}, delete=["x"])
    assert r.in_place is True
    assert r.after == {"license": "MIT"}
    assert ops.read_metadata(path) == {"license": "MIT"}
    assert ops.load(path).metadata == {"license": "MIT"}
    reader = ref_zt.Reader(path)
    for k, v in arrays.items():
        np.testing.assert_array_equal(reader.read_tensor(k), v)
    # longer manifest: rewritten
    long = "ü" * 1000
    r = ops.edit_metadata(path, set={"notes": long})
    assert r.in_place is False
    assert ops.read_metadata(path) == {"license": "MIT", "notes": long}
    reader = ref_zt.Reader(path)
    for k, v in arrays.items():
        np.testing.assert_array_equal(reader.read_tensor(k), v)
    loaded = ztensor.load_file(path)
    for k, v in arrays.items():
        assert loaded[k].tobytes() == v.tobytes()
    assert _temp_files(tmp_path) == []


def test_ztensor_clear_and_hash_follows(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.zt")
    bare = str(tmp_path / "bare.zt")
    ztensor.save_file(arrays, path, attributes={"a": "1"}, checksum="crc32c")
    ztensor.save_file(arrays, bare)
    content = ops.content_hash(path)
    ops.edit_metadata(path, clear=True)
    assert ops.read_metadata(path) == {}
    assert ops.structural_hash(path) == ops.structural_hash(bare)
    assert ops.content_hash(path) == content
    reader = ref_zt.Reader(path)
    np.testing.assert_array_equal(reader.read_tensor("w"), arrays["w"])


# -- sharded, GGUF -------------------------------------------------------------------------


def test_sharded_edit_every_shard(tmp_path: Path) -> None:
    shards = [
        {"a.w": np.ones((4, 4), np.float32)},
        {"b.w": np.arange(6, dtype=np.int32)},
        {"c.w": np.full(3, 2, np.float16)},
    ]
    index = str(write_sharded(tmp_path, shards, {"format": "pt"}))
    files = sorted(str(p) for p in tmp_path.glob("model-*.safetensors"))
    data = [_data_region(f) for f in files]
    r = ops.edit_metadata(index, set={"license": "MIT"})
    assert sorted(r.paths) == files
    assert r.after == {"format": "pt", "license": "MIT"}
    for f, region, tensors in zip(files, data, shards, strict=True):
        assert _ref_meta(f) == {"format": "pt", "license": "MIT"}
        assert _data_region(f) == region
        _assert_tensors(f, tensors)
    assert ops.read_metadata(index) == {"format": "pt", "license": "MIT"}
    ops.edit_metadata(str(tmp_path), delete=["format"])
    for f in files:
        assert _ref_meta(f) == {"license": "MIT"}


def test_gguf_edit_unsupported(tmp_path: Path) -> None:
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_string("general.name", "tiny")
    w.add_tensor("t", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    before = Path(path).read_bytes()
    with pytest.raises(UnsupportedError):
        ops.edit_metadata(path, set={"general.name": "other"})
    with pytest.raises(UnsupportedError):
        ops.edit_metadata(path, clear=True)
    assert Path(path).read_bytes() == before
    assert ops.read_metadata(path)["general.name"] == "tiny"


def test_sharded_delete_of_key_held_by_some_shards_is_all_or_nothing(tmp_path: Path) -> None:
    """The checkpoint's metadata is the union of its shards'. Deleting a key only some shards
    hold must either succeed everywhere or fail leaving every shard as it was, never raise
    after editing some of them."""
    index = str(
        write_sharded(
            tmp_path,
            [{"a.w": np.ones(4, np.float32)}, {"b.w": np.ones(4, np.float32)}],
            {"format": "pt"},
        )
    )
    first = str(tmp_path / "model-00001-of-00002.safetensors")
    save_file({"a.w": np.ones(4, np.float32)}, first, {"format": "pt", "only_first": "x"})
    assert ops.read_metadata(index) == {"format": "pt", "only_first": "x"}
    files = sorted(str(p) for p in tmp_path.glob("model-*.safetensors"))
    before = [Path(f).read_bytes() for f in files]
    try:
        ops.edit_metadata(index, delete=["only_first"])
    except InvalidArgumentError:
        assert [Path(f).read_bytes() for f in files] == before, "failed, yet shards changed"
    else:
        assert all("only_first" not in (_ref_meta(f) or {}) for f in files)
