"""Which filesystem a local file is on, from the kernel's mount table.

Reading a file through page faults (a lazy mapping) is fast on a local disk and 30-50x slow
on a network or FUSE filesystem, where every fault is a round trip. :func:`mount_of` finds
the mount a path lives on in ``/proc/self/mountinfo`` (the mount whose device matches the
file's ``st_dev`` and whose mount point is the longest prefix of the file's real path; the
longest prefix alone where no device matches, as on btrfs subvolumes), and :func:`kind_of`
sorts filesystem types into ``"local"``, ``"memory"``, ``"network"``, ``"fuse"`` and
``"virtual"``. Where there is no mount table (not Linux) the kind is ``"unknown"``.

Example:
    >>> line = r"36 25 0:32 / /mnt/my\\040data rw - nfs4 srv:/export rw,vers=4.2"
    >>> m = parse_mountinfo(line)[0]
    >>> m.point, m.fstype, m.kind
    ('/mnt/my data', 'nfs4', 'network')
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

__all__ = ["Mount", "kind_of", "mount_of", "parse_mountinfo"]

MOUNTINFO = "/proc/self/mountinfo"

# Filesystems whose pages come over a network (or through a user-space daemon): a page
# fault there is a round trip, so a lazy mapping is never their default.
_NETWORK = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "lustre", "ceph",
        "cephfs", "gpfs", "beegfs", "glusterfs", "9p", "v9fs", "drvfs", "virtiofs", "panfs",
        "orangefs", "pvfs2", "ocfs2", "gfs2", "wekafs", "quobyte", "davfs", "vboxsf",
        "prl_fs", "vmhgfs",
    }
)  # fmt: skip
_MEMORY = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs", "shm"})
_VIRTUAL = frozenset(
    {
        "proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
        "pstore", "bpf", "configfs", "efivarfs", "mqueue", "autofs", "binfmt_misc", "fusectl",
        "nsfs", "overlay-virtual",
    }
)  # fmt: skip

_ESCAPE = re.compile(r"\\([0-7]{3})")


class Mount(NamedTuple):
    """One line of the mount table: where it is mounted, what and from where."""

    point: str
    """The mount point, unescaped (``\\040`` is a space)."""
    fstype: str
    """The filesystem type (``ext4``, ``nfs4``, ``fuse.sshfs`` ...)."""
    source: str
    """What is mounted (``/dev/vda``, ``server:/export`` ...)."""
    dev: tuple[int, int] | None
    """The ``(major, minor)`` device numbers, None where the line has none."""

    @property
    def kind(self) -> str:
        """:func:`kind_of` the filesystem type: ``local``, ``network``, ``fuse`` ..."""
        return kind_of(self.fstype)


def _unescape(field: str) -> str:
    r"""A field of the mount table with its octal escapes (``\040``, ``\011``, ``\012``,
    ``\134``) decoded; the bytes are the path's own (``surrogateescape``)."""
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)
    return os.fsdecode(raw.encode("latin-1", "surrogateescape"))


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` text, in its order; a line that does not
    have the format's fields (``ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - TYPE
    SOURCE ...``) is skipped.

    Example:
        >>> text = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\\ngarbage\\n"
        >>> [(m.point, m.fstype, m.dev) for m in parse_mountinfo(text)]
        [('/', 'ext4', (8, 1))]
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 2 or not fields[4].startswith("/"):
            continue
        major, _, minor = fields[2].partition(":")
        dev = (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
        source = _unescape(fields[sep + 2]) if len(fields) > sep + 2 else ""
        mounts.append(Mount(_unescape(fields[4]), _unescape(fields[sep + 1]), source, dev))
    return mounts


def _read_table(path: str) -> list[Mount]:
    try:
        with open(path, "rb") as f:  # (bytes.decode's latin-1 loads no codec module)
            return parse_mountinfo(f.read().decode("latin-1"))
    except OSError:
        return []


def _under(path: str, point: str) -> bool:
    """Whether ``path`` is ``point`` or inside it (component-wise, not a string prefix)."""
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def mount_of(
    path: str | os.PathLike[str], *, dev: int | None = None, table: str | None = None
) -> Mount | None:
    """The mount ``path`` is on, or None where the table cannot be read or has no match.

    The path is resolved (symlinks and ``..``) first. Of the mounts whose point contains
    it, those whose device matches the file's ``st_dev`` (``dev``, or the path's) win; among
    equals the longest point wins, and among mounts on the same point the last one (it hides
    the ones below). ``table``: another mount table to read (default :data:`MOUNTINFO`).

    Example:
        >>> m = mount_of("/")
        >>> m is None or m.point == "/"
        True
    """
    real = os.path.realpath(os.fspath(path))
    if dev is None:
        try:
            dev = os.stat(real).st_dev
        except OSError:
            pass
    numbers = None if dev is None else (os.major(dev), os.minor(dev))
    best: tuple[bool, int, int] | None = None
    found = None
    for index, mount in enumerate(_read_table(MOUNTINFO if table is None else table)):
        if not _under(real, mount.point):
            continue
        rank = (numbers is not None and mount.dev == numbers, len(mount.point), index)
        if best is None or rank > best:
            best, found = rank, mount
    return found


def kind_of(fstype: str) -> str:
    """``"network"`` (NFS, SMB, Lustre, CephFS, GPFS, 9p, WSL's drvfs, virtiofs ...),
    ``"fuse"`` (any ``fuse``/``fuse.*``/``fuseblk``), ``"memory"`` (tmpfs, ramfs),
    ``"virtual"`` (proc, sysfs ...), ``"unknown"`` (empty) or ``"local"`` (anything else:
    a block device's filesystem).

    Example:
        >>> [kind_of(t) for t in ("ext4", "fuse.sshfs", "lustre", "tmpfs", "proc")]
        ['local', 'fuse', 'network', 'memory', 'virtual']
    """
    name = fstype.lower()
    if not name:
        return "unknown"
    if name in ("fuse", "fuseblk") or name.startswith("fuse."):
        return "fuse"
    base = name.split(".", 1)[0]
    if name in _NETWORK or base in _NETWORK:
        return "network"
    if name in _MEMORY:
        return "memory"
    if name in _VIRTUAL:
        return "virtual"
    return "local"
