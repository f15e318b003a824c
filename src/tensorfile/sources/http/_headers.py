"""Reply headers read strictly: numbers are ASCII digits with a cap on their length.

A server can lie, so nothing here trusts ``int()`` (which takes other scripts' digits such as
``'٣'``, underscores and spaces, and raises ``ValueError`` past 4,300 digits) or
``str.isdigit()`` (true for ``'²'``, which ``int()`` refuses). Every parser returns None for
text it does not accept; the caller says what is wrong and where. Byte counts have at most 19
digits (below 2⁶³).

Example:
    >>> number("1234"), number("²"), number("1_000"), number("9" * 5000)
    (1234, None, None, None)
    >>> content_range("bytes 0-99/1000"), content_range("bytes 5-9/*")
    ((0, 99, 1000), (5, 9, None))
    >>> unsatisfied_range("bytes */0"), content_range("bytes -5-10/100")
    (0, None)
    >>> retry_after("120"), retry_after("²"), retry_after("soon")
    (120.0, None, None)
    >>> strong_etag('"abc-12"'), strong_etag('W/"abc"'), strong_etag("abc")
    (True, False, False)
"""

from __future__ import annotations

import email.utils
import re
import time

__all__ = ["content_range", "number", "retry_after", "show", "strong_etag", "unsatisfied_range"]

_DIGITS = r"[0-9]{1,19}"
_NUMBER = re.compile(_DIGITS)
_CONTENT_RANGE = re.compile(rf"bytes +({_DIGITS})-({_DIGITS})/({_DIGITS}|\*)", re.IGNORECASE)
_UNSATISFIED = re.compile(rf"bytes +\*/({_DIGITS})", re.IGNORECASE)
_SECONDS = re.compile(r"[0-9]{1,10}")


def _strip(text: str) -> str:
    return text.strip(" \t")


def number(text: str | None) -> int | None:
    """A non-negative decimal integer of at most 19 ASCII digits, or None."""
    if text is None:
        return None
    m = _NUMBER.fullmatch(_strip(text))
    return int(m.group()) if m else None


def content_range(text: str | None) -> tuple[int, int, int | None] | None:
    """``(first, last, total)`` of a ``bytes first-last/total`` header (``total`` None for
    ``*``), or None when malformed. The values are not checked against each other."""
    if text is None:
        return None
    m = _CONTENT_RANGE.fullmatch(_strip(text))
    if m is None:
        return None
    total = None if m.group(3) == "*" else int(m.group(3))
    return int(m.group(1)), int(m.group(2)), total


def unsatisfied_range(text: str | None) -> int | None:
    """The size in a ``416`` reply's ``bytes */size``, or None."""
    if text is None:
        return None
    m = _UNSATISFIED.fullmatch(_strip(text))
    return int(m.group(1)) if m else None


def retry_after(text: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), or None when
    absent or malformed. The caller caps it."""
    if text is None:
        return None
    text = _strip(text)
    if _SECONDS.fullmatch(text):
        return float(text)
    if len(text) > 64 or not text.isascii():
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def show(value: str | None, limit: int = 60) -> str:
    """A header value quoted for a message: escaped and cut to ``limit`` characters, so a
    server cannot flood or break the one-line error."""
    if value is None:
        return "(none)"
    cut = value[:limit]
    return repr(cut) + ("..." if len(value) > limit else "")


_STRONG_ETAG = re.compile(r'"[\x21\x23-\x7e\x80-\xff]*"')


def strong_etag(tag: str) -> bool:
    """Whether ``tag`` is a strong entity tag (RFC 9110: ``"..."``, no ``W/``), the only
    kind ``If-Match`` compares: a weak one never matches there."""
    return _STRONG_ETAG.fullmatch(tag) is not None
