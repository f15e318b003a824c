"""Servers that ignore ``Range`` (``python -m http.server``, some object stores and CDNs):
each reply is the whole file from its first byte, so tensorfile reads such a reply only as far
as the read needs and keeps those first bytes (the *prefix*) for the reads that follow.

* :func:`plan` decides how far to read a ``200`` reply: up to the end of what was asked for
  (growing the prefix to at least twice its length, so reading a file tensor by tensor costs
  a few requests, not one per tensor), never past the file's end, and never more than
  :data:`FULL_DOWNLOAD_LIMIT` bytes unless the caller opted in (``allow_full_download=True``
  or ``$TENSORFILE_ALLOW_FULL_DOWNLOAD=1``). A refusal names the option.
* :class:`Prefix` keeps the bytes read so far, shared by the threads of one reader; a read
  inside it costs no request.
* :func:`warn_download` warns, once per origin and process (:class:`RangeIgnoredWarning`),
  when such a reply costs :data:`WARN_BYTES` or more beyond the bytes asked for (and four
  times them): below the refusal, the download is allowed but not silent (48 MB read for a
  1.5 kB tensor).
* :func:`html_page` recognises a web page served in place of a tensor file (a directory
  listing, a login page): ``Content-Type: text/html`` *and* first bytes that look like HTML.
  :class:`NotATensorFileError` says so, naming the URL without its secrets.

Example:
    >>> plan(need=150_000, size=720_000, kept=100_000, allow=False, name="http://h/m")
    200000
    >>> try:
    ...     plan(need=100 << 20, size=1 << 30, kept=0, allow=False, name="http://h/m")
    ... except SourceError as exc:
    ...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
    http://h/m: the server ignores Range requests (HTTP 200: the whole file), and reading
    bytes 0-104857599 of it would download 104,857,600 of its 1,073,741,824 bytes, over the
    67,108,864-byte limit; pass allow_full_download=True (the command line:
    --allow-full-download; or set TENSORFILE_ALLOW_FULL_DOWNLOAD=1) to download it anyway
    >>> html_page("text/html; charset=utf-8", b"<!DOCTYPE HTML>\\n<html>")
    True
"""

from __future__ import annotations

import os
import threading
import warnings

from ...core.errors import InvalidArgumentError, SourceError, UnknownFormatError
from ...core.source import ByteRequest, RangeRequest
from . import _headers as hdr
from ._first_read import Fetched

__all__ = [
    "ALLOW_ENV",
    "FULL_DOWNLOAD_LIMIT",
    "WARN_BYTES",
    "WASTE_RATIO",
    "NotATensorFileError",
    "Prefix",
    "RangeIgnoredWarning",
    "allow_full_download",
    "html_page",
    "looks_like_html",
    "not_a_tensor_file",
    "plan",
    "warn_download",
]

FULL_DOWNLOAD_LIMIT = 64 << 20
"""The most bytes (64 MiB) tensorfile reads of a reply from a server that ignores ``Range``,
unless the caller allows a full download: a small file is read whole, a big one only as far
as its header (when that is under the limit)."""

WARN_BYTES = 1 << 20
"""Bytes beyond those asked for that one whole-file reply may cost before tensorfile warns
(:func:`warn_download`): reading a small file whole is no surprise, 48 MB for a tensor is."""

WASTE_RATIO = 4
"""...and at least this many times the bytes asked for (reading half a file is no waste)."""

ALLOW_ENV = "TENSORFILE_ALLOW_FULL_DOWNLOAD"
"""The environment variable that allows full downloads when the caller says nothing (``1``,
``true``, ``yes`` or ``on``): how the command line and the operations opt in."""

_TRUE = {"1", "true", "yes", "on"}
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_SNIFF = 1024  # the first bytes looked at to recognise a web page
_SHOWN = 16  # the first bytes an error shows
_BLANK = b" \t\n\r\f\v"


def allow_full_download(value: bool | None) -> bool:
    """The caller's choice, or (None) what ``$TENSORFILE_ALLOW_FULL_DOWNLOAD`` says.

    Example:
        >>> allow_full_download(True), allow_full_download(False)
        (True, False)
    """
    if value is None:
        return os.environ.get(ALLOW_ENV, "").strip().lower() in _TRUE
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"allow_full_download must be True, False or None, not {type(value).__name__}"
        )
    return value


def _refusal(name: str, what: str) -> SourceError:
    return SourceError(
        f"{name}: the server ignores Range requests (HTTP 200: the whole file), and {what}, "
        f"over the {FULL_DOWNLOAD_LIMIT:,}-byte limit; pass allow_full_download=True (the "
        f"command line: --allow-full-download; or set {ALLOW_ENV}=1) to download it anyway"
    )


def plan(*, need: int | None, size: int | None, kept: int, allow: bool, name: str) -> int | None:
    """How many bytes of a whole-file reply to read: ``need`` (the end of what was asked for;
    None: the size is unknown, so all of it), grown to twice the ``kept`` prefix, at most the
    ``size`` and (unless ``allow``) :data:`FULL_DOWNLOAD_LIMIT`. None: read to the end of the
    body (the caller stops past the limit). Raises a :class:`SourceError` that names the
    option when what is needed is over the limit.

    Example:
        >>> plan(need=100_000, size=720_000, kept=0, allow=False, name="u")
        100000
        >>> plan(need=None, size=None, kept=0, allow=False, name="u") is None
        True
    """
    if need is None or size is None:
        return None
    if need > FULL_DOWNLOAD_LIMIT and not allow:
        whole = need >= size
        what = (
            f"reading any of it needs all of its {size:,} bytes"
            if whole
            else f"reading bytes 0-{need - 1} of it would download {need:,} of its {size:,} bytes"
        )
        raise _refusal(name, what)
    ahead = min(size, 2 * kept)
    if not allow:
        ahead = min(ahead, FULL_DOWNLOAD_LIMIT)
    return max(need, ahead)


class RangeIgnoredWarning(UserWarning):
    """A server ignores ``Range`` requests, so a read downloaded the file from its first byte,
    far more than was asked for (below the :data:`FULL_DOWNLOAD_LIMIT` refusal). Warned once
    per origin (scheme, host and port) and process; silence it with
    ``warnings.filterwarnings("ignore", category=RangeIgnoredWarning)``."""


_warned: set[tuple[str, str, int]] = set()  # the origins warned about in this process
_warned_lock = threading.Lock()


def warn_download(name: str, origin: tuple[str, str, int], *, asked: int, read: int) -> bool:
    """Warn (:class:`RangeIgnoredWarning`) that a whole-file reply from the server at
    ``origin`` cost ``read`` bytes where ``asked`` bytes of ``name`` (a redacted URL) were
    wanted, when that is :data:`WARN_BYTES` or more beyond them and :data:`WASTE_RATIO` times
    them, and this origin has not been warned about yet in this process; whether it warned.

    Example:
        >>> warn_download("http://h/m", ("http", "h", 80), asked=100, read=1000)
        False
    """
    if read - asked < WARN_BYTES or read < WASTE_RATIO * asked:
        return False
    with _warned_lock:
        if origin in _warned:
            return False
        _warned.add(origin)
    scheme, host, port = origin
    warnings.warn(
        f"{name}: the server ignores Range requests (HTTP 200: the whole file), so reading "
        f"{asked:,} bytes of it downloaded its first {read:,} bytes; "
        f"tensorfile reads up to {FULL_DOWNLOAD_LIMIT:,} bytes of a file this way and refuses "
        f"more unless allow_full_download=True (warned once for {scheme}://{host}:{port})",
        RangeIgnoredWarning,
        stacklevel=2,
    )
    return True


def over_limit(name: str, got: int) -> SourceError:
    """The refusal of a body of unknown length that ran past the limit."""
    return _refusal(name, f"sends no Content-Length; its body ran past {got - 1:,} bytes")


class Prefix:
    """The first bytes of a file whose server ignores ``Range``; safe to share between
    threads.

    Example:
        >>> p = Prefix()
        >>> p.keep(b"0123456789", 20)
        >>> p.serve(RangeRequest(2, 5)), p.serve(RangeRequest(8, 12)), len(p)
        (Fetched(start=2, data=b'234', size=20), None, 10)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = b""
        self._size: int | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    @property
    def data(self) -> bytes:
        """The bytes kept."""
        with self._lock:
            return self._data

    def keep(self, data: bytes, size: int) -> None:
        """Keep ``data`` (the first bytes of a ``size``-byte file) when it is longer than
        what is kept."""
        with self._lock:
            if len(data) > len(self._data):
                self._data, self._size = data, size

    def serve(self, request: ByteRequest) -> Fetched | None:
        """The bytes of ``request`` when they are all kept, else None."""
        with self._lock:
            data, size = self._data, self._size
        if size is None:
            return None
        if isinstance(request, RangeRequest):
            start, stop = request.start, min(request.stop, size)
        else:
            start, stop = max(0, size - request.length), size
        if start >= stop or stop > len(data):
            return None
        return Fetched(start, data[start:stop], size)


class NotATensorFileError(UnknownFormatError, SourceError):
    """A web page (a directory listing, a login or error page) where a tensor file was
    expected: an :class:`~tensorfile.errors.UnknownFormatError`, as format detection says of
    any other file that is no tensor file, and a :class:`~tensorfile.errors.SourceError`, as
    the server is where it went wrong (so the drop-in ``safe_open`` reports it as its I/O
    error)."""


def html_page(content_type: str | None, head: bytes) -> bool:
    """Whether a reply is a web page: its ``Content-Type`` is HTML and its first bytes look
    like HTML (a server may label anything ``text/html``; the bytes decide with it).

    Example:
        >>> html_page("text/html", b"\\x08\\x00\\x00\\x00\\x00\\x00\\x00\\x00{}")
        False
        >>> html_page("application/octet-stream", b"<html><body>")
        False
    """
    if content_type is None:
        return False
    kind = content_type.split(";", 1)[0].strip(" \t").lower()
    return kind in _HTML_TYPES and looks_like_html(head)


def looks_like_html(head: bytes) -> bool:
    """Whether the first bytes ``head`` of a reply look like an HTML page: after a byte order
    mark and blanks, ``<!doctype html``, ``<html``, or a tag with ``<html``, ``<head`` or
    ``<body`` in the first kilobyte. (A transport rule: the HTTP layer refuses a web page
    served in place of a file before any format looks at it.)

    Example:
        >>> looks_like_html(b"\\xef\\xbb\\xbf  <!DOCTYPE html>"), looks_like_html(b"<x>")
        (True, False)
    """
    lower = head[:_SNIFF].removeprefix(b"\xef\xbb\xbf").lstrip(_BLANK).lower()
    return lower.startswith((b"<!doctype html", b"<html")) or (
        lower.startswith(b"<") and any(tag in lower for tag in (b"<html", b"<head", b"<body"))
    )


def _shown(head: bytes) -> str:
    """The first bytes of ``head`` as a bytes literal, ``...`` when there are more."""
    return repr(bytes(head[:_SHOWN])) + ("..." if len(head) > _SHOWN else "")


def not_a_tensor_file(name: str, content_type: str, head: bytes, size: int) -> NotATensorFileError:
    """The error for a web page served at ``name`` (a redacted URL).

    Example:
        >>> print(not_a_tensor_file("http://h/models/", "text/html", b"<!DOCTYPE html>", 15))
        ... # doctest: +NORMALIZE_WHITESPACE
        http://h/models/ looks like an HTML page, not a tensor file (the server sent
        Content-Type 'text/html': a directory listing, or a web page served in place of the
        file?): its 15 bytes are b'<!DOCTYPE html>'
    """
    first = head[:_SHOWN]
    of = f"first {len(first)} of {size:,} bytes" if size > len(first) else f"{size} bytes"
    kind = content_type.split(";", 1)[0].strip(" \t")
    return NotATensorFileError(
        f"{name} looks like an HTML page, not a tensor file (the server sent Content-Type "
        f"{hdr.show(kind)}: a directory listing, or a web page served in place of the file?): "
        f"its {of} are {_shown(head)}",
        path=name,
        head=first,
        size=size,
    )
