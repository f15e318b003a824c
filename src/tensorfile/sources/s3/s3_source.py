"""``s3://`` objects read by tensorfile's own client: the strict HTTP transport of
:mod:`..http.transport`, each request signed with AWS Signature Version 4 (:mod:`._sigv4`).

Why not boto3, s3fs or obstore: measured on a real S3 server on 127.0.0.1 (SeaweedFS; see
the documentation's benchmarks page, docs/benchmarks.md), concurrent ranged GETs received
straight into the tensors' buffers are as fast as obstore's Rust client and faster than
boto3 or s3fs, and they are the only way that holds a load's peak memory to the tensors
(every library hands back a buffer of its own that must be copied). The transport already
checks every reply the way an S3 reply must be checked: a ``206`` whose ``Content-Range`` is
exactly the range asked for, nothing read past it, a deadline per request, the object's
``ETag`` the same in every reply (an object replaced mid-load is an error, not a mix of two
versions).

Where the endpoint, region and credentials come from: :mod:`._s3config` (``storage_options``
in s3fs's names, then the ``AWS_*`` environment variables, then the AWS profile (its
endpoint and region, read as botocore reads them: :mod:`._profile`) and botocore's
credential chain when it is installed, then ``~/.aws/credentials``). An option this client
does not take, or ``$TENSORFILE_S3=fsspec``, sends the URL to fsspec (s3fs) instead:
:func:`open_s3` decides.

Errors: a missing object or bucket is a :class:`~tensorfile.errors.SourceNotFoundError`;
anything else a :class:`~tensorfile.errors.SourceError` naming the ``s3://`` URL and the
store's error code (``InvalidAccessKeyId``, ``SignatureDoesNotMatch``, ...), never a
credential.

Example:
    >>> from tensorfile.errors import SourceError
    >>> try:
    ...     S3Source("s3://bucket/m.safetensors?", endpoint_url="http://127.0.0.1:1")
    ... except InvalidArgumentError as exc:
    ...     print(exc)  # doctest: +ELLIPSIS
    s3://bucket/m.safetensors: not an s3:// URL, or options tensorfile's S3 client does not ...
"""

from __future__ import annotations

import re
from typing import Any

from ...core.errors import InvalidArgumentError
from ...core.source import ByteRequest
from ..http import HttpURL, redact, scrub
from ..http.remote import RemoteSource
from ..http.transport import FOREIGN, MIN_SPEED, DeadlineExceeded, HTTPFetcher, Reply, show
from ._s3config import S3Settings, s3_endpoint, s3_settings
from ._sigv4 import sign_get

__all__ = ["S3Fetcher", "S3Source", "open_s3", "s3_endpoint"]

_ERROR_BODY = 8192  # the most bytes of an error reply read for its code and message
_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")


class S3Fetcher(HTTPFetcher):
    """Signed range requests for one object (see :class:`~..http.transport.HTTPFetcher` for what is
    checked). ``timeout``/``retries`` None: what the settings say, else the transport's."""

    def __init__(
        self,
        url: str,
        settings: S3Settings,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        deadline: float | None = None,
        min_speed: float = MIN_SPEED,
    ) -> None:
        timeout = timeout if timeout is not None else settings.timeout or 30.0
        retries = retries if retries is not None else settings.retries
        super().__init__(
            settings.url,
            timeout=timeout,
            retries=3 if retries is None else retries,
            deadline=deadline,
            min_speed=min_speed,
        )
        self._s3 = settings
        self.name = redact(url)
        self.s3_url = url
        self._anonymous = settings.credentials() is None

    def _authorization(self, token: str | None) -> str | None:
        return None  # no bearer token ($HF_TOKEN...): S3 requests carry a signature

    def _signed(self, url: HttpURL) -> dict[str, str]:
        creds = self._s3.credentials()
        if creds is None:
            return {}
        return sign_get(creds, self._s3.region, url.authority, url.target.partition("?")[0], {})

    def _error_detail(self, reply: Reply) -> str:
        """The store's error code and message (from the first 8 KiB of the reply), and a
        hint when the bucket is in another region or no credentials were found."""
        try:
            body = reply.resp.read(_ERROR_BODY)
        except (DeadlineExceeded, *FOREIGN):
            body = b""
        text = body.decode("utf-8", "replace")
        said = [m.group(1) for m in (_CODE.search(text), _MESSAGE.search(text)) if m]
        out = ""
        if said:
            out = ": " + show(scrub(": ".join(said), self.url, self.s3_url), 300)
        region = reply.header("x-amz-bucket-region")
        if region and region != self._s3.region:
            out += (
                f" (the bucket is in region {show(region)}: set AWS_REGION, or pass "
                "client_kwargs={'region_name': ...})"
            )
        if reply.status in (401, 403) and self._anonymous:
            out += (
                " (no AWS credentials were found: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or pass key= and secret=)"
            )
        return out


class S3Source(RemoteSource):
    """An ``s3://bucket/key`` object read with signed range requests (see the module
    docstring). ``storage_options`` are s3fs's names (``endpoint_url``, ``key``,
    ``secret``, ``token``, ``anon``, ``profile``, ``client_kwargs={"region_name": ...}``);
    one this client does not take is an :class:`~tensorfile.errors.InvalidArgumentError`
    here (:func:`open_s3` sends such URLs to fsspec instead).

    Args:
        url: ``s3://bucket/key``.
        first: the first request (default: the head of the object).
        io_threads: requests of a load in flight at once (see :class:`RemoteSource`).
        io_chunk: bytes per request of a load.
        timeout: seconds for connecting and for each socket operation.
        retries: attempts after the first for transient failures.
        settings: where the object is and how to sign for it, resolved already (by
            :func:`open_s3` or a store); ``storage_options`` are then ignored.
    """

    def __init__(
        self,
        url: str,
        *,
        first: ByteRequest | None = None,
        io_threads: int | None = None,
        io_chunk: int | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        settings: S3Settings | None = None,
        **storage_options: Any,
    ) -> None:
        if settings is None:
            settings = s3_settings(url, storage_options)
        if settings is None:
            raise InvalidArgumentError(
                f"{redact(url)}: not an s3:// URL, or options tensorfile's S3 client does not "
                "take (FsspecSource reads it through s3fs)"
            )
        fetcher = S3Fetcher(url, settings, timeout=timeout, retries=retries)
        self.url = url
        self._s3 = fetcher
        super().__init__(
            fetcher, fetcher.name, fetcher.stats, first, io_threads=io_threads, io_chunk=io_chunk
        )

    def close(self) -> None:
        """Close the source (its connections wait in the pool for the next object)."""
        super().close()
        self._s3.close()


def open_s3(url: str, *, first: ByteRequest | None = None, **options: Any) -> RemoteSource:
    """An :class:`S3Source` for ``url``, or an :class:`~..stores.fsspec_source.FsspecSource` when
    the URL or its options are beyond tensorfile's S3 client (see :mod:`._s3config`).

    Example:
        >>> try:  # a version id is s3fs's business, and the timeout is not an s3fs option
        ...     open_s3("s3://bucket/m?versionId=1", timeout=5)
        ... except InvalidArgumentError as exc:
        ...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
        s3://bucket/m: timeout: options of tensorfile's S3 client, which does not read this
        URL (fsspec does)
    """
    tuning = {k: options.pop(k) for k in ("io_threads", "io_chunk") if k in options}
    transport = {k: options.pop(k) for k in ("timeout", "retries") if k in options}
    settings = s3_settings(url, options)
    if settings is not None:
        return S3Source(url, first=first, **tuning, **transport, settings=settings)
    if transport:
        raise InvalidArgumentError(
            f"{redact(url)}: {', '.join(sorted(transport))}: options of tensorfile's S3 client, "
            "which does not read this URL (fsspec does)"
        )
    from ..stores.fsspec_source import FsspecSource

    return FsspecSource(url, first=first, **tuning, **options)
