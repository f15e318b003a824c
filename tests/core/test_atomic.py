"""``tensorfile.core.atomic``: a temporary file in the destination's folder, renamed into
place only when the body succeeds, its mode following the umask; temporary files that a
killed writer left are recognisable and removed by the next write to the same destination,
never one a live writer holds; ``rewrite`` (what metadata edits use) keeps mode and owner,
follows symlinks, refuses hard links and read-only files, and clones where it can."""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tensorfile.core.atomic import (
    AtomicFile,
    atomic_write,
    check_editable,
    is_temp_name,
    remove_stale_temps,
    rewrite,
)
from tensorfile.errors import SourceError
from tensorfile.safetensors.numpy import load_file, save_file
from tests.helpers.locks import held_lock, within
from tests.helpers.reflink import reflink_dir

__all__ = ["reflink_dir"]  # a fixture


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
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o666, 0o750], ids=oct)
def test_a_replaced_file_keeps_its_mode_and_owner(old: Path, mode: int) -> None:
    """Review j07: a file written over another keeps its mode (a private 0600 file became
    0644) and, where permitted, its owner, as ``open(path, "w")`` and ``meta`` keep them;
    the temporary file is never wider than that while it is written."""
    os.umask(0o002)
    old.chmod(mode)
    if os.geteuid() == 0:
        os.chown(old, 1234, 5678)
    before = old.stat()
    with atomic_write(old) as fd:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == mode
        os.write(fd, b"x")
    after = old.stat()
    assert old.read_bytes() == b"x" and after.st_ino != before.st_ino
    assert _mode(old) == mode
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


_UNDEFINED = 0xFFFFFFFF
# owner rw, the user nobody r, the owning group nothing, the mask r, others nothing: the
# mode shows 0640 (with an ACL the group bits are the mask), the owning group may not read
_PRIVATE_ACL = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, uid)
    for tag, perm, uid in [
        (0x01, 6, _UNDEFINED),
        (0x02, 4, 65534),
        (0x04, 0, _UNDEFINED),
        (0x10, 4, _UNDEFINED),
        (0x20, 0, _UNDEFINED),
    ]
)


@pytest.mark.parametrize("how", ["atomic_write", "in an open folder", "rewrite"])
def test_a_file_kept_private_by_an_acl_keeps_its_acl(old: Path, how: str) -> None:
    """Review m11: a file whose POSIX ACL keeps its group out (mode 0640: the group bits are
    the ACL's mask) was replaced by a file of mode 0640 without the ACL: its whole group
    could read it (and the user the ACL named could not). The new file gets the ACL."""
    try:
        os.setxattr(old, "system.posix_acl_access", _PRIVATE_ACL)
    except OSError as exc:
        pytest.skip(f"this file system takes no POSIX ACL: {exc.strerror}")
    acl = os.getxattr(old, "system.posix_acl_access")
    assert _mode(old) == 0o640
    if how == "rewrite":
        assert rewrite(str(old), b"OLD", 3, 9, b"") == "copy"
    else:
        folder = os.open(old.parent, os.O_RDONLY) if how != "atomic_write" else None
        try:
            with atomic_write(old, dir_fd=folder) as fd:
                os.write(fd, b"new")
        finally:
            if folder is not None:
                os.close(folder)
    assert old.read_bytes() == (b"OLD contents" if how == "rewrite" else b"new")
    assert _mode(old) == 0o640
    assert os.getxattr(old, "system.posix_acl_access") == acl


def test_a_read_only_file_is_refused_never_replaced(
    old: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review j07b: ``save_file``, ``convert`` and every atomic write refuse a read-only
    destination (by its mode bits, for root too), as ``meta`` does; it was replaced and
    made writable (0644)."""
    from tests.helpers.cli import run

    source = old.parent / "source.safetensors"
    save_file({"x": np.ones(2, np.float32)}, source)
    dest = old.parent / "ro.safetensors"
    save_file({"x": np.zeros(2, np.float32)}, dest)
    dest.chmod(0o444)
    before = dest.read_bytes(), dest.stat().st_ino
    want = f"cannot write {dest}: the file is read-only (mode 0444); nothing was written"
    with pytest.raises(SourceError) as info:
        save_file({"x": np.ones(2, np.float32)}, dest)
    assert str(info.value) == want
    with pytest.raises(SourceError, match="read-only"):
        with atomic_write(dest) as fd:
            os.write(fd, b"x")
    result = run(capsys, "convert", source, dest)
    assert result.code == 2 and want in result.err
    assert (dest.read_bytes(), dest.stat().st_ino) == before
    assert _mode(dest) == 0o444
    assert sorted(p.name for p in old.parent.iterdir()) == sorted(
        [old.name, source.name, dest.name]
    )


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


# -- temporary files: recognisable, cleaned up after a killed writer, never a live one's -------

WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tensorfile.safetensors import StreamWriter

    w = StreamWriter(sys.argv[1], {"w": ("F32", (1024, 1024))})
    w.write("w", np.full((512, 1024), 7, np.float32))
    print("ready", flush=True)
    sys.stdin.readline()
    w.write("w", np.full((512, 1024), 7, np.float32))
    w.close()
    print("done", flush=True)
    """
)


def _writer(dest: Path) -> subprocess.Popen[str]:
    """A child process half-way through writing ``dest`` (it holds its temporary file)."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(dest)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


def _temps(folder: Path) -> list[str]:
    return sorted(p for p in os.listdir(folder) if p.endswith(".tmp"))


def test_temporary_files_have_a_recognisable_name(tmp_path: Path) -> None:
    dest = tmp_path / "m.bin"
    with atomic_write(dest) as fd:
        os.write(fd, b"x")
        (name,) = _temps(tmp_path)
        assert name.startswith(".m.bin.tensorfile-")
        assert is_temp_name(name, "m.bin")
        assert not is_temp_name(name, "m.bi")
    assert os.listdir(tmp_path) == ["m.bin"]


@pytest.mark.parametrize("next_write", ["save_file", "edit_metadata"])
def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(
    tmp_path: Path, next_write: str
) -> None:
    from tensorfile import ops

    dest = tmp_path / "m.safetensors"
    save_file({"w": np.zeros(4, np.float32)}, str(dest), {"k": "v"})
    child = _writer(dest)
    child.send_signal(signal.SIGKILL)
    child.wait()
    (left,) = _temps(tmp_path)
    assert is_temp_name(left, dest.name)
    assert (tmp_path / left).stat().st_size >= 2 << 20  # as large as what it had written
    if next_write == "save_file":
        save_file({"w": np.ones(4, np.float32)}, str(dest))
        assert load_file(str(dest))["w"].tolist() == [1, 1, 1, 1]
    else:
        ops.edit_metadata(str(dest), set={"k": "w"})
        assert ops.read_metadata(str(dest)) == {"k": "w"}
    assert os.listdir(tmp_path) == [dest.name]


def test_a_live_writers_temporary_file_survives_other_writes(tmp_path: Path) -> None:
    from tensorfile import ops

    dest = tmp_path / "m.safetensors"
    save_file({"w": np.zeros(4, np.float32)}, str(dest), {"k": "v"})
    child = _writer(dest)
    try:
        (live,) = _temps(tmp_path)
        save_file({"w": np.ones(4, np.float32)}, str(dest), {"k": "v"})
        ops.edit_metadata(str(dest), set={"k": "w"})
        assert remove_stale_temps(dest) == []
        assert _temps(tmp_path) == [live]
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert os.listdir(tmp_path) == [dest.name]
    assert load_file(str(dest))["w"].shape == (1024, 1024)  # the live writer's file won


def test_cleanup_touches_nothing_but_dead_writers_files(tmp_path: Path) -> None:
    dest = tmp_path / "m.bin"
    stale = tmp_path / ".m.bin.tensorfile-00000000000a.tmp"
    stale.write_bytes(b"left by a killed writer")
    outside = tmp_path / "outside"
    outside.write_bytes(b"a symlink's target")
    keep = {
        ".m.bin.0123456789ab.tmp": "file",  # another naming (older versions, other tools)
        ".other.bin.tensorfile-00000000000b.tmp": "file",  # another destination
        ".m.bin.tensorfile-0000000000zz.tmp": "file",  # not hex
        ".m.bin.tensorfile-00000000000c.tmp.part": "file",
        "m.bin.tensorfile-00000000000d.tmp": "file",  # not hidden
        ".m.bin.tensorfile-00000000000e.tmp": "fifo",
        ".m.bin.tensorfile-00000000000f.tmp": "symlink",
        ".m.bin.tensorfile-000000000010.tmp": "dir",
    }
    for name, kind in keep.items():
        if kind == "file":
            (tmp_path / name).write_bytes(b"keep")
        elif kind == "fifo":
            os.mkfifo(tmp_path / name)
        elif kind == "symlink":
            os.symlink(outside, tmp_path / name)
        else:
            (tmp_path / name).mkdir()
    with atomic_write(dest) as fd:
        os.write(fd, b"new")
    assert not stale.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, "m.bin", "outside"])
    assert outside.read_bytes() == b"a symlink's target"
    assert dest.read_bytes() == b"new"


def test_an_aborted_file_is_removed_and_a_committed_one_is_not_cleaned(tmp_path: Path) -> None:
    f = AtomicFile(tmp_path / "a.bin")
    os.write(f.fd, b"x")
    f.abort()
    assert os.listdir(tmp_path) == []
    f = AtomicFile(tmp_path / "a.bin")
    g = AtomicFile(tmp_path / "a.bin")  # the same process: its lock is still another file's
    assert os.path.exists(f.tmp) and os.path.exists(g.tmp)
    f.commit()
    g.abort()
    assert os.listdir(tmp_path) == ["a.bin"]


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_write_in_an_open_folder_stays_there_when_its_path_is_swapped(
    tmp_path: Path, end: str
) -> None:
    # dir_fd: made, renamed and removed in the folder that was opened, never through a
    # path that another process swapped for a symlink to an outside folder meanwhile
    real, away, outside = tmp_path / "real", tmp_path / "away", tmp_path / "outside"
    real.mkdir()
    outside.mkdir()
    (real / ".a.bin.tensorfile-00000000000a.tmp").write_bytes(b"dead writer's")
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(real, away)
        os.symlink(outside, real)
        (away / "d.bin").mkdir()
        with pytest.raises(SourceError, match="a directory"):
            AtomicFile(real / "d.bin", dir_fd=fd)  # (the check is made in the open folder)
        f = AtomicFile(real / "a.bin", dir_fd=fd)
        os.write(f.fd, b"data")
        getattr(f, end)()
        with atomic_write(real / "b.bin", dir_fd=fd, fsync=True) as wfd:
            os.write(wfd, b"more")
    finally:
        os.close(fd)
    assert os.listdir(outside) == []
    kept = ["a.bin", "b.bin"] if end == "commit" else ["b.bin"]
    assert sorted(os.listdir(away)) == [*kept, "d.bin"]  # (the dead writer's file: removed)
    assert (away / "b.bin").read_bytes() == b"more"


# -- rewrite: the edit primitive ------------------------------------------------------------------


def test_rewrite_keeps_mode_and_owner_and_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"HEADdata-data-dataTAIL")
    path.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(path, 1234, 5678)
    old = path.stat()
    assert rewrite(str(path), b"head!", 4, 14, b"tail!") == "copy"
    assert path.read_bytes() == b"head!data-data-datatail!"
    new = path.stat()
    assert new.st_ino != old.st_ino
    assert stat.S_IMODE(new.st_mode) == 0o640
    assert (new.st_uid, new.st_gid) == (old.st_uid, old.st_gid)
    assert os.listdir(tmp_path) == ["f.bin"]


def test_rewrite_follows_a_symlink_into_another_folder(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    real = tmp_path / "real" / "f.bin"
    real.write_bytes(b"0123456789")
    link = tmp_path / "links" / "f.bin"
    link.symlink_to(Path("..") / "real" / "f.bin")
    rewrite(str(link), b"ab", 2, 8, b"")
    assert link.is_symlink()
    assert os.readlink(link) == os.path.join("..", "real", "f.bin")
    assert real.read_bytes() == b"ab23456789"
    assert os.listdir(tmp_path / "real") == ["f.bin"]
    assert os.listdir(tmp_path / "links") == ["f.bin"]


@pytest.mark.parametrize("case", ["hard link", "read-only file", "read-only folder", "fifo"])
def test_rewrite_refuses_before_writing(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / "f.bin"
    if case == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"0123456789")
    if case == "hard link":
        os.link(path, tmp_path / "other-name.bin")
    elif case == "read-only file":
        path.chmod(0o444)
    elif case == "read-only folder":
        folder.chmod(0o555)
    try:
        want = {"hard link": "2 hard links", "fifo": "not a regular file"}.get(case, "read-only")
        with pytest.raises(SourceError, match=want) as info:
            rewrite(str(path), b"ab", 2, 8, b"")
        assert str(info.value).startswith(f"cannot edit {path}")
        with pytest.raises(SourceError, match=want):
            check_editable(str(path))
    finally:
        folder.chmod(0o755)
    if case != "fifo":
        assert path.read_bytes() == b"0123456789"
    assert os.listdir(folder) == ["f.bin"]


def test_rewrite_refuses_a_file_that_changed_since_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    seen = path.stat()
    path.write_bytes(b"0123456789+")
    with pytest.raises(SourceError, match="changed while it was being edited"):
        rewrite(str(path), b"ab", 2, 8, b"", expect=seen)
    assert path.read_bytes() == b"0123456789+"
    assert os.listdir(tmp_path) == ["f.bin"]


@pytest.mark.parametrize("delta", [0, 4096, 8192])
def test_rewrite_clones_where_the_file_system_can(reflink_dir: Path, delta: int) -> None:
    path = reflink_dir / "f.bin"
    blob = os.urandom(3 * 4096 + 100)
    path.write_bytes(blob)
    head = b"H" * (10 + delta)
    tail = b"the tail"
    assert rewrite(str(path), head, 10, len(blob) - 10 - 50, tail) == "reflink"
    assert path.read_bytes() == head + blob[10:-50] + tail
    assert rewrite(str(path), b"x", 0, 5, b"") == "copy"  # moved by 1 byte: no clone
    assert path.read_bytes() == b"x" + head[:5]
    assert os.listdir(reflink_dir) == ["f.bin"]


def test_a_destination_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    """Renaming over /dev/null or a FIFO would replace the node itself: refused, untouched."""
    from tensorfile.safetensors.numpy import save_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    targets = [fifo]
    if os.geteuid() == 0:  # making a device node needs root; the FIFO covers the rest
        dev = tmp_path / "null"
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets.append(dev)
    for target in targets:
        kind = stat.S_IFMT(os.lstat(target).st_mode)
        with pytest.raises(SourceError, match="not a regular file"):
            save_file({"a": np.zeros(2, np.float32)}, str(target))
        with pytest.raises(SourceError, match="not a regular file"):
            with atomic_write(target) as fd:
                os.write(fd, b"x")
        assert stat.S_IFMT(os.lstat(target).st_mode) == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.name for t in targets)


def test_a_temporary_file_another_process_locked_first_is_never_waited_on(tmp_path: Path) -> None:
    # any user who can read the folder can open a fresh temporary file and flock it before
    # its writer does: the writer gives it up (another name is made), it never waits
    from tensorfile.core import atomic

    tmp = tmp_path / ".x.bin.tensorfile-00000000000a.tmp"
    tmp.write_bytes(b"")
    fd = os.open(tmp, os.O_RDWR)
    try:
        with held_lock(tmp):
            assert within(30, lambda: atomic._lock_own(fd, str(tmp))) is False
    finally:
        os.close(fd)
    with atomic_write(tmp_path / "x.bin") as out:  # (and a writer still writes)
        os.write(out, b"ok")
    assert (tmp_path / "x.bin").read_bytes() == b"ok"
