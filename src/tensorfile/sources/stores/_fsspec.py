"""The one place fsspec's exceptions become tensorfile's, for reading and writing alike.

fsspec and its backends raise whatever they raise (``FileNotFoundError``, ``ValueError``,
``TypeError``, botocore's and aiohttp's own errors, ...), often with the URL, and with it its
secrets, in the text. :func:`connect` makes the filesystem of a URL, and :func:`failure`
translates any exception of a later call: a :class:`~tensorfile.errors.SourceError` naming
the redacted URL, the foreign text scrubbed of the URL's secrets (:func:`~..http.scrub`).

Example:
    >>> fs, path = connect("memory://doc-fsspec/x", {}, "memory://doc-fsspec/x", "reading it")
    >>> print(failure("read", "memory://doc-fsspec/x", FileNotFoundError("/x?tok=abcd1234"),
    ...               "memory://doc-fsspec/x?tok=abcd1234"))
    cannot read memory://doc-fsspec/x: FileNotFoundError: /x?***
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.errors import InvalidArgumentError, SourceError, TensorFileError, UnsupportedError
from ...core.extras import missing, require
from ..http import scrub

__all__ = ["OBJECT_STORES", "connect", "describe", "failure", "protocols_of"]

OBJECT_STORES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "r2"}
)
"""fsspec protocols of object stores: no folders, no rename, and a single put is atomic."""


def describe(exc: BaseException, url: str) -> str:
    """A foreign exception as text: its type, and its message scrubbed of ``url``'s
    secrets."""
    return f"{type(exc).__name__}: {scrub(str(exc), url) or '(no details)'}"


def failure(doing: str, shown: str, exc: BaseException, url: str) -> TensorFileError:
    """The :class:`SourceError` of a failed fsspec call: ``cannot {doing} {shown}: ...``; a
    tensorfile error (a missing package, a refused setting) as it is: it says what is wrong."""
    if isinstance(exc, TensorFileError):
        return exc
    return SourceError(f"cannot {doing} {shown}: {describe(exc, url)}")


_S3_SCHEMES = ("s3", "s3a")
"""URL schemes fsspec reads with s3fs (the ``s3`` extra installs both)."""


def connect(url: str, options: Mapping[str, Any], shown: str, needs: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` (with ``options``) and the path in it. ``shown`` is
    the redacted URL messages name; ``needs`` says what needs fsspec (``"reading it"``).

    Missing fsspec, or the URL's filesystem package, is an
    :class:`~tensorfile.errors.UnsupportedError`; options the filesystem does not take are an
    :class:`~tensorfile.errors.InvalidArgumentError`; anything else a :class:`SourceError`.
    """
    s3 = url.split("://", 1)[0].lower() in _S3_SCHEMES
    fsspec = require("fsspec", f"{shown}: {needs}", extra="s3" if s3 else "remote")
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        if s3:  # fsspec's filesystem for S3 is s3fs, which the s3 extra installs
            raise missing(f"{shown}: {needs}", "s3fs", extra="s3") from None
        raise UnsupportedError(
            f"{shown}: the filesystem's package is missing: {describe(exc, url)}"
        ) from None
    except TypeError as exc:
        raise InvalidArgumentError(f"{shown}: bad storage options: {describe(exc, url)}") from None
    except Exception as exc:
        raise failure("open", shown, exc, url) from None
    return fs, str(path)


def protocols_of(fs: Any) -> set[str]:
    """The protocol names of the fsspec filesystem ``fs``."""
    protocols = fs.protocol
    return {protocols} if isinstance(protocols, str) else set(protocols)
