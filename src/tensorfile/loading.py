"""How ``load_file`` reads a file, and why: a lazy mapping (read ahead or not) or reads.

``load_file(path)`` (``backend="auto"``, the default of :mod:`tensorfile.safetensors.torch`
and :mod:`tensorfile.safetensors.numpy`) asks :func:`choose` per file:

* on a network or FUSE filesystem (NFS, SMB, Lustre, CephFS, GPFS, BeeGFS, 9p, WSL's drvfs,
  virtiofs, any ``fuse.*``: read from ``/proc/self/mountinfo``), ``"pread"``: a page fault
  there is a round trip, and faulting a model in page by page is 30-50x slower than reading
  it in large parallel pieces;
* on tmpfs/ramfs, ``"mmap"``: the file is memory already;
* on a local disk, ``"mmap"``, and when less than :data:`WARM_FROM` of the file is in the
  page cache (``cachestat``, or ``mincore`` over a temporary mapping) the mapping is first
  *read ahead* in parallel pieces (``MADV_POPULATE_READ`` on 8 threads), which runs at the
  disk's speed where faulting pages in one by one does not. A file larger than half the
  machine's memory is not read ahead (its first pages would be dropped before use).

``"mmap"`` returns tensors backed by a private mapping of the file (the reference's
meaning), ``"pread"`` owned tensors read in parallel (``O_DIRECT`` for cold ranges of a local
disk). Either can be asked for explicitly. :func:`last` gives the choice the latest
``load_file`` of this thread (or task) made, and the logger ``tensorfile.loading`` records
each at DEBUG level.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
    >>> _ = open(path, "wb").write(b"x" * 4096)
    >>> c = choose(path)
    >>> c.backend, c.resident_fraction, c.read_ahead  # just written: cached
    ('mmap', 1.0, False)
    >>> choose(path, "pread").reason
    'asked for'
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import NamedTuple

from .core.errors import InvalidArgumentError, InvalidTypeError, TensorFileError

__all__ = ["BACKENDS", "WARM_FROM", "Choice", "choose", "last", "resolve"]

BACKENDS = ("auto", "mmap", "pread")
"""The values ``load_file(..., backend=...)`` takes."""

WARM_FROM = 0.9
"""The cached fraction of a local file from which ``"auto"`` maps it without reading ahead."""

_log = logging.getLogger("tensorfile.loading")
_last: contextvars.ContextVar[Choice | None] = contextvars.ContextVar(
    "tensorfile_loading_last", default=None
)


class Choice(NamedTuple):
    """What :func:`choose` decided for one file, with what it saw."""

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


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def choose(path: str | os.PathLike[str], backend: str = "auto") -> Choice:
    """Decide how ``load_file`` reads ``path`` (see the module's docstring); ``backend``
    other than ``"auto"`` is taken as asked. The file is opened to look; one that cannot
    be is a :class:`~tensorfile.errors.SourceError`.

    Example:
        >>> choose("https://example.com/model.safetensors").backend
        'pread'
    """
    from .sources import LocalSource, local_path_of

    _check_backend(backend)
    if not isinstance(path, str | os.PathLike):
        raise InvalidTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    shown = os.fsdecode(os.fspath(path))
    local = local_path_of(path)
    if local is None:
        reason = "asked for" if backend != "auto" else "a URL: read in ranged requests"
        chosen = "pread" if backend == "auto" else backend
        return Choice(shown, chosen, False, backend, "url", "remote", None, reason)
    with LocalSource(local) as src:
        mount = src.mount()
        fstype, kind = (mount.fstype, mount.kind) if mount is not None else ("", "unknown")

        def made(chosen: str, ahead: bool, reason: str, cached: float | None = None) -> Choice:
            return Choice(shown, chosen, ahead, backend, fstype, kind, cached, reason)

        if backend != "auto":
            return made(backend, False, "asked for")
        if kind in ("network", "fuse"):
            return made("pread", False, f"{fstype} is a {kind} filesystem: no page-fault reads")
        if kind == "memory":
            return made("mmap", False, f"{fstype} holds the file in memory")
        cached = src.resident_fraction()
        size = src.size
    if cached is None:
        return made("mmap", False, "the page cache cannot be asked: the reference's default")
    if cached >= WARM_FROM:
        return made("mmap", False, f"{cached:.0%} of the file is in the page cache", cached)
    memory = _memory_bytes()
    if memory is not None and size > memory // 2:
        why = f"{cached:.0%} cached, but the file is larger than half the memory: pages are "
        return made("mmap", False, why + "read when touched", cached)
    why = f"only {cached:.0%} of the file is in the page cache: read ahead in parallel"
    return made("mmap", True, why, cached)


def _check_backend(backend: object) -> None:
    if not isinstance(backend, str):
        raise InvalidTypeError(f"backend must be a str, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {BACKENDS}, got {backend!r}")


def resolve(path: str | os.PathLike[str], backend: str, *, owned: bool = False) -> str:
    """The backend ``load_file`` uses for ``path`` (``"mmap"`` or ``"pread"``): :func:`choose`'s,
    after reading the file ahead when it chose to, remembered for :func:`last` and logged.
    ``owned``: the caller copies the tensors whatever the backend (numpy's ``copy=True``, a
    device), so nothing is read ahead: the copies read the file themselves. A file that
    cannot be opened (or a path that is not one) gets the reference's default (``"mmap"``),
    so that the load raises its own error for it.

    Example:
        >>> resolve("missing.safetensors", "auto")
        'mmap'
    """
    _check_backend(backend)
    try:
        choice = choose(path, backend)
    except TensorFileError:
        return "mmap" if backend == "auto" else backend
    if choice.read_ahead and owned:
        why = choice.reason.split(":")[0] + ": read as copies"
        choice = choice._replace(read_ahead=False, reason=why)
    elif choice.read_ahead:
        _read_ahead(choice)
    _last.set(choice)
    _log.debug("%s: backend %r (%s)", choice.path, choice.backend, choice.reason)
    return choice.backend


def _read_ahead(choice: Choice) -> None:
    """Read the file into the page cache in parallel; a file that vanished since is the
    load's to report."""
    from .sources import LocalSource, local_path_of

    try:
        with LocalSource(local_path_of(choice.path) or choice.path) as src:
            src.prefetch()
    except TensorFileError:
        pass


def last() -> Choice | None:
    """The choice the latest ``load_file`` of this thread (or asyncio task) made, None
    before any.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
        >>> _ = open(path, "wb").write(b"x")
        >>> _ = resolve(path, "pread")
        >>> last().backend, last().requested
        ('pread', 'pread')
    """
    return _last.get()
