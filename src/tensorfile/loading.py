"""How ``load_file`` reads a file, and why: a lazy mapping (read ahead or not) or reads.

``load_file(path)`` (``backend="auto"``, the default of :mod:`tensorfile.safetensors.torch`
and :mod:`tensorfile.safetensors.numpy`) opens the file once and asks the local read policy
(:mod:`tensorfile.sources.local.policy`) once, through :func:`settle`:

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
meaning), ``"pread"`` owned tensors read in parallel (``O_DIRECT`` for a cold file on a
local disk). Either can be asked for explicitly. :func:`choose` makes the same decision for
a path without loading it; :func:`last` gives the choice the latest ``load_file`` of this
thread (or task) made, and the logger ``tensorfile.loading`` records each at DEBUG level.

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

from .core.errors import InvalidTypeError, TensorFileError
from .core.source import Source
from .sources import LocalSource, local_path_of
from .sources.local.policy import BACKENDS, WARM_FROM, Choice, check_backend

__all__ = ["BACKENDS", "WARM_FROM", "Choice", "check_backend", "choose", "last", "settle"]

_log = logging.getLogger("tensorfile.loading")
_last: contextvars.ContextVar[Choice | None] = contextvars.ContextVar(
    "tensorfile_loading_last", default=None
)


def _shown(path: str | os.PathLike[str]) -> str:
    if not isinstance(path, str | os.PathLike):
        raise InvalidTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fsdecode(os.fspath(path))


def _remote(shown: str, backend: str) -> Choice:
    """The choice for a URL: ranged requests, copies."""
    reason = "asked for" if backend != "auto" else "a URL: read in ranged requests"
    chosen = "pread" if backend == "auto" else backend
    return Choice(shown, chosen, False, backend, "url", "remote", None, reason)


def choose(path: str | os.PathLike[str], backend: str = "auto", *, owned: bool = False) -> Choice:
    """How ``load_file`` would read ``path`` (see the module's docstring), without loading
    it: the file is opened to look (one that cannot be is a
    :class:`~tensorfile.errors.SourceError`). ``backend`` other than ``"auto"`` is taken as
    asked; ``owned``: the tensors would be copies (nothing is read ahead).

    Example:
        >>> choose("https://example.com/model.safetensors").backend
        'pread'
    """
    check_backend(backend)
    shown = _shown(path)
    local = local_path_of(path)
    if local is None:
        return _remote(shown, backend)
    with LocalSource(local) as src:
        return src.decide(backend, owned=owned, shown=shown)


def settle(source: Source, path: str | os.PathLike[str], backend: str, *, owned: bool) -> Choice:
    """The one decision of a ``load_file``, over the file it opened: the local read
    policy's (:meth:`~tensorfile.sources.LocalSource.decide`, which the source's reads then
    take), or ranged requests for a URL; the file is read ahead when that was chosen, and
    the choice remembered for :func:`last` and logged. ``owned``: the caller copies the
    tensors whatever the backend (numpy's ``copy=True``, a device).

    Example:
        >>> import tempfile
        >>> from tensorfile.sources import LocalSource
        >>> with tempfile.NamedTemporaryFile() as f, LocalSource(f.name) as src:
        ...     settle(src, f.name, "pread", owned=True).backend
        'pread'
    """
    shown = _shown(path)
    if isinstance(source, LocalSource):
        choice = source.decide(backend, owned=owned, shown=shown)
        if choice.read_ahead:
            try:
                source.prefetch()
            except TensorFileError:
                pass  # a file that shrank since: the load reports it
    else:
        choice = _remote(shown, check_backend(backend))
    _last.set(choice)
    _log.debug("%s: backend %r (%s)", choice.path, choice.backend, choice.reason)
    return choice


def last() -> Choice | None:
    """The choice the latest ``load_file`` of this thread (or asyncio task) made, None
    before any.

    Example:
        >>> import tempfile, os
        >>> from tensorfile.safetensors.numpy import load_file, save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "f.safetensors")
        >>> save_file({}, path)
        >>> _ = load_file(path, backend="pread")
        >>> last().backend, last().requested
        ('pread', 'pread')
    """
    return _last.get()
