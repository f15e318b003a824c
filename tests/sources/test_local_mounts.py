"""Which filesystem a file is on: the mount table parsed (escapes, odd lines), the mount a
path is on (device first, longest point, last mount wins), and the kinds of filesystems."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tensorfile.sources import LocalSource
from tensorfile.sources.local._mounts import kind_of, mount_of, parse_mountinfo


def _line(point: str, fstype: str, dev: str = "0:99", tags: str = "") -> str:
    tags = f" {tags}" if tags else ""
    return f"36 25 {dev} / {point} rw,relatime{tags} - {fstype} src rw"


def test_escaped_points_types_and_sources_are_decoded() -> None:
    text = (
        r"40 1 0:50 / /mnt/my\040models\011tab\134back rw shared:7 master:1 - "
        r"fuse.my\040fs user@host:/a\040b rw"
    )
    [m] = parse_mountinfo(text)
    assert m.point == "/mnt/my models\ttab\\back"
    assert m.fstype == "fuse.my fs"
    assert m.source == "user@host:/a b"
    assert m.dev == (0, 50)
    assert m.kind == "fuse"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "garbage",
        "36 25 0:1 / /x rw",  # no separator
        "36 25 0:1 / /x rw -",  # no type after it
        "36 25 0:1 / relative rw - ext4 /dev/x rw",  # a point that is not a path
        "- - - - - - -",
    ],
)
def test_lines_without_the_fields_are_skipped(line: str) -> None:
    assert parse_mountinfo(line + "\n" + _line("/ok", "ext4")) == parse_mountinfo(
        _line("/ok", "ext4")
    )


def test_odd_fields_are_tolerated() -> None:
    # a device that is not numbers, no source field, many optional tags
    [m] = parse_mountinfo("1 2 x:y / /p rw a:1 b:2 c:3 - xfs")
    assert (m.point, m.fstype, m.source, m.dev) == ("/p", "xfs", "", None)
    # a non-UTF-8 byte in a path (octal escape of 0xff) survives as the path's own byte
    [m] = parse_mountinfo(r"1 2 0:1 / /p\377q rw - ext4 /dev/x rw")
    assert os.fsencode(m.point) == b"/p\xffq"


def _table(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_longest_mount_point_wins_component_wise(tmp_path: Path) -> None:
    target = tmp_path / "ab" / "f"
    target.parent.mkdir()
    target.write_bytes(b"x")
    a = str(tmp_path / "a")
    table = _table(
        tmp_path,
        _line("/", "ext4"),
        _line(str(tmp_path), "nfs4"),
        _line(a, "tmpfs"),  # /…/a is a prefix of /…/ab as text, not as a path
    )
    m = mount_of(target, table=table, dev=os.makedev(1, 1))
    assert m is not None and m.fstype == "nfs4"


def test_the_device_match_beats_a_longer_point(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"x")
    dev = os.stat(target).st_dev
    numbers = f"{os.major(dev)}:{os.minor(dev)}"
    table = _table(tmp_path, _line("/", "ext4", numbers), _line(str(tmp_path), "nfs4", "0:1"))
    m = mount_of(target, table=table)
    assert m is not None and m.fstype == "ext4"  # the file's st_dev is the root's


def test_the_last_mount_on_a_point_hides_the_ones_below(tmp_path: Path) -> None:
    table = _table(tmp_path, _line("/", "ext4"), _line("/", "overlay"))
    m = mount_of(tmp_path, table=table, dev=os.makedev(7, 7))
    assert m is not None and m.fstype == "overlay"


def test_symlinks_are_resolved_before_matching(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_bytes(b"x")
    (tmp_path / "link").symlink_to(real)
    table = _table(tmp_path, _line("/", "ext4"), _line(str(real), "lustre"))
    m = mount_of(tmp_path / "link" / "f", table=table, dev=os.makedev(7, 7))
    assert m is not None and m.fstype == "lustre"


def test_no_table_or_no_match_is_none(tmp_path: Path) -> None:
    assert mount_of(tmp_path, table=str(tmp_path / "missing")) is None
    assert mount_of(tmp_path, table=_table(tmp_path, _line("/elsewhere", "ext4"))) is None


@pytest.mark.parametrize(
    ("fstype", "kind"),
    [
        ("ext4", "local"),
        ("xfs", "local"),
        ("btrfs", "local"),
        ("nfs", "network"),
        ("nfs4", "network"),
        ("cifs", "network"),
        ("smb3", "network"),
        ("lustre", "network"),
        ("ceph", "network"),
        ("gpfs", "network"),
        ("beegfs", "network"),
        ("9p", "network"),
        ("v9fs", "network"),
        ("drvfs", "network"),
        ("virtiofs", "network"),
        ("fuse", "fuse"),
        ("fuseblk", "fuse"),
        ("fuse.sshfs", "fuse"),
        ("fuse.glusterfs", "fuse"),
        ("FUSE.S3FS", "fuse"),
        ("tmpfs", "memory"),
        ("ramfs", "memory"),
        ("proc", "virtual"),
        ("sysfs", "virtual"),
        ("", "unknown"),
    ],
)
def test_kinds(fstype: str, kind: str) -> None:
    assert kind_of(fstype) == kind


def test_real_files_on_tmpfs_and_proc(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    path = shm / f"tensorfile-test-{os.getpid()}"
    path.write_bytes(b"x" * 10)
    try:
        with LocalSource(path) as src:
            m = src.mount()
            assert m is not None and m.kind == "memory"
    finally:
        path.unlink()
    with LocalSource("/proc/self/status") as src:  # a regular file of size 0
        m = src.mount()
        assert m is not None and m.kind == "virtual"
    (tmp_path / "f").write_bytes(b"x")
    with LocalSource(tmp_path / "f") as src:
        m = src.mount()
        assert m is not None and src.mount() is m  # looked up once


def test_a_file_opened_by_descriptor_is_found_by_its_real_path(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    with open(path, "rb") as f, LocalSource.from_fd(f.fileno(), "shown-name") as src:
        by_fd = src.mount()
    with LocalSource(path) as src:
        assert by_fd == src.mount()
