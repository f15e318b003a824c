"""Every error raised while opening a file names it: in the message, and as ``exc.path``.

Each format's valid file is cut short at several points and opened through every door
(``tensorfile.open``, the safetensors drop-in's ``safe_open`` and ``load_file``, the zTensor
face's ``open`` and ``load_file``): the error is tensorfile's, its message holds the path
(the safetensors parser's own words never did) and its attributes are kept. A zTensor v2
file cut short says it looks truncated, and how long it was when its footer tells; the CLI
names the file exactly once.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import (
    FormatError,
    IncompleteBufferError,
    SafetensorError,
    TensorFileError,
    ZTensorError,
)
from tensorfile.safetensors import safe_open
from tensorfile.safetensors.numpy import load_file as np_load_file
from tensorfile.safetensors.torch import load_file as pt_load_file
from tests.helpers.checkpoints import (
    MODEL,
    safetensors_header,
    write_gguf,
    write_safetensors,
    write_sharded,
)
from tests.helpers.cli import ERROR_PREFIX, run

# GGUF pads each tensor to 32 bytes: tensors of 64 bytes leave no padding after the last, so
# every cut removes data
GGUF_TENSORS = {f"t{i}": np.arange(16, dtype=np.float32) + i for i in range(3)}


def _write(kind: str, path: Path) -> Path:
    if kind == "safetensors":
        return write_safetensors(path)
    if kind == "zt1":
        ztensor.save_file(MODEL, path)
    elif kind == "zt2":
        ztensor.save_file(MODEL, path, version=2)
    elif kind == "gguf":
        write_gguf(path, GGUF_TENSORS)
    elif kind == "npz":
        np.savez(path, **MODEL)
    elif kind == "npy":
        np.save(path, MODEL["lm_head.weight"])
    return path


SUFFIX = {
    "safetensors": ".safetensors",
    "zt1": ".zt",
    "zt2": ".zt",
    "gguf": ".gguf",
    "npz": ".npz",
    "npy": ".npy",
}


def _cuts(size: int) -> list[int]:
    """Where to cut a file of ``size`` bytes: in its first bytes, its header, its middle
    and its last bytes."""
    points = {9, 17, 33, 100, size // 3, size // 2, size - 41, size - 17, size - 1}
    return sorted(p for p in points if 0 < p < size)


def _raises(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("no error")


def _assert_named(exc: BaseException, path: Path, kind: type[BaseException]) -> None:
    assert isinstance(exc, kind), repr(exc)
    assert str(path) in str(exc), str(exc)
    assert exc.path == str(path)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", list(SUFFIX))
def test_a_cut_file_is_named_by_tensorfile_open(tmp_path: Path, kind: str) -> None:
    whole = _write(kind, tmp_path / f"whole{SUFFIX[kind]}")
    with tensorfile.open(whole) as r:  # the whole file opens and reads: the cuts are the fault
        r.get_tensors()
    data = whole.read_bytes()
    for cut in _cuts(len(data)):
        path = tmp_path / f"cut-{cut}{SUFFIX[kind]}"
        path.write_bytes(data[:cut])

        def read(p: Path = path) -> None:
            with tensorfile.open(p) as r:
                r.get_tensors()

        _assert_named(_raises(read), path, TensorFileError)
        catalog_error = _raises(lambda p=path: tensorfile.formats.read_catalog(p))
        _assert_named(catalog_error, path, TensorFileError)


@pytest.mark.parametrize("cut", [9, 12, 100, 600, -100, -1])
def test_a_cut_safetensors_file_is_named_by_every_door(tmp_path: Path, cut: int) -> None:
    data = write_safetensors(tmp_path / "whole.safetensors").read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:cut])
    doors: dict[str, Callable[[], Any]] = {
        "tensorfile.open": lambda: tensorfile.open(path),
        "safe_open np": lambda: safe_open(path, "np"),
        "safe_open pt": lambda: safe_open(str(path), "pt"),
        "numpy load_file": lambda: np_load_file(path),
        "torch load_file": lambda: pt_load_file(path),
    }
    for door, fn in doors.items():
        exc = _raises(fn)
        _assert_named(exc, path, SafetensorError if door != "tensorfile.open" else FormatError)
        assert str(exc).count(str(path)) == 1, door


def test_the_attributes_are_kept(tmp_path: Path) -> None:
    data = write_safetensors(tmp_path / "whole.safetensors").read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:-4])
    exc = _raises(lambda: tensorfile.open(path))
    assert isinstance(exc, IncompleteBufferError)
    assert exc.format == "safetensors" and exc.path == str(path)
    n, header = safetensors_header(tmp_path / "whole.safetensors")
    header.pop("__metadata__", None)
    cut_short = {k for k, t in header.items() if 8 + n + t["data_offsets"][1] > len(data) - 4}
    assert cut_short and set(exc.past_end) == cut_short
    assert str(exc).startswith(f"{path}: tensor data ends at byte {len(data)}")


def test_bytes_in_memory_are_not_named(tmp_path: Path) -> None:
    data = write_safetensors(tmp_path / "whole.safetensors").read_bytes()
    exc = _raises(lambda: tensorfile.open(data[:-4]))
    assert isinstance(exc, IncompleteBufferError)
    assert exc.path is None and not str(exc).startswith("<")


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("cut", [5, 20, 700, -60, -30, -1])
def test_a_cut_ztensor_file_is_named_by_its_face(tmp_path: Path, version: int, cut: int) -> None:
    whole = tmp_path / "whole.zt"
    ztensor.save_file(MODEL, whole, version=version)
    path = tmp_path / "cut.zt"
    path.write_bytes(whole.read_bytes()[:cut])
    for fn in (lambda: ztensor.open(path), lambda: ztensor.load_file(path)):
        _assert_named(_raises(fn), path, ZTensorError)


@pytest.mark.parametrize("missing", [1, 5, 16, 24])
def test_a_v2_file_cut_in_its_footer_says_how_long_it_was(tmp_path: Path, missing: int) -> None:
    whole = tmp_path / "whole.zt"
    ztensor.save_file(MODEL, whole, version=2)
    data = whole.read_bytes()
    path = tmp_path / "cut.zt"
    path.write_bytes(data[:-missing])
    exc = _raises(lambda: tensorfile.open(path))
    assert isinstance(exc, ZTensorError)
    message = str(exc)
    assert message.startswith(f"{path} looks truncated: it begins with the zTensor v2 magic")
    assert "does not end with the zTensor v2 magic" not in message  # the old words
    assert f"whole, it is {len(data):,} bytes long ({missing:,} bytes are missing" in message


@pytest.mark.parametrize("missing", [25, 39, 40, 41, 1000, "half"])
def test_a_v2_file_cut_deeper_looks_truncated(tmp_path: Path, missing: int | str) -> None:
    whole = tmp_path / "whole.zt"
    ztensor.save_file(MODEL, whole, version=2)
    data = whole.read_bytes()
    keep = len(data) // 2 if missing == "half" else len(data) - int(missing)
    path = tmp_path / "cut.zt"
    path.write_bytes(data[:keep])
    message = str(_raises(lambda: tensorfile.open(path)))
    assert message.startswith(f"{path} looks truncated")
    assert "how long it was cannot be told" in message
    assert "bytes long" not in message  # no size is made up


def test_a_v2_file_shorter_than_its_frame_looks_truncated(tmp_path: Path) -> None:
    whole = tmp_path / "whole.zt"
    ztensor.save_file(MODEL, whole, version=2)
    path = tmp_path / "cut.zt"
    path.write_bytes(whole.read_bytes()[:30])
    message = str(_raises(lambda: tensorfile.open(path)))
    assert message.startswith(f"{path}: 30 bytes is too short for a zTensor v2 file")
    assert message.endswith("it begins like one, so it looks truncated")


def test_a_v2_footer_damaged_in_place_is_not_given_a_size(tmp_path: Path) -> None:
    whole = tmp_path / "whole.zt"
    ztensor.save_file(MODEL, whole, version=2)
    data = bytearray(whole.read_bytes())
    data[-1] ^= 0xFF  # the last magic byte, the footer otherwise whole
    path = tmp_path / "damaged.zt"
    path.write_bytes(bytes(data))
    message = str(_raises(lambda: tensorfile.open(path)))
    assert "how long it was cannot be told" in message


def test_a_cut_npz_says_it_looks_truncated(tmp_path: Path) -> None:
    whole = tmp_path / "whole.npz"
    np.savez(whole, **MODEL)
    path = tmp_path / "cut.npz"
    path.write_bytes(whole.read_bytes()[:-30])
    exc = _raises(lambda: tensorfile.open(path))
    assert isinstance(exc, FormatError) and exc.format == "npz"
    assert str(exc).startswith(f"{path} looks truncated: it is a zip archive whose first member")
    # a zip of something else, cut short, is still only "a zip archive"
    other = tmp_path / "docs.npz"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("readme.txt", "hello" * 100)
    cut_other = tmp_path / "docs-cut.npz"
    cut_other.write_bytes(other.read_bytes()[:-30])
    assert "looks like a zip archive" in str(_raises(lambda: tensorfile.open(cut_other)))


def test_a_cut_checkpoint_names_the_index_and_the_shard(tmp_path: Path) -> None:
    shards = [{"a": np.ones(64, np.float32)}, {"b": np.zeros(64, np.float32)}]
    index = write_sharded(tmp_path / "ck", shards)
    with tensorfile.open(index.parent) as ck:
        ck.get_tensors()
    shard = index.parent / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with tensorfile.open(index.parent) as ck:
        ck.get_tensor("a")
        exc = _raises(lambda: ck.get_tensor("b"))
    assert isinstance(exc, IncompleteBufferError)
    assert exc.path == str(shard) and exc.past_end == ("b",)
    assert str(exc).startswith(f"{index}: shard {shard.name}: tensor data ends at byte")
    # the index itself cut short
    text = index.read_text()
    for cut in (1, len(text) // 2, len(text) - 1):
        index.write_text(text[:cut])
        for target in (index, index.parent):
            exc = _raises(lambda t=target: tensorfile.open(t))
            _assert_named(exc, index, TensorFileError)
    index.write_text(json.dumps({"weight_map": {}}))


@pytest.mark.parametrize("kind", list(SUFFIX))
def test_the_cli_names_the_file_once(tmp_path: Path, capsys: Any, kind: str) -> None:
    whole = _write(kind, tmp_path / f"whole{SUFFIX[kind]}")
    data = whole.read_bytes()
    path = tmp_path / f"cut{SUFFIX[kind]}"
    path.write_bytes(data[: len(data) // 2])
    for argv in (
        ["inspect", path],
        ["summary", path],
        ["id", path],
        ["convert", path, tmp_path / "out.safetensors"],
        ["inspect", whole, path],
        ["inspect", whole, path.as_uri()],  # the URL's local path is the same file
    ):
        got = run(capsys, *argv)
        assert got.code == 2, argv
        errors = [line for line in got.err.splitlines() if line.startswith(ERROR_PREFIX)]
        assert errors, (argv, got.err)
        assert errors[0].count(str(path)) == 1, (argv, errors[0])
