"""Byte sources: local files, memory buffers, HTTP(S) URLs and fsspec URLs.

Every source implements :class:`~tensorfile.core.source.Source`. The remote ones load their
transport (``http.client``, fsspec) only when a URL is opened. :func:`redact` is how any
message shows a URL: without ``user:password@``, query string or fragment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidTypeError
from ..core.source import ByteRequest, ReadStats, Source
from ._urls import redact
from .local import LocalSource
from .memory import MemorySource

if TYPE_CHECKING:
    from .remote import HTTPSource

__all__ = [
    "HTTPSource",
    "LocalSource",
    "MemorySource",
    "ReadStats",
    "Source",
    "is_url",
    "open_input",
    "open_path",
    "redact",
]

PathOrData = str | os.PathLike[str] | bytes | bytearray | memoryview
"""What the readers accept: a local path, a URL, or the file's bytes."""


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path.

    Example:
        >>> is_url("https://host/m.safetensors"), is_url("model.zt")
        (True, False)
    """
    return isinstance(path, str) and "://" in path and not os.path.exists(path)


def path_text(path: object) -> str:
    """``path`` (a ``str`` or ``os.PathLike``) as text; anything else is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> import pathlib
        >>> path_text(pathlib.PurePath("a/b"))
        'a/b'
    """
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise InvalidTypeError(f"expected a path, a URL or bytes, got {type(path).__name__}")
    return text


def open_path(
    path: str | os.PathLike[str],
    *,
    first: ByteRequest | None = None,
    allow_full_download: bool | None = None,
    **options: Any,
) -> Source:
    """A source for a local path, an ``http(s)://`` URL or any fsspec URL. ``first`` is the
    first request of a remote source (the caller's format decides: the head or the tail).
    ``allow_full_download`` is :class:`HTTPSource`'s (for a server that ignores ``Range``;
    other sources need no such permission).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "f")
        >>> _ = open(p, "wb").write(b"abc")
        >>> open_path(p).read(1, 2)
        b'bc'
    """
    text = path_text(path)
    if is_url(text):
        scheme = text.split("://", 1)[0].lower()
        if scheme in ("http", "https"):
            from .remote import HTTPSource

            return HTTPSource(text, first=first, allow_full_download=allow_full_download, **options)
        if scheme == "file":
            return LocalSource(text[len("file://") :])
        from .fsspec_source import FsspecSource

        return FsspecSource(text, first=first, **options)
    return LocalSource(text)


@contextmanager
def open_input(
    path_or_data: PathOrData,
    *,
    first: ByteRequest | None = None,
    allow_full_download: bool | None = None,
) -> Iterator[Source]:
    """A source for a path, URL or bytes, closed when the block fails (a reader built in the
    block owns it on success). ``allow_full_download``: see :func:`open_path`.

    Example:
        >>> with open_input(b"abc") as src:
        ...     src.read(0, 1)
        b'a'
    """
    source: Source
    if isinstance(path_or_data, bytes | bytearray | memoryview):
        source = MemorySource(path_or_data)
    else:
        source = open_path(path_or_data, first=first, allow_full_download=allow_full_download)
    try:
        yield source
    except BaseException:
        source.close()
        raise


def __getattr__(name: str) -> Any:
    if name == "HTTPSource":  # the HTTP stack loads when it is first asked for
        from .remote import HTTPSource

        return HTTPSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
