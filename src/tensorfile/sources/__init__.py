"""Where bytes come from and go to: sources, stores and the one URL router.

* A :class:`~tensorfile.core.source.Source` hands out byte ranges of one file: a local file,
  a memory buffer, an HTTP(S) URL or any fsspec URL (:func:`open_path`, :func:`open_input`).
  The formats read through it.
* A :class:`Store` is a folder of files with capability flags (read ranges, write, list,
  delete, atomic publish): :class:`LocalStore`, :class:`MemoryStore`, :class:`FsspecStore`
  (:func:`store_for`). The dataset layer and the Spark data source live on it.
* :class:`CachedSource` keeps remote files in a local folder, chunk by chunk
  (``cache_dir=``, ``$TENSORFILE_CACHE_DIR``): a partial hit fetches only what is missing.
* :func:`route` decides once what a path or URL names; :func:`is_url` and
  :func:`local_path_of` ask it. The local path rules are in :mod:`.local.paths`.

The remote parts load their transport (``http.client``, fsspec) only when a URL is opened.
:func:`redact` is how any message shows a URL: without ``user:password@``, query string or
fragment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidArgumentError
from ..core.source import ByteRequest, RangeRequest, ReadStats, Source
from .cache._chunkdir import CacheWarning
from .cache.settings import CACHE_DIR_ENV, resolve_cache_dir
from .http._first_read import HEAD_BYTES
from .http._urls import redact
from .local.local import LocalSource
from .local.memory import MemorySource
from .router import Route, StoreLocation, is_url, local_path_of, path_text, route, store_for
from .stores.store import Store

if TYPE_CHECKING:
    from .cache._chunkcache import CachedSource
    from .http._prefix import ALLOW_ENV as ALLOW_FULL_DOWNLOAD_ENV
    from .http._prefix import RangeIgnoredWarning
    from .http.remote import HTTPSource
    from .stores.fsspec_store import FsspecStore
    from .stores.local_store import LocalStore
    from .stores.memory_store import MemoryStore

__all__ = [
    "ALLOW_FULL_DOWNLOAD_ENV",
    "CACHE_DIR_ENV",
    "CacheDir",
    "CacheWarning",
    "CachedSource",
    "FsspecStore",
    "HTTPSource",
    "LocalSource",
    "LocalStore",
    "MemorySource",
    "MemoryStore",
    "RangeIgnoredWarning",
    "ReadStats",
    "Route",
    "Source",
    "Store",
    "StoreLocation",
    "is_url",
    "local_path_of",
    "open_input",
    "open_path",
    "path_text",
    "redact",
    "resolve_cache_dir",
    "route",
    "store_for",
]

PathOrData = str | os.PathLike[str] | bytes | bytearray | memoryview
"""What the readers accept: a local path, a URL, or the file's bytes."""

CacheDir = str | os.PathLike[str] | bool | None
"""What ``cache_dir=`` accepts: a folder; ``False`` (or ``""``): no cache; ``True``:
``$TENSORFILE_CACHE_DIR``, else ``~/.cache/tensorfile``; None: ``$TENSORFILE_CACHE_DIR``
when it is set, else no cache."""


def open_path(
    path: str | os.PathLike[str],
    *,
    first: ByteRequest | None = None,
    allow_full_download: bool | None = None,
    cache_dir: CacheDir = None,
    **options: Any,
) -> Source:
    """A source for a local path (or ``file://`` URL), an ``http(s)://`` URL, an ``s3://``
    URL (tensorfile's S3 client, or fsspec where it declines: see
    :func:`~.s3.s3_source.open_s3`) or any fsspec URL, as :func:`route` decides. ``first`` is the
    first request of a remote source (the caller's format decides: the head or the tail).
    ``allow_full_download`` is :class:`HTTPSource`'s (for a server that ignores ``Range``;
    other sources need no such permission).

    ``cache_dir``: a folder that caches remote files chunk by chunk (:class:`CachedSource`;
    see :data:`CacheDir` for the other values). Local paths are never cached.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "f")
        >>> _ = open(p, "wb").write(b"abc")
        >>> open_path(p).read(1, 2)
        b'bc'
    """
    r = route(path)
    if r.kind == "local":
        if options:
            raise InvalidArgumentError(
                f"{', '.join(sorted(options))}: options apply to URLs, not to the local path "
                f"{r.target}"
            )
        return LocalSource(r.target)
    folder = resolve_cache_dir(cache_dir)
    if folder is not None:
        first = RangeRequest(0, HEAD_BYTES)  # (only the version and size: chunks hold the rest)
    source: Source
    if r.kind == "http":
        from .http.remote import HTTPSource

        source = HTTPSource(
            r.target, first=first, allow_full_download=allow_full_download, **options
        )
    elif r.protocol in ("s3", "s3a"):  # tensorfile's own S3 client, or fsspec where it declines
        from .s3.s3_source import open_s3

        source = open_s3(r.target, first=first, **options)
    else:
        from .stores.fsspec_source import FsspecSource

        source = FsspecSource(r.target, first=first, **options)
    if folder is None:
        return source
    from .cache._chunkcache import with_cache
    from .cache.keys import endpoint_id
    from .cache.settings import settings

    try:
        extra = endpoint_id(options)
        return with_cache(source, url=r.target, folder=folder, config=settings(), extra=extra)
    except BaseException:
        source.close()
        raise


@contextmanager
def open_input(
    path_or_data: PathOrData,
    *,
    first: ByteRequest | None = None,
    allow_full_download: bool | None = None,
    cache_dir: CacheDir = None,
) -> Iterator[Source]:
    """A source for a path, URL or bytes, closed when the block fails (a reader built in the
    block owns it on success). ``allow_full_download``, ``cache_dir``: see :func:`open_path`.

    Example:
        >>> with open_input(b"abc") as src:
        ...     src.read(0, 1)
        b'a'
    """
    source: Source
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        source = MemorySource(path_or_data)
    else:
        source = open_path(
            path_or_data, first=first, allow_full_download=allow_full_download, cache_dir=cache_dir
        )
    try:
        yield source
    except BaseException:
        source.close()
        raise


def __getattr__(name: str) -> Any:
    if name == "HTTPSource":  # the HTTP stack loads when it is first asked for
        from .http.remote import HTTPSource

        return HTTPSource
    if name == "ALLOW_FULL_DOWNLOAD_ENV":  # (the variable; allow_full_download= is the way)
        from .http._prefix import ALLOW_ENV

        return ALLOW_ENV
    if name == "RangeIgnoredWarning":
        from .http._prefix import RangeIgnoredWarning

        return RangeIgnoredWarning
    if name == "CachedSource":
        from .cache._chunkcache import CachedSource

        return CachedSource
    if name == "FsspecStore":
        from .stores.fsspec_store import FsspecStore

        return FsspecStore
    if name == "LocalStore":  # the stores load when a dataset (or a test) asks for one
        from .stores.local_store import LocalStore

        return LocalStore
    if name == "MemoryStore":
        from .stores.memory_store import MemoryStore

        return MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
