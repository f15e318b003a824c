"""What names a remote file in a cache key: its URL without what the client that fetches
it ignores (credentials; for ``http(s)://``, the fragment and the signing parameters of a
presigned URL), and the options that say which server holds it (never the credentials
among them). A rotated token or a re-signed URL finds the same entries; two URLs share a
key only when their client fetches the same object; nothing secret is ever part of a key
or a name in the folder.

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
    r"|q-(sign-algorithm|ak|sign-time|key-time|header-list|url-param-list|signature)"
    r"|x-cos-security-token"
    r"|ossaccesskeyid|security-token"
    r"|x-oss-(signature-version|credential|date|expires|signature|additional-headers"
    r"|security-token)"
)
"""Query parameters that sign a presigned URL (AWS SigV4 and V2, GCS V4 and V2, Tencent
COS, Alibaba OSS V1 and V4): not part of what names the file."""
_SAS = re.compile(
    r"sv|ss|srt|sp|se|st|sip|spr|si|sr|sig|sdd|ses"
    r"|skoid|sktid|skt|ske|sks|skv|saoid|suoid|sduoid|scid"
    r"|rscc|rscd|rsce|rscl|rsct"
)
"""The parameters of an Azure Storage shared access signature (service, account and user
delegation SAS: version, services, resource, permissions, times, IP range, protocol, the
delegation key's fields, the response overrides, ``sig``): cut only from a query that is a
SAS, one holding ``sv`` and ``sig`` (short names that elsewhere may name a file)."""
_ENDPOINT = ("endpoint_url", "endpoint", "account_name")
_HTTP = frozenset({"http", "https"})
"""Schemes whose clients (tensorfile's HTTP client, fsspec's: ``urllib.parse``, ``yarl``)
read ``user:password@`` before the authority's last ``@`` as credentials, send the query
and never the fragment."""
_USERINFO = _HTTP | {"ftp", "sftp", "ssh", "smb", "webhdfs", "hdfs"}
"""Schemes whose clients read ``user:password@`` as credentials (the others: fsspec's
``infer_storage_options``, which keeps a ``#...`` in the path). Elsewhere an ``@`` names
the object (s3fs takes ``s3://a@b/k``'s bucket to be ``a@b``, the memory filesystem's path
is ``/a@b/k``, adlfs reads ``abfs://container@account``), and so do ``?`` and ``#``: there
the URL is kept whole."""


def identity(url: str) -> str:
    """What names the file of ``url``: ``url`` without ``user:password@``, the fragment and
    the signing parameters of a presigned URL (the other query parameters can name another
    file: they stay, in their order).

    Each part is cut only where the client that fetches the URL ignores it (the key names
    exactly the host and path it fetches): credentials before the authority's last ``@``
    for the schemes whose client reads them there (:data:`_USERINFO`), never by
    :func:`~tensorfile.sources.http.userinfo`'s wider rule for messages (an ``@`` in the
    path: ``http://evil:1/x@good/f`` goes to ``evil``, and its key must not be ``good``'s,
    or a read of it would fill ``good``'s entries with ``evil``'s bytes); the fragment and
    the signing parameters for ``http(s)://`` only (for s3fs or the memory filesystem a
    ``#`` or ``?`` is part of the object's name).

    Example:
        >>> identity("http://evil:1/x@good:2/f.bin"), identity("http://u:p@ss@good/f.bin")
        ('http://evil:1/x@good:2/f.bin', 'http://good/f.bin')
        >>> identity("memory://a@b/f.bin#2")  # (the memory filesystem's path: /a@b/f.bin#2)
        'memory://a@b/f.bin#2'
    """
    parts = split_url(url)
    if parts is None:
        return url
    scheme, authority, path, after = parts
    scheme = scheme.lower()
    client = scheme.rpartition("::")[2]  # (a chain: its last protocol's)
    if client in _USERINFO:
        authority = authority.rpartition("@")[2]
    if client not in _HTTP:
        return f"{scheme}://{authority}{path}{after}"
    whole = authority + path
    query = after.partition("#")[0]
    if query.startswith("?"):
        params = query[1:].split("&")
        sas = {"sv", "sig"} <= {_name(p) for p in params}
        kept = [p for p in params if not _signing(p, sas)]
        query = "?" + "&".join(kept) if kept else ""
    return f"{scheme}://{whole}{query}"


def _name(param: str) -> str:
    return urllib.parse.unquote(param.partition("=")[0]).strip().lower()


def _signing(param: str, sas: bool) -> bool:
    """Whether ``param`` signs the URL (``sas``: the query is an Azure SAS)."""
    name = _name(param)
    return _SIGNING.fullmatch(name) is not None or (sas and _SAS.fullmatch(name) is not None)


def endpoint_id(options: Mapping[str, Any], resolved: str | None = None) -> str:
    """The options that say which server holds a file (``endpoint_url``, ``endpoint``,
    ``account_name``, ``client_kwargs.endpoint_url``; a URL without its credentials), as
    text for a key: never the credentials, the region or anything else. ``resolved``: the
    endpoint the client reads from when no option names one (the environment's or the AWS
    profile's, see :func:`~tensorfile.sources.router.resolved_endpoint`), counted then. An
    option set to None or ``""`` names no server (botocore, s3fs and tensorfile's client
    skip it and go to ``resolved``): it is not counted either.

    Example:
        >>> endpoint_id({}) == endpoint_id({}, "http://a:1"), endpoint_id({}) == "[]"
        (False, True)
    """
    found: dict[str, Any] = {k: options[k] for k in _ENDPOINT if _given(options.get(k))}
    client = options.get("client_kwargs")
    if isinstance(client, Mapping) and _given(client.get("endpoint_url")):
        found["client_kwargs.endpoint_url"] = client["endpoint_url"]
    if not found and resolved:
        found["resolved endpoint"] = resolved
    return repr(sorted((k, repr(_redacted(v))) for k, v in found.items()))


def _given(value: Any) -> bool:
    """Whether an endpoint option names a server (None and ``""`` do not: the clients skip
    them, as :func:`~tensorfile.sources.s3._s3config.s3_endpoint` does)."""
    return value is not None and value != ""


def _redacted(value: Any) -> Any:
    """An endpoint URL without the credentials it may carry (``http://user:pw@host``)."""
    return identity(value) if isinstance(value, str) and "://" in value else value
