"""AWS Signature Version 4 for S3 ``GET`` requests: the ``Authorization`` header and the
``x-amz-*`` headers it covers, from credentials, a region and the request's host and path.

Only what reading an object needs: a ``GET`` without a body (its payload hash is that of no
bytes), a path already percent-encoded as it is sent (S3 does not normalise paths, so the
canonical path is the path), no query string. The signing key is derived per day; secrets
never appear in what is returned but the signature.

Example (the "GET Object" example of AWS's documentation of Signature Version 4 for S3):
    >>> import datetime
    >>> creds = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    >>> when = datetime.datetime(2013, 5, 24, tzinfo=datetime.timezone.utc)
    >>> out = sign_get(creds, "us-east-1", "examplebucket.s3.amazonaws.com", "/test.txt",
    ...                {"Range": "bytes=0-9"}, when)
    >>> out["Authorization"].rpartition("Signature=")[2]
    'f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41'
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
from dataclasses import dataclass, field

__all__ = ["EMPTY_SHA256", "Credentials", "sign_get"]

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
"""The payload hash of a request without a body."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """An access key pair, and the session token of temporary credentials."""

    key: str
    secret: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    k = _hmac(("AWS4" + secret).encode("utf-8"), day)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def sign_get(
    creds: Credentials,
    region: str,
    host: str,
    path: str,
    headers: dict[str, str],
    now: datetime.datetime | None = None,
    service: str = "s3",
) -> dict[str, str]:
    """The headers to add to a ``GET`` of ``path`` (percent-encoded, no query) on ``host``
    (``host[:port]`` as the ``Host`` header says it): ``x-amz-date``,
    ``x-amz-content-sha256``, ``x-amz-security-token`` (temporary credentials) and
    ``Authorization``, which signs them, ``host`` and ``headers`` (e.g. ``Range``)."""
    when = (now or datetime.datetime.now(datetime.UTC)).astimezone(datetime.UTC)
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    added = {"x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if creds.token:
        added["x-amz-security-token"] = creds.token
    signed = {k.lower(): " ".join(v.split()) for k, v in headers.items()}
    signed |= added | {"host": host}
    names = sorted(signed)
    canonical = "\n".join(
        [
            "GET",
            path,
            "",  # no query string
            "".join(f"{n}:{signed[n]}\n" for n in names),
            ";".join(names),
            EMPTY_SHA256,
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()]
    )
    signature = hmac.new(
        _signing_key(creds.secret, day, region, service), to_sign.encode("utf-8"), hashlib.sha256
    ).hexdigest()
    added["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.key}/{scope}, SignedHeaders={';'.join(names)}, "
        f"Signature={signature}"
    )
    return added
