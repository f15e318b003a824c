"""What the HTTP transport sends, checked before the first request: the byte range, the
numbers that bound time, the credentials and the caller's extra headers.

Nothing here touches the network. A bad argument is an
:class:`~tensorfile.errors.InvalidArgumentError` that never echoes a header's value or a
token (they may be credentials).

Example:
    >>> Want(RangeRequest(0, 100)).spec, Want(SuffixRequest(64)).spec
    ('bytes=0-99', 'bytes=-64')
    >>> USER_AGENT.startswith("tensorfile/")
    True
    >>> check_headers("u", {"X-Key": "a", "Cookie": "b"})
    ({'X-Key': 'a'}, {'Cookie': 'b'})
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass

from ..._version import __version__
from ...core.errors import InvalidArgumentError
from ...core.source import ByteRequest, RangeRequest, SuffixRequest
from . import _headers as hdr
from ._tokens import env_token
from ._urls import HttpURL

__all__ = ["USER_AGENT", "Want", "authorization", "check_headers", "check_request", "positive"]

USER_AGENT = f"tensorfile/{__version__}"
"""The ``User-Agent`` of every request (a caller's ``headers=`` may replace it)."""

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = re.compile(r"[\x21-\x7e]+")
_OURS = {"range", "host", "accept-encoding", "proxy-authorization"}
_ORIGIN_ONLY = {"authorization", "cookie"}


@dataclass(frozen=True, slots=True)
class Want:
    """A request and what a reply to it must hold."""

    request: ByteRequest

    @property
    def spec(self) -> str:
        """The ``Range`` header."""
        r = self.request
        if isinstance(r, SuffixRequest):
            return f"bytes=-{r.length}"
        return f"bytes={r.start}-{r.stop - 1}"

    @property
    def nbytes(self) -> int:
        """How many bytes were asked for (the deadline's allowance)."""
        r = self.request
        return r.length if isinstance(r, SuffixRequest) else r.stop - r.start

    def expected(self, total: int) -> tuple[int, int] | None:
        """``[start, stop)`` a reply must carry for a ``total``-byte file (None: no byte of
        it exists, a 416)."""
        r = self.request
        if isinstance(r, SuffixRequest):
            return (max(0, total - r.length), total) if total > 0 else None
        return (r.start, min(r.stop, total)) if r.start < total else None


def check_request(request: ByteRequest) -> Want:
    """``request`` when it is a non-empty range or suffix of ints."""
    ok = False
    if isinstance(request, SuffixRequest):
        ok = type(request.length) is int and request.length > 0
    elif isinstance(request, RangeRequest):
        ok = type(request.start) is int and type(request.stop) is int
        ok = ok and 0 <= request.start < request.stop
    if not ok:
        raise InvalidArgumentError(f"not a non-empty byte range: {request!r}")
    return Want(request)


def positive(name: str, value: float, *, zero: bool = False) -> float:
    """``value`` as a float, when it is a finite number above 0 (or 0, with ``zero``).

    Example:
        >>> positive("timeout", 3)
        3.0
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{name} must be a number, not {type(value).__name__}")
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        raise InvalidArgumentError(f"{name} must be a positive number, not {value}")
    return float(value)


def authorization(url: HttpURL, token: str | None) -> str | None:
    """The ``Authorization`` header for the origin, checked (never echoed): ``token``, else
    ``user:password@`` of the URL as basic auth, else the environment's token for this
    origin (:func:`~._tokens.env_token`: ``$TENSORFILE_TOKEN`` to the hosts
    ``$TENSORFILE_TOKEN_HOSTS`` names, ``$HF_TOKEN`` to the Hugging Face Hub only)."""
    if token is None and url.user is not None:
        pair = f"{url.user}:{url.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")
    where = "the token"
    if token is not None and not isinstance(token, str):
        raise InvalidArgumentError(f"the token must be a str, not {type(token).__name__}")
    if token is None:
        token, where = env_token(url) or (None, where)
    if not token:
        return None
    token = token.strip()
    if not _TOKEN.fullmatch(token):
        raise InvalidArgumentError(f"{where} contains spaces or control characters")
    return f"Bearer {token}"


def check_headers(name: str, headers: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The extra headers of the file ``name``, split into those for every host and those for
    the origin only (``Authorization``, ``Cookie``); values are never echoed."""
    anywhere: dict[str, str] = {}
    origin: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not _HEADER_NAME.fullmatch(key):
            raise InvalidArgumentError(f"{name}: {hdr.show(str(key))} is no header name")
        if key.lower() in _OURS:
            raise InvalidArgumentError(f"{name}: tensorfile sets the {key} header")
        if not isinstance(value, str) or _BAD_VALUE.search(value):
            raise InvalidArgumentError(f"{name}: header {key} has an invalid value")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"{name}: header {key} has characters outside Latin-1"
            ) from None
        (origin if key.lower() in _ORIGIN_ONLY else anywhere)[key] = value
    return anywhere, origin
