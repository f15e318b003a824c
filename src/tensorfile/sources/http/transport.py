"""What a client built on the HTTP transport uses of it (the S3 client signs its requests
and sends them through it): the fetcher to derive from, the reply it reads, the deadline it
raises, the minimum speed a transfer keeps, what the standard library raises under it, and
how a header value is quoted in a message.

Example:
    >>> from tensorfile.sources.http.transport import show
    >>> show("x" * 70, 8)
    "'xxxxxxxx'..."
"""

from ._conn import DeadlineExceeded
from ._exchange import FOREIGN, Reply
from ._headers import show
from ._http import MIN_SPEED, HTTPFetcher

__all__ = ["FOREIGN", "MIN_SPEED", "DeadlineExceeded", "HTTPFetcher", "Reply", "show"]
