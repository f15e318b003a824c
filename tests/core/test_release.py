"""The replaced file of an atomic commit is freed by a background thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tensorfile.core import release
from tensorfile.core.atomic import AtomicFile


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _commit(dest: Path, data: bytes) -> None:
    f = AtomicFile(dest)
    os.write(f.fd, data)
    f.commit()


def test_large_replaced_file_is_closed_by_the_worker(tmp_path: Path) -> None:
    dest = tmp_path / "big.bin"
    dest.write_bytes(b"o" * release.MIN_BYTES)
    before = _fds()
    _commit(dest, b"new")
    assert dest.read_bytes() == b"new"
    release.wait()
    assert _fds() == before  # the held descriptor is closed, none leaked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]


def test_small_fifo_symlink_and_linked_files_are_not_held(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"b" * release.MIN_BYTES)
    link = tmp_path / "link"
    link.symlink_to(big)
    hard = tmp_path / "hard"
    os.link(big, hard)
    before = _fds()
    # a FIFO must not block the open; a symlink is not followed; a file with another name
    # would not be freed by the rename anyway
    for p in (small, fifo, link, big, tmp_path / "missing"):
        assert release.hold(str(p)) == -1
    assert _fds() == before


def test_held_file_content_survives_until_released(tmp_path: Path) -> None:
    dest = tmp_path / "d.bin"
    dest.write_bytes(b"A" * release.MIN_BYTES)
    before = _fds()
    fd = release.hold(str(dest))
    assert fd >= 0
    other = tmp_path / "n.bin"
    other.write_bytes(b"B")
    os.replace(other, dest)
    assert os.pread(fd, 4, 0) == b"AAAA"  # the old inode is still there, unnamed
    release.release(fd)
    release.wait()
    assert _fds() == before


def test_failed_replace_closes_the_held_file(tmp_path: Path) -> None:
    dest = tmp_path / "keep.bin"
    dest.write_bytes(b"K" * release.MIN_BYTES)
    f = AtomicFile(dest)
    os.write(f.fd, b"new")
    before = _fds()

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "replace", boom)
    try:
        with pytest.raises(Exception, match="No space left"):
            f.commit()
    finally:
        mp.undo()
    assert dest.read_bytes()[:1] == b"K"
    assert _fds() <= before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.bin"]


def test_wait_with_many_releases_from_threads(tmp_path: Path) -> None:
    paths = []
    for i in range(4):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"z" * release.MIN_BYTES)
        paths.append(p)
    before = _fds()

    def replace(p: Path) -> None:
        _commit(p, b"done")

    threads = [threading.Thread(target=replace, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    release.wait()
    assert all(p.read_bytes() == b"done" for p in paths)
    assert _fds() == before
