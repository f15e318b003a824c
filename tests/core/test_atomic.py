"""``tensorfile.core.atomic.atomic_write``: a temporary file in the destination's folder,
renamed into place only when the body succeeds; its mode follows the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfile.core.atomic import atomic_write
from tensorfile.errors import SourceError


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """An existing file with known bytes and mode."""
    path = tmp_path / "model.bin"
    path.write_bytes(b"old contents")
    path.chmod(0o640)
    return path


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process umask after a test that changes it."""
    saved = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(saved)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_success_replaces_the_file_and_leaves_nothing_else(old: Path) -> None:
    with atomic_write(old) as fd:
        os.write(fd, b"new")
        assert old.read_bytes() == b"old contents"  # not visible before the body ends
    assert old.read_bytes() == b"new"
    assert os.listdir(old.parent) == [old.name]


def test_a_new_file_is_created(tmp_path: Path) -> None:
    path = tmp_path / "fresh.bin"
    with atomic_write(str(path), fsync=True) as fd:
        os.write(fd, b"abc")
    assert path.read_bytes() == b"abc"
    assert os.listdir(tmp_path) == ["fresh.bin"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failing_body_leaves_the_old_file_and_no_temporary(old: Path, exc: BaseException) -> None:
    before = old.stat()
    with pytest.raises(type(exc)):
        with atomic_write(old) as fd:
            os.write(fd, b"partial data that must never be seen")
            raise exc
    assert old.read_bytes() == b"old contents"
    assert _mode(old) == 0o640
    assert old.stat().st_ino == before.st_ino
    assert os.listdir(old.parent) == [old.name]


def test_an_os_error_in_the_body_is_a_source_error(old: Path) -> None:
    with pytest.raises(SourceError, match=r"model\.bin"):
        with atomic_write(old) as fd:
            os.write(fd, b"x")
            raise OSError(28, "No space left on device")
    assert old.read_bytes() == b"old contents"
    assert os.listdir(old.parent) == [old.name]


def test_a_failing_body_without_an_old_file_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stop"):
        with atomic_write(tmp_path / "never.bin") as fd:
            os.write(fd, b"x")
            raise ValueError("stop")
    assert os.listdir(tmp_path) == []


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_mode_follows_the_umask(tmp_path: Path, mask: int) -> None:
    os.umask(mask)
    path = tmp_path / "atomic.bin"
    with atomic_write(path) as fd:
        os.write(fd, b"x")
    assert _mode(path) == 0o666 & ~mask
    with open(tmp_path / "plain.bin", "w"):  # what open() gives, for comparison
        pass
    assert _mode(path) == _mode(tmp_path / "plain.bin")


@pytest.mark.usefixtures("umask")
def test_mode_of_a_replaced_file_follows_the_umask(old: Path) -> None:
    os.umask(0o002)
    with atomic_write(old) as fd:
        os.write(fd, b"x")
    assert _mode(old) == 0o664


def test_a_directory_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(SourceError, match="directory"):
        with atomic_write(tmp_path / "d"):
            pytest.fail("the body must not run")
    assert os.listdir(tmp_path) == ["d"]
    assert os.listdir(tmp_path / "d") == []


def test_a_missing_folder_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError):
        with atomic_write(tmp_path / "missing" / "x.bin"):
            pytest.fail("the body must not run")
    assert os.listdir(tmp_path) == []
