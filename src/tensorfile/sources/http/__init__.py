"""The HTTP transport and remote files as sources.

It owns everything a range request over HTTP(S) needs: URLs checked and redacted
(:mod:`._urls`), what is sent (:mod:`._request`), proxies (:mod:`._proxy`), connections with
deadlines and their pool, one per origin (:mod:`._conn`), one exchange through retries and
redirects (:mod:`._exchange`), strict reply headers (:mod:`._headers`), the fetcher
(:mod:`._http`), the speculative first read (:mod:`._first_read`), servers that ignore
``Range`` (:mod:`._prefix`), and :class:`~.remote.RemoteSource` /
:class:`~.remote.HTTPSource` over any fetcher (:mod:`.remote`). Other sub-packages use the
names this package exports (URLs shown without their secrets, what a fetcher returns) and
:mod:`.transport` (what a client built on the transport, the S3 one, needs); ``http.client``
and ``ssl`` load only with the modules that send requests.
"""

from ._first_read import HEAD_BYTES, Fetched
from ._urls import HttpURL, redact, scrub, split_url, userinfo

__all__ = ["HEAD_BYTES", "Fetched", "HttpURL", "redact", "scrub", "split_url", "userinfo"]
