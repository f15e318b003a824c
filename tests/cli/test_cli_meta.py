"""``tensorfile meta``: printing metadata, and ``--set`` / ``--delete`` / ``--clear`` editing
safetensors and zTensor files (atomically: a new file renamed into place) without touching
their tensors, as the reference ``safetensors`` and ``ztensor`` packages see them."""

from __future__ import annotations

import os
import resource
import signal
import struct
import subprocess
from pathlib import Path
from typing import Any

import cbor2
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file as ref_load

from tensorfile import ztensor
from tests.helpers.checkpoints import (
    MODEL,
    MODEL_META,
    safetensors_header,
    write_gguf,
    write_safetensors,
    write_sharded,
    write_zt,
    zt_manifest,
)
from tests.helpers.cli import (
    SCRIPT,
    Result,
    assert_one_error,
    run,
    run_json,
    run_proc,
    strict_json,
)

LONG_META = {"format": "pt", "note": "a long note that the edit removes again"}
UPDATED = (
    "updated 1 file atomically (tensor bytes copied)",
    "updated 1 file atomically (tensor bytes cloned)",
)


def _ref_metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), framework="np") as f:
        return dict(f.metadata() or {})


def _assert_tensors(path: Path, want: dict[str, np.ndarray[Any, Any]]) -> None:
    """The reference safetensors loader reads exactly ``want``."""
    got = ref_load(str(path))
    assert sorted(got) == sorted(want)
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype, name
        assert got[name].shape == arr.shape, name
        assert got[name].tobytes() == arr.tobytes(), name


def _assert_zt_tensors(path: Path, want: dict[str, np.ndarray[Any, Any]]) -> None:
    """Both tensorfile and the reference ``ztensor`` package read exactly ``want``."""
    ref = pytest.importorskip("ztensor")
    reader = ref.Reader(str(path))
    assert sorted(reader.tensor_names) == sorted(want)
    mine = ztensor.load_file(path)
    for name, arr in want.items():
        theirs = np.array(reader.read_tensor(name), copy=True).view(np.ndarray)
        for got in (theirs, mine[name]):
            assert got.dtype == arr.dtype, name
            assert got.shape == arr.shape, name
            assert got.tobytes() == arr.tobytes(), name


# -- printing ------------------------------------------------------------------------------------


def test_meta_prints_sorted_keys(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata={"z": "last", **MODEL_META})
    r = run(capsys, "meta", path)
    assert r.code == 0
    assert r.err == ""
    assert r.out.splitlines() == ["format: pt", "note: hello world", "z: last"]
    assert run_json(capsys, "meta", path) == {
        "schema": 1,
        "path": str(path),
        "metadata": {"z": "last", **MODEL_META},
    }
    empty = write_safetensors(tmp_path / "e.safetensors")
    r = run(capsys, "meta", empty)
    assert (r.code, r.out, r.err) == (0, "", "")
    assert run_json(capsys, "meta", empty)["metadata"] == {}


def test_meta_prints_each_key_on_one_line(tmp_path: Path, capsys: Any) -> None:
    meta = {"a": "first\nsecond", "b": "plain"}
    path = write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(1, np.float32)}, meta)
    r = run(capsys, "meta", path)
    assert r.code == 0
    lines = r.out.splitlines()
    assert len(lines) == 2, lines  # a value's newline must not start a line of its own
    assert lines[0].startswith("a: first")
    assert lines[1] == "b: plain"


def test_meta_prints_ztensor_gguf_and_sharded(tmp_path: Path, capsys: Any) -> None:
    zt = write_zt(tmp_path / "m.zt", attributes=MODEL_META, compression="zstd")
    assert run(capsys, "meta", zt).out.splitlines() == ["format: pt", "note: hello world"]
    gg = write_gguf(
        tmp_path / "m.gguf",
        {"t": np.ones(4, np.float32)},
        [("add_uint32", "llama.block_count", 2), ("add_string", "general.name", "tiny")],
    )
    assert run_json(capsys, "meta", gg)["metadata"] == {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "general.name": "tiny",
    }
    assert run(capsys, "meta", gg).out.splitlines() == [
        "general.architecture: llama",
        "general.name: tiny",
        "llama.block_count: 2",
    ]
    names = sorted(MODEL)
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in names[:3]}, {n: MODEL[n] for n in names[3:]}],
        [{"format": "pt"}, {"format": "pt", "extra": "2"}],
    )
    for target in (index, index.parent, index.parent / "*.safetensors"):
        # a checkpoint's (or a glob's) metadata is what its files agree on
        assert run_json(capsys, "meta", target)["metadata"] == {"format": "pt"}


def test_meta_json_with_non_finite_gguf_value_is_valid_json(tmp_path: Path, capsys: Any) -> None:
    gg = write_gguf(
        tmp_path / "m.gguf", {"t": np.ones(4, np.float32)}, [("add_float32", "x", float("nan"))]
    )
    run_json(capsys, "meta", gg)  # strict: NaN is not JSON


# -- editing safetensors -------------------------------------------------------------------------


def test_meta_short_edit_safetensors(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=LONG_META)
    before = path.read_bytes()
    n, _ = safetensors_header(path)
    r = run(capsys, "meta", path, "--delete", "note", "--set", "license=MIT")
    assert r.code == 0
    assert r.err == ""
    assert r.out.splitlines()[0] in UPDATED
    assert r.out.splitlines()[1:] == ["format: pt", "license: MIT"]
    after = path.read_bytes()
    assert len(after) == len(before)
    assert after[8 + n :] == before[8 + n :]  # the data region is untouched
    assert _ref_metadata(path) == {"format": "pt", "license": "MIT"}
    _assert_tensors(path, MODEL)
    assert run_json(capsys, "meta", path)["metadata"] == {"format": "pt", "license": "MIT"}


def test_meta_edit_safetensors_by_rewrite(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    size = path.stat().st_size
    text = "d" * 500
    r = run(capsys, "meta", path, "--set", f"description={text}", "--set", "license=MIT")
    assert r.code == 0
    assert r.out.splitlines()[0] in UPDATED
    assert r.out.splitlines()[1:] == [
        f"description: {text[:117]}... (500 characters)",  # the echo is cut; the file is not
        "format: pt",
        "license: MIT",
        "note: hello world",
    ]
    assert path.stat().st_size > size
    assert _ref_metadata(path) == {**MODEL_META, "description": text, "license": "MIT"}
    _assert_tensors(path, MODEL)


def test_meta_edit_json(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=LONG_META)
    doc = run_json(capsys, "meta", path, "--delete", "note", "--set", "k=a=b", "--set", "e=")
    assert doc == {
        "schema": 1,
        "path": str(path),
        "metadata": {"format": "pt", "k": "a=b", "e": ""},
        "before": LONG_META,
        "method": doc["method"],
        "files": [str(path)],
    }
    assert doc["method"] in ("reflink", "copy")
    assert _ref_metadata(path) == {"format": "pt", "k": "a=b", "e": ""}
    doc = run_json(capsys, "meta", path, "--set", "big=" + "x" * 300)
    assert doc["method"] in ("reflink", "copy")
    assert doc["before"] == {"format": "pt", "k": "a=b", "e": ""}
    assert _ref_metadata(path)["big"] == "x" * 300
    _assert_tensors(path, MODEL)


def test_meta_clear(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    size = path.stat().st_size
    r = run(capsys, "meta", path, "--clear")
    assert r.code == 0
    assert r.out.splitlines()[0] in UPDATED
    assert len(r.out.splitlines()) == 1
    assert path.stat().st_size == size
    assert _ref_metadata(path) == {}
    _assert_tensors(path, MODEL)
    assert run_json(capsys, "meta", path)["metadata"] == {}
    # --clear first, then --set; --delete of an absent key is fine after --clear
    doc = run_json(capsys, "meta", path, "--clear", "--set", "a=1", "--delete", "nothing")
    assert doc["metadata"] == {"a": "1"}
    assert _ref_metadata(path) == {"a": "1"}
    _assert_tensors(path, MODEL)


def test_meta_edit_reference_written_file(tmp_path: Path, capsys: Any) -> None:
    from safetensors.numpy import save_file as ref_save

    path = tmp_path / "ref.safetensors"
    ref_save(dict(MODEL), str(path), metadata={"format": "np", "x": "123456789"})
    size = path.stat().st_size
    assert run(capsys, "meta", path, "--set", "x=1").code == 0
    assert path.stat().st_size == size
    assert _ref_metadata(path) == {"format": "np", "x": "1"}
    _assert_tensors(path, MODEL)


# -- editing zTensor -----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_meta_edit_ztensor(tmp_path: Path, capsys: Any, compression: str | None) -> None:
    path = write_zt(tmp_path / "m.zt", attributes=LONG_META, compression=compression)
    size = path.stat().st_size
    r = run(capsys, "meta", path, "--delete", "note", "--set", "license=MIT")
    assert r.code == 0
    assert r.out.splitlines()[0] in UPDATED
    assert r.out.splitlines()[1:] == ["format: pt", "license: MIT"]
    assert path.stat().st_size < size  # the manifest ends the file: no padding is left
    assert zt_manifest(path)[1]["attributes"] == {"format": "pt", "license": "MIT"}
    _assert_zt_tensors(path, MODEL)
    r = run(capsys, "meta", path, "--set", "description=" + "y" * 400)
    assert r.code == 0
    assert r.out.splitlines()[0] in UPDATED
    assert path.stat().st_size > size
    assert zt_manifest(path)[1]["attributes"] == {
        "description": "y" * 400,
        "format": "pt",
        "license": "MIT",
    }
    _assert_zt_tensors(path, MODEL)
    assert run_json(capsys, "meta", path, "--clear")["metadata"] == {}
    assert zt_manifest(path)[1].get("attributes", {}) == {}
    _assert_zt_tensors(path, MODEL)


# -- sharded checkpoints -------------------------------------------------------------------------


def _shards(tmp_path: Path, metas: list[dict[str, str]]) -> tuple[Path, list[dict[str, Any]]]:
    names = sorted(MODEL)
    groups = [{n: MODEL[n] for n in names[:3]}, {n: MODEL[n] for n in names[3:]}]
    return write_sharded(tmp_path / "ckpt", groups, list(metas)), groups


def test_meta_edit_sharded_checkpoint(tmp_path: Path, capsys: Any) -> None:
    index, groups = _shards(tmp_path, [{"format": "pt"}, {"format": "pt"}])
    files = sorted(index.parent.glob("*.safetensors"))
    doc = run_json(capsys, "meta", index, "--set", "license=MIT")
    assert doc["files"] == [str(f) for f in files]
    assert doc["metadata"] == {"format": "pt", "license": "MIT"}
    for f, tensors in zip(files, groups, strict=True):
        assert _ref_metadata(f) == {"format": "pt", "license": "MIT"}
        _assert_tensors(f, tensors)
    r = run(capsys, "meta", index.parent, "--delete", "license")
    assert r.code == 0
    assert r.out.splitlines()[0].startswith("updated 2 files atomically (tensor bytes ")
    for f in files:
        assert _ref_metadata(f) == {"format": "pt"}


def test_meta_delete_key_of_one_shard_is_all_or_nothing(tmp_path: Path, capsys: Any) -> None:
    # "only1" is in the first shard only (`meta ckpt` does not list it: the shards disagree);
    # deleting it must either work everywhere or change nothing
    index, _ = _shards(tmp_path, [{"format": "pt", "only1": "x"}, {"format": "pt"}])
    files = sorted(index.parent.glob("*.safetensors"))
    assert run_json(capsys, "meta", index)["metadata"] == {"format": "pt"}
    r = run(capsys, "meta", index, "--delete", "only1")
    if r.code == 0:
        assert [_ref_metadata(f) for f in files] == [{"format": "pt"}, {"format": "pt"}]
    else:
        assert_one_error(r)
        assert _ref_metadata(files[0]) == {"format": "pt", "only1": "x"}, "half-done edit"


# -- bad edits -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "contains"),
    [
        (("--set", "foo"), "KEY=VALUE"),
        (("--set", "=v"), "KEY=VALUE"),
        (("--set", "ok=1", "--set", "broken"), "broken"),
        (("--delete", "missing"), "missing"),
    ],
)
@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_meta_bad_edit_changes_nothing(
    tmp_path: Path, capsys: Any, args: tuple[str, ...], contains: str, json_flag: tuple[str, ...]
) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    before = path.read_bytes()
    assert_one_error(run(capsys, "meta", path, *args, *json_flag), contains=contains)
    assert path.read_bytes() == before


def test_meta_edit_gguf_is_refused(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(tmp_path / "m.gguf", {"t": np.ones(4, np.float32)})
    before = path.read_bytes()
    for args in (("--set", "a=b"), ("--clear",), ("--delete", "general.architecture")):
        assert_one_error(run(capsys, "meta", path, *args), contains="GGUF")
        assert path.read_bytes() == before


# -- links, permissions, failed writes, foreign text ---------------------------------------------


@pytest.mark.parametrize("value", ["short", "l" * 20_000], ids=["short", "long"])
@pytest.mark.parametrize("case", ["hard link", "read-only file"])
def test_meta_refusals_are_one_line_that_names_the_edit(
    tmp_path: Path, capsys: Any, value: str, case: str
) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=LONG_META)
    before = path.read_bytes()
    if case == "hard link":
        os.link(path, tmp_path / "same.safetensors")
    else:
        path.chmod(0o444)
    message = assert_one_error(run(capsys, "meta", path, "--set", f"note={value}"))
    assert message.startswith(f"cannot edit {path}: "), message
    assert ("2 hard links" if case == "hard link" else "read-only (mode 0444)") in message
    assert "cannot read" not in message
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["m.safetensors", *(["same.safetensors"] if case == "hard link" else [])]
    )


def test_meta_through_a_symlink_edits_its_target(tmp_path: Path, capsys: Any) -> None:
    real = write_zt(tmp_path / "blob.zt", attributes=LONG_META)
    link = tmp_path / "model.zt"
    link.symlink_to("blob.zt")
    for value in ("short", "l" * 20_000):
        assert run(capsys, "meta", link, "--set", f"note={value}").code == 0
        assert link.is_symlink() and os.readlink(link) == "blob.zt"
        assert zt_manifest(real)[1]["attributes"]["note"] == value
    assert sorted(os.listdir(tmp_path)) == ["blob.zt", "model.zt"]
    _assert_zt_tensors(link, MODEL)


def _limited_to(max_bytes: int) -> Any:
    """A child's set-up: files larger than ``max_bytes`` cannot be written (EFBIG), as on a
    file system that is full."""

    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return setup


def test_meta_a_failed_write_says_cannot_write_and_changes_nothing(tmp_path: Path) -> None:
    big = {"w": np.zeros((512, 1024), np.float32)}  # 2 MiB
    path = write_safetensors(tmp_path / "m.safetensors", big, LONG_META)
    before = path.read_bytes()
    proc = subprocess.run(
        [str(SCRIPT), "meta", str(path), "--set", "license=MIT"],
        capture_output=True,
        text=True,
        preexec_fn=_limited_to(1 << 20),
        timeout=60,
        check=False,
    )
    r = Result(proc.returncode, proc.stdout, proc.stderr)
    message = assert_one_error(r, contains="cannot write")
    assert "cannot read" not in message
    assert "File too large" in message
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]  # the partial temporary file is gone


@pytest.mark.parametrize(
    ("args", "contains"),
    [
        (("--set", "\udcff=v"), "the metadata key '\\udcff' is not valid UTF-8"),
        (("--set", "k=caf\udce9"), "the metadata value 'caf\\udce9' of key 'k' is not valid"),
    ],
)
@pytest.mark.parametrize("suffix", [".safetensors", ".zt"])
def test_meta_non_utf8_arguments_are_one_clear_error(
    tmp_path: Path, args: tuple[str, ...], contains: str, suffix: str
) -> None:
    path = tmp_path / f"m{suffix}"
    if suffix == ".zt":
        write_zt(path, attributes=MODEL_META)
    else:
        write_safetensors(path, metadata=MODEL_META)
    before = path.read_bytes()
    for json_flag in ((), ("--json",)):
        assert_one_error(run_proc("meta", path, *args, *json_flag), contains=contains)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]


def test_meta_on_a_file_whose_name_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / os.fsdecode(b"mod\xe8le.safetensors")  # a Latin-1 file name
    write_safetensors(path, metadata=MODEL_META)
    r = run_proc("meta", path, "--set", "license=MIT", "--json")
    assert (r.code, r.err) == (0, ""), r
    doc = strict_json(r.out)
    assert doc["metadata"] == {**MODEL_META, "license": "MIT"}
    assert doc["path"].endswith("mod\\xe8le.safetensors")
    r = run_proc("meta", path)
    assert (r.code, r.err) == (0, ""), r
    assert r.out.splitlines() == ["format: pt", "license: MIT", "note: hello world"]
    assert _ref_metadata(path) == {**MODEL_META, "license": "MIT"}


def test_meta_ztensor_with_cbor_tags_in_extra_keys(tmp_path: Path, capsys: Any) -> None:
    path = write_zt(tmp_path / "m.zt", attributes=MODEL_META)
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[-8:])
    raw = blob[-8 - n : -8]
    extra = cbor2.dumps("x-created") + b"\xc1" + cbor2.dumps(1_700_000_000)  # tag 1: a date
    manifest = bytes([raw[0] + 1]) + raw[1:] + extra
    path.write_bytes(blob[: -8 - n] + manifest + struct.pack("<Q", len(manifest)))
    for value in ("x", "y" * 5000):
        doc = run_json(capsys, "meta", path, "--set", f"license={value}")
        assert doc["metadata"] == {**MODEL_META, "license": value}
        (n,) = struct.unpack("<Q", path.read_bytes()[-8:])
        assert extra in path.read_bytes()[-8 - n : -8]
    _assert_zt_tensors(path, MODEL)
