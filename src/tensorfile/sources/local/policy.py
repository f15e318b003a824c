"""The local read policy: how one open local file is read, decided once, in one place.

:func:`decide` looks at an open file (a :class:`~.local.LocalSource`) once: the mount it is
on (``/proc/self/mountinfo``, :mod:`._mounts`) and, where it matters, how much of it is in
the page cache (``cachestat``/``mincore``, :mod:`._pagecache`). From that it chooses:

* the backend of ``load_file(backend="auto")``: ``"pread"`` (owned tensors read in
  parallel) on a network or FUSE filesystem (NFS, SMB, Lustre, CephFS, GPFS, BeeGFS, 9p,
  WSL's drvfs, virtiofs, any ``fuse.*``), where a page fault is a round trip and faulting a
  model in page by page is 30-50x slower than reading it in large pieces; ``"mmap"`` (lazy
  tensors over a private mapping, the reference's meaning) on tmpfs/ramfs and on a local
  disk;
* whether the mapping is first *read ahead* in parallel (``MADV_POPULATE_READ`` on 8
  threads): on a local disk when less than :data:`WARM_FROM` of the file is cached, unless
  the tensors are copies anyway (``owned``) or the file is larger than half the machine's
  memory (its first pages would be dropped before use);
* whether copies of it are read with ``O_DIRECT`` (``direct``): on a local disk when less
  than :data:`COLD_BELOW` of the file is cached, for reads of :data:`DIRECT_MIN_BYTES` or
  more.

The source keeps the :class:`Choice` (:meth:`~.local.LocalSource.decide`), its reads take it
instead of asking again, and :mod:`tensorfile.loading` reads ahead, remembers and logs it.
``backend`` other than ``"auto"`` is taken as asked; ``"mmap"`` for lazy tensors looks at
nothing (its filesystem is then ``""``, its kind ``"unknown"``).

Example:
    >>> import tempfile, os
    >>> from tensorfile.sources import LocalSource
    >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
    >>> _ = open(path, "wb").write(b"x" * 4096)
    >>> with LocalSource(path) as src:
    ...     c = decide(src, owned=False)
    >>> c.backend, c.resident_fraction, c.read_ahead, c.direct  # just written: cached
    ('mmap', 1.0, False, False)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ...core.errors import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from ._mounts import Mount

__all__ = [
    "BACKENDS",
    "COLD_BELOW",
    "DIRECT_MIN_BYTES",
    "WARM_FROM",
    "Choice",
    "Probed",
    "check_backend",
    "decide",
]

BACKENDS = ("auto", "mmap", "pread")
"""The values ``load_file(..., backend=...)`` takes."""

WARM_FROM = 0.9
"""The cached fraction of a local file from which ``"auto"`` maps it without reading ahead."""

COLD_BELOW = 0.5
"""A local file with less than this fraction of its pages cached is copied with
``O_DIRECT``."""

DIRECT_MIN_BYTES = 1 << 20
"""Smaller reads go through the page cache whatever the choice."""


class Choice(NamedTuple):
    """What :func:`decide` decided for one file, with what it saw."""

    path: str
    """The file (or URL) as given."""
    backend: str
    """``"mmap"`` (lazy tensors over a private mapping) or ``"pread"`` (owned tensors)."""
    read_ahead: bool
    """Whether the mapping is read in ahead, in parallel, before the tensors are returned."""
    requested: str
    """What the caller asked for: ``"auto"``, ``"mmap"`` or ``"pread"``."""
    filesystem: str
    """The filesystem type from the mount table (``ext4``, ``nfs4``, ``fuse.sshfs`` ...);
    ``""`` where unknown, ``"url"`` for a URL."""
    kind: str
    """``local``, ``network``, ``fuse``, ``memory``, ``virtual``, ``remote`` or
    ``unknown``."""
    resident_fraction: float | None
    """The fraction of the file in the page cache when it was looked at (None: not looked
    at, or the kernel cannot say)."""
    reason: str
    """Why, in words."""
    direct: bool = False
    """Whether copies (reads of :data:`DIRECT_MIN_BYTES` or more) bypass the page cache
    with ``O_DIRECT``: a cold file on a local disk."""


class Probed(Protocol):
    """What :func:`decide` looks at: an open local file (a :class:`~.local.LocalSource`)."""

    name: str

    @property
    def size(self) -> int: ...

    def mount(self) -> Mount | None: ...

    def resident_fraction(self, start: int = 0, stop: int | None = None) -> float | None: ...


def check_backend(backend: object) -> str:
    """``backend`` when it is one of :data:`BACKENDS`; an
    :class:`~tensorfile.errors.InvalidTypeError` or
    :class:`~tensorfile.errors.InvalidArgumentError` otherwise.

    Example:
        >>> check_backend("pread")
        'pread'
    """
    if not isinstance(backend, str):
        raise InvalidTypeError(f"backend must be a str, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def decide(
    source: Probed, backend: str = "auto", *, owned: bool = True, shown: str | None = None
) -> Choice:
    """How ``source`` is read (see the module's docstring): its mount is looked up once,
    its page cache asked at most once. ``owned``: the tensors are copies whatever the
    backend (numpy's ``copy=True``, a device, ``safe_open``'s reads), so nothing is read
    ahead: the copies read the file themselves. ``shown``: the name the choice gives
    (default: the source's).

    Example:
        >>> import tempfile
        >>> from tensorfile.sources import LocalSource
        >>> with tempfile.NamedTemporaryFile() as f, LocalSource(f.name) as src:
        ...     decide(src, "pread").reason
        'asked for'
    """
    check_backend(backend)
    name = source.name if shown is None else shown
    copies = owned or backend == "pread"
    if backend == "mmap" and not copies:  # lazy tensors, as asked: nothing to look at
        return Choice(name, "mmap", False, backend, "", "unknown", None, "asked for")
    mount = source.mount()
    fstype, kind = (mount.fstype, mount.kind) if mount is not None else ("", "unknown")

    def made(chosen: str, ahead: bool, reason: str, cached: float | None = None) -> Choice:
        direct = copies and kind == "local" and cached is not None and cached < COLD_BELOW
        return Choice(name, chosen, ahead, backend, fstype, kind, cached, reason, direct)

    if backend != "auto":
        if kind != "local":
            return made(backend, False, "asked for")  # no O_DIRECT to decide
        return made(backend, False, "asked for", source.resident_fraction())
    if kind in ("network", "fuse"):
        return made("pread", False, f"{fstype} is a {kind} filesystem: no page-fault reads")
    if kind == "memory":
        return made("mmap", False, f"{fstype} holds the file in memory")
    cached = source.resident_fraction()
    if cached is None:
        return made("mmap", False, "the page cache cannot be asked: the reference's default")
    if cached >= WARM_FROM:
        return made("mmap", False, f"{cached:.0%} of the file is in the page cache", cached)
    if owned:
        why = f"only {cached:.0%} of the file is in the page cache: read as copies"
        return made("mmap", False, why, cached)
    memory = _memory_bytes()
    if memory is not None and source.size > memory // 2:
        why = f"{cached:.0%} cached, but the file is larger than half the memory: pages are "
        return made("mmap", False, why + "read when touched", cached)
    why = f"only {cached:.0%} of the file is in the page cache: read ahead in parallel"
    return made("mmap", True, why, cached)
