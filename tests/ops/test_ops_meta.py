"""ops.edit_metadata / ops.read_metadata: every edit is a new file renamed into place (the
header keeps its size when the new one fits, else grows by whole blocks); zTensor attributes;
sharded checkpoints; GGUF read-only; failures change nothing."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import Any

import cbor2
import gguf
import numpy as np
import pytest
import safetensors.numpy as ref_st
import ztensor as ref_zt
from safetensors import safe_open

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.errors import InvalidArgumentError, SourceError, UnsupportedError
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import header_len, write_sharded, zt_manifest
from tests.helpers.reflink import reflink_dir

__all__ = ["reflink_dir"]  # a fixture


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


def test_safetensors_short_edit_keeps_the_header_size(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path, {"description": "a fairly long description to make room", "k": "v"})
    size, hlen, data = os.path.getsize(path), header_len(path), _data_region(path)
    old = os.stat(path)
    r = ops.edit_metadata(path, set={"license": "MIT", "k": "w"}, delete=["description"])
    assert r.method in ("reflink", "copy")
    assert r.before == {"description": "a fairly long description to make room", "k": "v"}
    assert r.after == {"license": "MIT", "k": "w"}
    assert r.paths == (path,)
    assert os.path.getsize(path) == size
    assert header_len(path) == hlen
    assert _data_region(path) == data
    new = os.stat(path)
    assert new.st_ino != old.st_ino  # a new file renamed into place, never overwritten
    assert new.st_mode == old.st_mode
    assert _temp_files(tmp_path) == []
    assert _ref_meta(path) == {"license": "MIT", "k": "w"}
    assert ops.read_metadata(path) == {"license": "MIT", "k": "w"}
    _assert_tensors(path, arrays)


def test_safetensors_short_edit_of_a_reference_written_file(tmp_path: Path) -> None:
    arrays = _arrays()
    path = str(tmp_path / "m.safetensors")
    ref_st.save_file(arrays, path, {"format": "pt", "note": "x" * 40})
    size, hlen, data = os.path.getsize(path), header_len(path), _data_region(path)
    r = ops.edit_metadata(path, set={"note": "short"})
    assert r.method in ("reflink", "copy")
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
    assert r.method in ("reflink", "copy")
    assert r.after == {"k": "v", "description": long}
    assert os.path.getsize(path) - size == 4096  # whole blocks: the data can be cloned
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
    # shorter manifest
    r = ops.edit_metadata(path, set={"license": "MIT"}, delete=["x"])
    assert r.method in ("reflink", "copy")
    assert r.after == {"license": "MIT"}
    assert ops.read_metadata(path) == {"license": "MIT"}
    assert ops.load(path).metadata == {"license": "MIT"}
    reader = ref_zt.Reader(path)
    for k, v in arrays.items():
        np.testing.assert_array_equal(reader.read_tensor(k), v)
    # longer manifest
    long = "ü" * 1000
    r = ops.edit_metadata(path, set={"notes": long})
    assert r.method in ("reflink", "copy")
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
    """A checkpoint's metadata is what its shards agree on; editing works on every shard's
    own keys. Deleting a key only some shards hold must either succeed everywhere or fail
    leaving every shard as it was, never raise after editing some of them."""
    index = str(
        write_sharded(
            tmp_path,
            [{"a.w": np.ones(4, np.float32)}, {"b.w": np.ones(4, np.float32)}],
            {"format": "pt"},
        )
    )
    first = str(tmp_path / "model-00001-of-00002.safetensors")
    save_file({"a.w": np.ones(4, np.float32)}, first, {"format": "pt", "only_first": "x"})
    assert ops.read_metadata(index) == {"format": "pt"}  # one shard alone holds only_first
    files = sorted(str(p) for p in tmp_path.glob("model-*.safetensors"))
    before = [Path(f).read_bytes() for f in files]
    try:
        ops.edit_metadata(index, delete=["only_first"])
    except InvalidArgumentError:
        assert [Path(f).read_bytes() for f in files] == before, "failed, yet shards changed"
    else:
        assert all("only_first" not in (_ref_meta(f) or {}) for f in files)


# -- links and permissions: the same whatever the new value's length -----------------------

SHORT, LONG = {"k": "w"}, {"k": "x" * 20_000}  # the header fits / grows


def _model(path: Path, kind: str) -> None:
    if kind == "safetensors":
        save_file(_arrays(), str(path), {"k": "v" * 100})
    else:
        ztensor.save_file(_arrays(), path, attributes={"k": "v" * 100})


def _kinds() -> Any:
    return pytest.mark.parametrize(
        ("kind", "suffix"), [("safetensors", ".safetensors"), ("ztensor", ".zt")]
    )


@_kinds()
@pytest.mark.parametrize("change", [SHORT, LONG], ids=["short", "long"])
def test_a_symlinks_target_is_edited_in_its_own_folder(
    tmp_path: Path, kind: str, suffix: str, change: dict[str, str]
) -> None:
    (tmp_path / "blobs").mkdir()
    (tmp_path / "snapshot").mkdir()
    real = tmp_path / "blobs" / f"abc123{suffix}"
    _model(real, kind)
    link = tmp_path / "snapshot" / f"model{suffix}"
    link.symlink_to(Path("..") / "blobs" / real.name)  # as huggingface_hub's cache lays it
    ops.edit_metadata(str(link), set=change)
    assert link.is_symlink()
    assert os.readlink(link) == os.path.join("..", "blobs", real.name)
    assert ops.read_metadata(str(real)) == change
    assert os.listdir(tmp_path / "blobs") == [real.name]  # no temporary file left anywhere
    assert os.listdir(tmp_path / "snapshot") == [link.name]
    loaded = tensorfile.open(str(link))
    for name, arr in _arrays().items():
        assert loaded.get_tensor(name).tobytes() == arr.tobytes()


@_kinds()
@pytest.mark.parametrize("change", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("case", ["hard link", "read-only file", "read-only folder"])
def test_links_and_read_only_files_are_refused_before_writing(
    tmp_path: Path, kind: str, suffix: str, change: dict[str, str], case: str
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / f"m{suffix}"
    _model(path, kind)
    before = path.read_bytes()
    mode = stat.S_IMODE(path.stat().st_mode)
    if case == "hard link":
        os.link(path, tmp_path / f"other{suffix}")
    elif case == "read-only file":
        path.chmod(0o444)
        mode = 0o444
    else:
        folder.chmod(0o555)
    want = "2 hard links" if case == "hard link" else "read-only"
    try:
        with pytest.raises(SourceError, match=want) as info:
            ops.edit_metadata(str(path), set=change)
    finally:
        folder.chmod(0o755)
    assert str(info.value).startswith(f"cannot edit {path}")
    assert path.read_bytes() == before
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert os.listdir(folder) == [path.name]
    if case == "hard link":
        assert (tmp_path / f"other{suffix}").read_bytes() == before
        assert os.path.samefile(path, tmp_path / f"other{suffix}")  # still one file


def test_one_read_only_shard_refuses_the_whole_checkpoint_edit(tmp_path: Path) -> None:
    shards = [{"a.w": np.ones((4, 4), np.float32)}, {"b.w": np.arange(6, dtype=np.int32)}]
    index = str(write_sharded(tmp_path, shards, {"format": "pt"}))
    files = sorted(tmp_path.glob("model-*.safetensors"))
    files[-1].chmod(0o444)
    before = [f.read_bytes() for f in files]
    with pytest.raises(SourceError, match="read-only"):
        ops.edit_metadata(index, set={"license": "MIT"})
    assert [f.read_bytes() for f in files] == before  # not even the writable first shard


@_kinds()
def test_mode_and_owner_are_kept(tmp_path: Path, kind: str, suffix: str) -> None:
    path = tmp_path / f"m{suffix}"
    _model(path, kind)
    path.chmod(0o604)
    if os.geteuid() == 0:
        os.chown(path, 4321, 8765)
    old = path.stat()
    for change in (SHORT, LONG):
        ops.edit_metadata(str(path), set=change)
        new = path.stat()
        assert stat.S_IMODE(new.st_mode) == 0o604
        assert (new.st_uid, new.st_gid) == (old.st_uid, old.st_gid)


@_kinds()
def test_edits_clone_the_tensor_bytes_where_the_file_system_can(
    reflink_dir: Path, kind: str, suffix: str
) -> None:
    path = reflink_dir / f"m{suffix}"
    arrays = {"big": np.arange(100_000, dtype=np.float32), **_arrays()}  # many blocks
    if kind == "safetensors":
        save_file(arrays, str(path), {"k": "v"})
    else:
        ztensor.save_file(arrays, path, attributes={"k": "v"})
    for change in (SHORT, LONG, SHORT, {"k": "y" * 50_000}):
        assert ops.edit_metadata(str(path), set=change).method == "reflink"
        assert ops.read_metadata(str(path)) == change
    loaded = tensorfile.open(str(path))
    for name, arr in arrays.items():
        assert loaded.get_tensor(name).tobytes() == arr.tobytes()
    assert os.listdir(reflink_dir) == [path.name]


# -- foreign input: CBOR tags, non-UTF-8 text --------------------------------------------------


def _zt_with_extra_keys(path: Path) -> tuple[bytes, list[bytes]]:
    """A zTensor file whose manifest has extra keys another writer put there: CBOR tags (an
    unknown tag over a map, an epoch date), an indefinite-length array, a half-precision
    float. Returns the manifest and the exact bytes of each extra entry."""
    ztensor.save_file(_arrays(), path, attributes={"a": "1"})
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[-8:])
    start = len(blob) - 8 - n
    raw = blob[start:-8]
    assert raw[0] == 0xA4  # version, generator, attributes, tensors
    extra = [
        cbor2.dumps("x-extension") + cbor2.dumps(cbor2.CBORTag(4242, {"a": [1, 2]})),
        cbor2.dumps("x-created") + b"\xc1" + cbor2.dumps(1_700_000_000),  # tag 1: a date
        cbor2.dumps("x-list") + b"\x9f\x01\x02\xff",  # indefinite length
        cbor2.dumps("x-half") + b"\xf9\x3c\x00",  # 1.0 as a half float
    ]
    manifest = bytes([0xA4 + len(extra)]) + raw[1:] + b"".join(extra)
    path.write_bytes(blob[:start] + manifest + struct.pack("<Q", len(manifest)))
    return manifest, extra


@pytest.mark.parametrize("change", [SHORT, LONG, {}], ids=["short", "long", "clear"])
def test_ztensor_extra_manifest_keys_with_cbor_tags_are_kept_byte_for_byte(
    tmp_path: Path, change: dict[str, str]
) -> None:
    path = tmp_path / "m.zt"
    _, extra = _zt_with_extra_keys(path)
    r = ops.edit_metadata(str(path), set=change, clear=not change)
    assert r.after == ({"a": "1", **change} if change else {})
    n, manifest = zt_manifest(path)
    raw = path.read_bytes()[-8 - n : -8]
    for entry in extra:
        assert entry in raw
    assert manifest["attributes"] == ({"a": "1", **change} if change else {})
    assert manifest["x-extension"].tag == 4242
    reader = ref_zt.Reader(str(path))
    for k, v in _arrays().items():
        np.testing.assert_array_equal(reader.read_tensor(k), v)


def test_ztensor_attributes_the_edit_keeps_are_kept_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "m.zt"
    _zt_with_extra_keys(path)
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[-8:])
    raw = blob[-8 - n : -8]
    # rewrite "a": "1" with a needlessly long text head (0x78 0x01): valid CBOR, another
    # writer's choice, which the edit must not normalise
    odd = raw.replace(b"\x61a\x611", b"\x61a\x78\x011", 1)
    path.write_bytes(blob[: -8 - n] + odd + struct.pack("<Q", len(odd)))
    ops.edit_metadata(str(path), set={"b": "2"})
    (n2,) = struct.unpack("<Q", path.read_bytes()[-8:])
    assert b"\x61a\x78\x011" in path.read_bytes()[-8 - n2 : -8]
    assert ops.read_metadata(str(path)) == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    "change",
    [{"\udcff": "v"}, {"k": "caf\udce9"}, {"k": "\ud800"}],
    ids=["key", "value", "lone-surrogate"],
)
@pytest.mark.parametrize("suffix", [".safetensors", ".zt"])
def test_text_that_is_not_utf8_is_a_clear_error(
    tmp_path: Path, change: dict[str, str], suffix: str
) -> None:
    path = tmp_path / f"m{suffix}"
    _model(path, "safetensors" if suffix == ".safetensors" else "ztensor")
    before = path.read_bytes()
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        ops.edit_metadata(str(path), set=change)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]
