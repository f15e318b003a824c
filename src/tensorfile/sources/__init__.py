"""Byte sources: local files, memory buffers, HTTP(S) URLs and fsspec URLs."""

from __future__ import annotations

import os
from typing import Any

from .base import ReadStats, Source
from .local import LocalSource
from .memory import MemorySource
from .remote import HTTPSource, is_url

__all__ = [
    "HTTPSource",
    "LocalSource",
    "MemorySource",
    "ReadStats",
    "Source",
    "is_url",
    "open_path",
]


def open_path(path: str | os.PathLike[str], *, tail_first: bool = False, **options: Any) -> Source:
    """A source for a local path, an ``http(s)://`` URL or any fsspec URL.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "f")
        >>> _ = open(p, "wb").write(b"abc")
        >>> open_path(p).read(1, 2)
        b'bc'
    """
    text = os.fspath(path)
    if is_url(text):
        scheme = text.split("://", 1)[0].lower()
        if scheme in ("http", "https"):
            return HTTPSource(text, tail_first=tail_first, **options)
        if scheme == "file":
            return LocalSource(text[len("file://") :])
        from .fsspec_source import FsspecSource

        return FsspecSource(text, **options)
    return LocalSource(text)
