"""A FIFO, a device, a directory or a socket given as a tensor file is refused before anything
can block: opening a FIFO for reading waits for a writer, reading a device may never end.

Each entry point runs in a thread with a deadline (:func:`tests.formats.limits.finishes`): a
call that blocks fails the test instead of stalling the suite, and is released by opening
the FIFO's other end.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import formats, ztensor
from tensorfile.errors import (
    InvalidArgumentError,
    SafetensorError,
    SourceError,
    ZTensorError,
)
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tensorfile.sources import LocalSource
from tests.formats.limits import finishes

ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "LocalSource": LocalSource,
    "tensorfile.open": tensorfile.open,
    "formats.read_catalog": formats.read_catalog,
    "safe_open": lambda p: safe_open(p, framework="np"),
    "safetensors.numpy.load_file": st_numpy.load_file,
    "ztensor.open": ztensor.open,
    "ztensor.load_file": ztensor.load_file,
}
"""Every way a local path becomes a reader."""

FORMAT_ERROR: dict[str, type[Exception]] = {
    "safe_open": SafetensorError,
    "safetensors.numpy.load_file": SafetensorError,
    "ztensor.open": ZTensorError,
    "ztensor.load_file": ZTensorError,
}


def _release(fifo: Path) -> Callable[[], None]:
    """Open the FIFO's writing end (which lets a reader blocked in open() go), then close it."""

    def release() -> None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return release


def _refused(entry: str, path: Path, kind: str, unblock: Callable[[], None] | None = None) -> None:
    done = finishes(lambda: ENTRY_POINTS[entry](str(path)), timeout=10, unblock=unblock)
    err = done.error
    assert isinstance(err, SourceError), f"{entry} gave {done.value!r} / {err!r}"
    assert isinstance(err, FORMAT_ERROR.get(entry, SourceError))
    assert kind in str(err) and path.name in str(err), str(err)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "model.safetensors"
    os.mkfifo(path)
    yield path
    _release(path)()


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("suffix", [".safetensors", ".zt", ".gguf", ""])
def test_fifo_is_refused_without_blocking(tmp_path: Path, entry: str, suffix: str) -> None:
    path = tmp_path / f"model{suffix}"
    os.mkfifo(path)
    try:
        _refused(entry, path, "is a FIFO", unblock=_release(path))
    finally:
        _release(path)()


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_symlink_to_a_fifo_is_refused(tmp_path: Path, fifo: Path, entry: str) -> None:
    link = tmp_path / "link.safetensors"
    link.symlink_to(fifo)
    done = finishes(lambda: ENTRY_POINTS[entry](str(link)), unblock=_release(fifo))
    assert isinstance(done.error, SourceError) and "is a FIFO" in str(done.error)


def test_fifo_with_a_writer_is_refused_too(fifo: Path) -> None:
    # a writer holds the other end open and has written a valid file's bytes: still refused
    blob = st_numpy.save({"w": np.zeros(2, np.float32)})
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # (a writer's open needs a reader)
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, blob)
        for entry in ENTRY_POINTS:
            _refused(entry, fifo, "is a FIFO")
    finally:
        os.close(writer)
        os.close(reader)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_character_device_is_refused(device: str, entry: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    _refused(entry, Path(device), "is a character device")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_directory_is_refused(tmp_path: Path, entry: str) -> None:
    folder = tmp_path / "model.safetensors"
    folder.mkdir()
    _refused(entry, folder, "is a directory")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_unix_socket_is_refused(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "s.zt"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        _refused(entry, path, "is a socket")


def test_regular_file_is_read_blocking(tmp_path: Path) -> None:
    # opened with O_NONBLOCK (so that a FIFO cannot block the open), then set blocking again
    path = tmp_path / "m.safetensors"
    st_numpy.save_file({"w": np.arange(3, dtype=np.int8)}, str(path))
    with LocalSource(path) as src:
        assert not fcntl.fcntl(src._fd, fcntl.F_GETFL) & os.O_NONBLOCK
        assert src.read(0, 8) == path.read_bytes()[:8]
    assert st_numpy.load_file(str(path))["w"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "path",
    ["nul\x00byte.safetensors", "\ud800.safetensors", b"nul\x00byte"],
    ids=["nul", "lone-surrogate", "bytes-nul"],
)
def test_paths_the_os_cannot_take(path: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        LocalSource(path)
    if isinstance(path, str):
        for entry in ("safe_open", "safetensors.numpy.load_file", "ztensor.open"):
            with pytest.raises(InvalidArgumentError):
                ENTRY_POINTS[entry](path)


@pytest.mark.parametrize("path", [123, None, 1.5, ["a"]])
def test_path_of_the_wrong_type(path: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        LocalSource(path)
    with pytest.raises(InvalidArgumentError):
        safe_open(path, framework="np")
    with pytest.raises(InvalidArgumentError):
        ztensor.open(path)


def test_missing_file_is_a_source_error(tmp_path: Path) -> None:
    for entry in ENTRY_POINTS:
        with pytest.raises(SourceError, match="No such file"):
            ENTRY_POINTS[entry](str(tmp_path / "absent.safetensors"))
