"""What names a remote file in a cache key: its URL without credentials, fragment or the
signing parameters of a presigned URL, and the options that say which server holds it
(never the credentials among them). A rotated token or a re-signed URL finds the same
entries; nothing secret is ever part of a key or a name in the folder.

Example:
    >>> identity("https://me:pw@host/m.bin?X-Amz-Signature=ab&part=2&X-Amz-Date=1#x")
    'https://host/m.bin?part=2'
    >>> client = {"endpoint_url": "http://e", "aws_session_token": "t"}
    >>> print(endpoint_id({"key": "AKIA", "secret": "s", "client_kwargs": client}))
    [('client_kwargs.endpoint_url', "'http://e'")]
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..http import split_url

__all__ = ["endpoint_id", "identity"]

_SIGNING = re.compile(
    r"x-amz-(algorithm|credential|date|expires|signedheaders|signature|security-token)"
    r"|x-goog-(algorithm|credential|date|expires|signedheaders|signature)"
    r"|awsaccesskeyid|googleaccessid|signature|expires"
)
"""Query parameters that sign a presigned URL (AWS SigV4 and V2, GCS V4 and V2): not part
of what names the file."""
_ENDPOINT = ("endpoint_url", "endpoint", "account_name")


def identity(url: str) -> str:
    """What names the file of ``url``: ``url`` without ``user:password@``, the fragment and
    the signing parameters of a presigned URL (the other query parameters can name another
    file: they stay, in their order).

    Credentials are cut where the client parses them, before the authority's last ``@``,
    never by :func:`~tensorfile.sources.http.userinfo`'s wider rule for messages (an ``@`` in
    the path): ``http://evil:1/x@good/f`` goes to ``evil``, and its key must not be
    ``good``'s (a read of it would fill ``good``'s entries with ``evil``'s bytes).

    Example:
        >>> identity("http://evil:1/x@good:2/f.bin")
        'http://evil:1/x@good:2/f.bin'
    """
    parts = split_url(url)
    if parts is None:
        return url
    scheme, authority, path, after = parts
    whole = authority.rpartition("@")[2] + path
    query = after.partition("#")[0]
    if query.startswith("?"):
        kept = [p for p in query[1:].split("&") if not _signing(p)]
        query = "?" + "&".join(kept) if kept else ""
    return f"{scheme.lower()}://{whole}{query}"


def _signing(param: str) -> bool:
    name = urllib.parse.unquote(param.partition("=")[0]).strip().lower()
    return _SIGNING.fullmatch(name) is not None


def endpoint_id(options: Mapping[str, Any], resolved: str | None = None) -> str:
    """The options that say which server holds a file (``endpoint_url``, ``endpoint``,
    ``account_name``, ``client_kwargs.endpoint_url``; a URL without its credentials), as
    text for a key: never the credentials, the region or anything else. ``resolved``: the
    endpoint the client reads from when no option names one (the environment's, see
    :func:`~tensorfile.sources.router.resolved_endpoint`), counted then.

    Example:
        >>> endpoint_id({}) == endpoint_id({}, "http://a:1"), endpoint_id({}) == "[]"
        (False, True)
    """
    found: dict[str, Any] = {k: options[k] for k in _ENDPOINT if k in options}
    client = options.get("client_kwargs")
    if isinstance(client, Mapping) and "endpoint_url" in client:
        found["client_kwargs.endpoint_url"] = client["endpoint_url"]
    if not found and resolved:
        found["resolved endpoint"] = resolved
    return repr(sorted((k, repr(_redacted(v))) for k, v in found.items()))


def _redacted(value: Any) -> Any:
    """An endpoint URL without the credentials it may carry (``http://user:pw@host``)."""
    return identity(value) if isinstance(value, str) and "://" in value else value
