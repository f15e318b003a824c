"""A store on ``s3://``: reads by tensorfile's own S3 client, the rest through s3fs.

:func:`~tensorfile.sources.store_for` gives an :class:`S3Store` for every ``s3://`` (and
``s3a://``) folder, so a store and :func:`~tensorfile.sources.open_path` read an object the
same way: with :class:`~.s3_source.S3Source` (signed range requests on the HTTP transport,
connections shared per origin), or with s3fs where that client declines the folder's options
(:func:`~._s3config.s3_config` decides once per store, as :func:`~.s3_source.open_s3` does
per URL). What reads bytes goes through the native client: :meth:`S3Store.open_source` (and
with it ``read_range`` and ``locate``), :meth:`S3Store.read_bounded`,
:meth:`S3Store.version` (the object's ETag, the one a conditional put compares, from a
request of one byte). :meth:`~..stores.fsspec_store.FsspecStore.file_size` asks s3fs (a
``HEAD``: a dataset's open checks every listed shard's size and reads none of them).
Listing, writing (single puts, ``If-Match``/``If-None-Match`` conditional puts), moving and
deleting stay s3fs's (:class:`~..stores.fsspec_store.FsspecStore`), and so do multipart
uploads (:meth:`S3Store.start_upload`, :meth:`~S3Store.upload_part`,
:meth:`~S3Store.complete_upload`, :meth:`~S3Store.abort_upload`): an object written in
parts by several processes at once, invisible until it is completed.

The endpoint, region and addressing style are checked when the store first reaches the
bucket, before any connection (:func:`~._s3config.s3_config`).

Example:
    >>> s = S3Store("s3://bucket/ds", {"anon": True, "endpoint_url": "http://127.0.0.1:9"})
    >>> s.url("a.json"), s.conditional_writes, s.atomic_publish
    ('s3://bucket/ds/a.json', True, True)
"""

from __future__ import annotations

from typing import Any

from ...core.errors import FormatError, SourceError, SourceNotFoundError
from ...core.source import ByteRequest, RangeRequest, Source
from ..local.paths import check_name, too_big
from ..stores.fsspec_store import FsspecStore
from ._s3config import S3Config, s3_config
from .s3_source import S3Source

__all__ = ["S3Store"]

_PROBE = 64 << 10
"""Bytes of the first request of a bounded read (a manifest or an index is usually less:
one request; a larger file takes a second)."""


class S3Store(FsspecStore):
    """A folder of an S3 bucket (``s3://bucket/prefix``; ``storage_options`` in s3fs's
    names): see the module docstring."""

    _config: S3Config | None = None
    _decided: bool = False

    @property
    def native(self) -> S3Config | None:
        """How tensorfile's client reaches the bucket; None where s3fs reads it (resolved on
        first use, in each process: credentials never travel in a pickle)."""
        if not self._decided:
            rest = self.root.partition("://")[2]
            bucket = rest.partition("/")[0]
            self._config = s3_config(bucket or None, self.options)
            self._decided = True
        return self._config

    @property
    def fs(self) -> Any:
        """s3fs's filesystem (made on first use), after the folder's settings are checked
        (:attr:`native`): nothing connects with a bad endpoint or region."""
        _ = self.native
        return FsspecStore.fs.fget(self)  # type: ignore[attr-defined]

    def _key(self, name: str) -> str:
        """The object key of ``name`` (checked: it cannot leave the root)."""
        check_name(name)
        prefix = self.root.partition("://")[2].partition("/")[2]
        return f"{prefix}/{name}" if prefix else name

    def _open(self, name: str, first: ByteRequest | None) -> S3Source:
        config = self.native
        assert config is not None
        return S3Source(
            f"{self.root}/{name}", first=first, settings=config.settings(self._key(name))
        )

    def _probe(self, name: str, length: int) -> S3Source | None:
        """The object ``name`` opened with a first request of ``length`` bytes; None when
        there is none (a :class:`SourceError` when ``name`` is a folder)."""
        try:
            return self._open(name, RangeRequest(0, length))
        except SourceNotFoundError:
            pass
        if self._is_folder(name):
            raise SourceError(f"{self.url(name)} is not a file") from None
        return None

    def _is_folder(self, name: str) -> bool:
        """Whether objects are listed under ``name/`` (s3fs: a listing)."""
        try:
            path = self._p(name, folder=True)
            self.fs.invalidate_cache(path)  # (never a listing from before another writer)
            return bool(self.fs.isdir(path))
        except Exception as exc:
            raise self._fail("stat", name, exc) from None

    def open_source(self, name: str, *, first: ByteRequest | None = None) -> Source:
        if self.native is None:
            return super().open_source(name, first=first)
        check_name(name)
        return self._open(name, first)

    def _head(self, name: str) -> tuple[int, str] | None:
        """The size and ETag (``""``: none) of the object ``name``, from a request of one
        byte; None when there is no such object."""
        src = self._probe(name, 1)
        if src is None:
            return None
        try:
            size, etag = src.size, getattr(src, "version", None)
        finally:
            src.close()
        return size, etag.strip('"') if isinstance(etag, str) else ""

    def version(self, name: str) -> str | None:
        if self.native is None:
            return super().version(name)
        head = self._head(name)
        if head is None:
            return None
        # (a server without ETags: s3fs hashes the content)
        return "etag:" + head[1] if head[1] else super().version(name)

    # -- multipart uploads -------------------------------------------------------------------

    MIN_PART = 5 << 20
    """S3's smallest part (every part but the last)."""
    MAX_PARTS = 10_000

    def _bucket_key(self, name: str) -> dict[str, str]:
        self._require("writes", "write", name)
        bucket = self.root.partition("://")[2].partition("/")[0]
        return {"Bucket": bucket, "Key": self._key(name)}

    def start_upload(self, name: str) -> str:
        """Begin a multipart upload of the object ``name``; its upload id."""
        try:
            reply = self.fs.call_s3("create_multipart_upload", **self._bucket_key(name))
        except Exception as exc:
            raise self._fail("start an upload of", name, exc) from None
        upload = reply.get("UploadId") if isinstance(reply, dict) else None
        if not isinstance(upload, str) or not upload:
            raise SourceError(f"{self.url(name)}: the server gave no upload id")
        return upload

    def upload_part(self, name: str, upload: str, number: int, data: bytes) -> str:
        """Upload part ``number`` (1-based) of ``upload``; its ETag."""
        try:
            reply = self.fs.call_s3(
                "upload_part",
                UploadId=upload,
                PartNumber=number,
                Body=data,
                **self._bucket_key(name),
            )
        except Exception as exc:
            raise self._fail(f"upload part {number} of", name, exc) from None
        etag = reply.get("ETag") if isinstance(reply, dict) else None
        if not isinstance(etag, str) or not etag:
            raise SourceError(f"{self.url(name)}: part {number} was stored without an ETag")
        return etag

    def complete_upload(self, name: str, upload: str, etags: list[str]) -> None:
        """Publish the object ``name`` from its parts (the ETags of parts 1, 2, ...)."""
        parts = [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]
        try:
            self.fs.call_s3(
                "complete_multipart_upload",
                UploadId=upload,
                MultipartUpload={"Parts": parts},
                **self._bucket_key(name),
            )
        except Exception as exc:
            raise self._fail("complete the upload of", name, exc) from None
        self.fs.invalidate_cache(self._p(name))

    def abort_upload(self, name: str, upload: str) -> None:
        """Drop ``upload`` and its parts (nothing was published); never raises."""
        try:
            self.fs.call_s3("abort_multipart_upload", UploadId=upload, **self._bucket_key(name))
        except Exception:  # (best effort: a bucket lifecycle rule removes what is left)
            pass

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        if self.native is None:
            return super().read_bounded(name, what, limit)
        src = self._probe(name, max(1, min(limit + 1, _PROBE)))
        if src is None:
            return None
        try:
            size = src.size
            if size > limit:
                raise FormatError(too_big(what, self.url(name), limit))
            return src.read(0, size)
        finally:
            src.close()
