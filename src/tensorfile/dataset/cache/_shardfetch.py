"""Download one whole shard of a remote dataset into an open local file, fast and checked.

The shard is read through tensorfile's remote sources (the native S3 client for ``s3://``,
the strict HTTP transport for ``http(s)://``, fsspec for the rest) and the read planner:
pieces of the source's ``io_chunk`` (8 MiB) on up to ``io_threads`` (16) threads, each
piece's reply received straight into a writable mapping of the destination file (never a
whole-shard ``bytes`` in memory). What is checked, so that nothing wrong reaches the cache:

* the object's size, from the first reply, is the manifest's ``bytes`` for the shard (an
  object replaced by a longer or shorter one is a :class:`~tensorfile.errors.FormatError`
  naming the shard, before anything else is read);
* every reply is the range asked for, whole (the transport's checks: a short or long body
  is a :class:`~tensorfile.errors.SourceError`);
* every reply carries the ETag of the first: an object changed mid-download is an error.

Example:
    >>> import fsspec, os, tempfile
    >>> from tensorfile.sources import store_for
    >>> fsspec.filesystem("memory").pipe("/fetch-doc/ds/a.bin", b"0123456789")
    >>> fd = os.open(os.path.join(tempfile.mkdtemp(), "a"), os.O_RDWR | os.O_CREAT)
    >>> os.ftruncate(fd, 10)
    >>> download(store_for("memory://fetch-doc/ds"), "a.bin", 10, fd)[0], os.pread(fd, 4, 6)
    (10, b'6789')
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from ...core.catalog import ByteRange
from ...core.errors import FormatError, InvalidArgumentError, SourceError
from ...core.plan import execute, plan
from ...core.source import RangeRequest, Source
from ...sources import Store, open_path

__all__ = ["FIRST_BYTES", "download", "open_remote", "remote_version"]

FIRST_BYTES = 64 << 10
"""Bytes of the first request of a shard download (it tells the object's size and ETag;
the pieces that follow read those bytes again: small, so the waste is too)."""


def open_remote(store: Store, name: str, size: int, first_bytes: int = FIRST_BYTES) -> Source:
    """A source over the file ``name`` of the remote ``store`` through tensorfile's own
    clients where they take the store's options, else the store's own source (its first
    request reads ``first_bytes``)."""
    first = RangeRequest(0, max(1, min(size, first_bytes)))
    url = store.open_url(name)
    if url is not None:
        try:  # (never through the chunk cache: a shard is cached whole, its bytes once)
            return open_path(url, first=first, cache_dir=False, **store.options)
        except (InvalidArgumentError, TypeError):
            pass  # options only fsspec takes: its source
    return store.open_source(name, first=first)


def download(store: Store, name: str, size: int, fd: int) -> tuple[int, str | None]:
    """Fill the open file ``fd`` (at least ``size`` bytes long) with the ``size`` bytes of the
    shard ``name`` of ``store``; returns the bytes written and the object's version (its
    ETag; None when the store gives none). See the module docstring for
    what is checked; an error names the shard's URL."""
    where = store.url(name)
    src = open_remote(store, name, size)
    try:
        got = src.size
        if got != size:
            raise FormatError(
                f"{where}: the manifest says shard {name} has {size} bytes, the store now "
                f"has {got} (the object was replaced after the manifest was written)"
            )
        version = getattr(src, "version", None)
        version = version if isinstance(version, str) else None
        if size == 0:
            return 0, version
        if os.fstat(fd).st_size < size:
            raise SourceError(f"{where}: the cache file is shorter than {size} bytes")
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            with memoryview(mm) as view:
                pieces = plan(src, src.readinto, [(name, ByteRange(0, size), view)])
                try:
                    execute(pieces)
                finally:
                    del pieces
            mm.flush()
        finally:
            try:
                mm.close()
            except BufferError:  # a failed piece's traceback still holds a view: GC closes it
                pass
        return size, version
    except (FormatError, SourceError):
        raise
    except OSError as exc:
        raise SourceError(f"cannot download {where}: {exc.strerror or exc}") from exc
    finally:
        _close(src)


def remote_version(store: Store, name: str, size: int) -> str | None:
    """The version (ETag) of the shard ``name`` as the store has it now, in the form
    :func:`download` returns it, from one request of one byte."""
    src = open_remote(store, name, size, 1)
    try:
        _ = src.size
        version = getattr(src, "version", None)
        return version if isinstance(version, str) else None
    except OSError as exc:
        if isinstance(exc, SourceError):
            raise
        raise SourceError(f"cannot ask {store.url(name)} its version: {exc}") from exc
    finally:
        _close(src)


def _close(src: Any) -> None:
    try:
        src.close()
    except Exception:  # closing a connection that failed: nothing more to say
        pass
