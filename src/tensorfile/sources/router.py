"""One URL router: what a path or URL names, decided once for every entry point.

:func:`route` turns what a user passed into a :class:`Route`: a local path (plain, or a
``file://``/``local://`` URL stripped to its path, so that every local rule applies to it
alike), fsspec's memory filesystem (``memory://``), an HTTP(S) URL, or any other fsspec URL
(``s3://``, ``gs://``, ``hf://``, ``simplecache::s3://``, ...). The sources
(:func:`~tensorfile.sources.open_path`), the stores (:func:`store_for`) and :func:`is_url`
all ask it.

A string whose scheme is a known protocol is a URL, always: a folder named ``memory:`` or
``s3:`` in the working directory never shadows ``memory://...`` or ``s3://...`` (a local file
whose name holds ``://`` is reachable as ``./memory://...`` or by its absolute path). A string
with an unknown scheme is a URL unless a local file of that name exists.

Example:
    >>> route("s3://bucket/m.safetensors")
    Route(kind='fsspec', target='s3://bucket/m.safetensors', protocol='s3')
    >>> route("file:///tmp/a%20b/m.safetensors")
    Route(kind='local', target='/tmp/a b/m.safetensors', protocol='file')
    >>> route("./memory://x").kind, route("memory://x").kind, route("https://h/m").kind
    ('local', 'memory', 'http')
"""

from __future__ import annotations

import os
import re
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..core.errors import InvalidArgumentError, InvalidTypeError
from ..core.source import ByteRequest, Source
from .stores.store import Store

__all__ = [
    "Route",
    "RouteKind",
    "StoreLocation",
    "is_url",
    "local_path_of",
    "path_text",
    "remote_source",
    "resolved_endpoint",
    "route",
    "store_for",
]

RouteKind = Literal["local", "memory", "http", "fsspec"]
"""Where a route leads: a local path, fsspec's memory filesystem, HTTP(S), another fsspec
filesystem."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_LOCAL_SCHEMES = frozenset({"file", "local"})
_HTTP_SCHEMES = frozenset({"http", "https"})
_S3_SCHEMES = frozenset({"s3", "s3a"})
"""Schemes tensorfile's own S3 client reads (and :class:`~.s3.s3_store.S3Store` holds)."""
_KNOWN = frozenset(
    {
        *_LOCAL_SCHEMES,
        *_HTTP_SCHEMES,
        "memory",
        # object stores and remote filesystems
        "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "ocilake", "oss", "r2",
        "tos", "tosfs", "hf", "hdfs", "webhdfs", "arrow_hdfs", "ftp", "sftp", "ssh", "smb",
        "webdav", "dbfs", "lakefs", "dvc", "git", "github", "gist", "gdrive", "dropbox", "box",
        "wandb", "root", "jupyter", "jlab", "data",
        # wrappers of another filesystem
        "simplecache", "filecache", "blockcache", "cached", "reference", "zip", "tar",
        "libarchive", "dir",
    }
)  # fmt: skip
"""Protocols that are URLs however the working directory looks (fsspec's registry adds the
ones a program registered)."""


@dataclass(frozen=True, slots=True)
class Route:
    """What a path or URL names.

    Attributes:
        kind: ``"local"``, ``"memory"``, ``"http"`` or ``"fsspec"``.
        target: the local path (for ``"local"``), else the URL as given.
        protocol: the URL's scheme (``"file"`` for a ``file://`` URL, ``"s3"``,
            ``"simplecache::s3"``, ...); ``""`` for a plain path.
    """

    kind: RouteKind
    target: str
    protocol: str

    @property
    def is_local(self) -> bool:
        """Whether the route is a local path."""
        return self.kind == "local"


def path_text(path: object) -> str:
    """``path`` (a ``str`` or ``os.PathLike``) as text; anything else is an
    :class:`~tensorfile.errors.InvalidTypeError`.

    Example:
        >>> import pathlib
        >>> path_text(pathlib.PurePath("a/b"))
        'a/b'
    """
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise InvalidTypeError(f"expected a path, a URL or bytes, got {type(path).__name__}")
    return text


def _registered(protocol: str) -> bool:
    """Whether fsspec (when it is installed) knows ``protocol``: only asked when a local file
    of the URL's name exists, so ``import tensorfile`` never loads fsspec."""
    if "fsspec" not in sys.modules:
        try:
            import fsspec  # noqa: F401
        except ImportError:
            return False
    from fsspec.registry import known_implementations, registry

    return protocol in known_implementations or protocol in registry


def _file_url_path(text: str, protocol: str) -> str:
    """The local path of a ``file://`` (or ``local://``) URL: percent-decoded, without a
    query or fragment; ``file://localhost/x`` is ``/x``; ``file://rel/x`` is ``rel/x``."""
    rest = text[len(protocol) + 3 :]
    for mark in "?#":
        rest = rest.partition(mark)[0]
    if rest.startswith("localhost/"):
        rest = rest[len("localhost") :]
    path = urllib.parse.unquote(rest)
    if not path:
        raise InvalidArgumentError(f"{text!r}: a {protocol}:// URL needs a path")
    return path


def route(target: str | os.PathLike[str]) -> Route:
    """Where ``target`` (a path or URL) leads (see the module docstring).

    Example:
        >>> route("model.safetensors")
        Route(kind='local', target='model.safetensors', protocol='')
        >>> route("simplecache::s3://b/x").kind
        'fsspec'
    """
    text = path_text(target)
    protocol, sep, _ = text.partition("://")
    if not sep:
        return Route("local", text, "")
    chain = protocol.split("::")
    if not all(_SCHEME.fullmatch(p) for p in chain):
        return Route("local", text, "")  # not written as a URL
    names = [p.lower() for p in chain]
    if len(names) == 1 and names[0] in _LOCAL_SCHEMES:
        return Route("local", _file_url_path(text, protocol), names[0])
    known = all(n in _KNOWN for n in names)
    if not known and os.path.exists(text) and not all(_registered(n) for n in names):
        return Route("local", text, "")  # a local name that holds "://"
    shown = "::".join(names)
    if shown in _HTTP_SCHEMES:
        return Route("http", text, shown)
    if shown == "memory":
        return Route("memory", text, shown)
    return Route("fsspec", text, shown)


def local_path_of(target: str | os.PathLike[str]) -> str | None:
    """The local path ``target`` names (a plain path, or a ``file://`` URL's path), or None
    for a URL of anything else.

    Example:
        >>> local_path_of("file:///data/m.safetensors"), local_path_of("s3://b/m")
        ('/data/m.safetensors', None)
    """
    r = route(target)
    return r.target if r.is_local else None


def is_url(path: object) -> bool:
    """Whether ``path`` is written as a URL (``scheme://...``) rather than a plain local path.
    A ``file://`` URL is a URL here (:func:`local_path_of` gives its path); a local file whose
    name holds ``://`` under an unknown scheme is not.

    Example:
        >>> is_url("https://host/m.safetensors"), is_url("model.zt"), is_url("file:///x")
        (True, False, True)
    """
    if not isinstance(path, str) or "://" not in path:
        return False
    try:
        r = route(path)
    except InvalidArgumentError:
        return True  # a file:// URL without a path: a URL all the same
    return r.protocol != ""


StoreLocation = str | os.PathLike[str] | Store
"""Where a store is: a local path, a URL, or a :class:`Store`."""


def store_for(
    location: StoreLocation,
    storage_options: Mapping[str, Any] | None = None,
    *,
    read_only: bool = False,
) -> Store:
    """The :class:`~.stores.store.Store` of a location (routed by :func:`route`): a local path or a
    ``file://`` URL is a :class:`~.stores.local_store.LocalStore` (made absolute: a Spark job ships
    the store to executors whose working directories are not the driver's); an ``s3://`` URL an
    :class:`~.s3.s3_store.S3Store` (which reads with the client :func:`remote_source` takes for
    the URL); any other URL (``memory://`` included) an
    :class:`~.stores.fsspec_store.FsspecStore` with ``storage_options`` (an ``http(s)://``
    one reads through the HTTP transport, as :func:`remote_source` does). Options for a local
    folder are refused, not ignored.

    Example:
        >>> s = store_for("s3://bucket/ds", {"anon": True})
        >>> type(s).__name__, s.url("x.json")
        ('S3Store', 's3://bucket/ds/x.json')
    """
    if isinstance(location, Store):
        if storage_options:
            raise InvalidArgumentError("storage_options go with a path or URL, not a Store")
        return location
    try:
        text = os.fspath(location)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(
            f"a store location is a path or URL, got {type(location).__name__}"
        )
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a mapping, got {type(storage_options).__name__}"
        )
    r = route(text)
    if r.is_local:
        if storage_options:
            raise InvalidArgumentError(
                f"storage_options apply to remote URLs, not to the local folder {r.target}"
            )
        from .stores.local_store import LocalStore

        return LocalStore(os.path.abspath(r.target), read_only=read_only)
    if r.protocol in _S3_SCHEMES:
        from .s3.s3_store import S3Store

        return S3Store(text, storage_options, read_only=read_only)
    from .stores.fsspec_store import FsspecStore

    return FsspecStore(text, storage_options, read_only=read_only)


def remote_source(
    r: Route,
    *,
    first: ByteRequest | None = None,
    allow_full_download: bool | None = None,
    **options: Any,
) -> Source:
    """The source of the remote route ``r``: the HTTP transport for ``http(s)://`` (options it
    does not take are an :class:`~tensorfile.errors.InvalidArgumentError`),
    tensorfile's S3 client for ``s3://`` (fsspec where it declines the URL or its options:
    :func:`~.s3.s3_source.open_s3`), fsspec for the rest. The stores of :func:`store_for`
    read their files with the same clients.

    Example:
        >>> import fsspec
        >>> fsspec.filesystem("memory").pipe("/remote-source-doc/x.bin", b"0123")
        >>> src = remote_source(route("memory://remote-source-doc/x.bin"))
        >>> type(src).__name__, src.read(1, 2)
        ('FsspecSource', b'12')
    """
    if r.kind == "http":
        from .http.remote import HTTPSource, check_http_options

        check_http_options(r.target, options)
        return HTTPSource(r.target, first=first, allow_full_download=allow_full_download, **options)
    if r.protocol in _S3_SCHEMES:
        from .s3.s3_source import open_s3

        return open_s3(r.target, first=first, **options)
    from .stores.fsspec_source import FsspecSource

    return FsspecSource(r.target, first=first, **options)


def resolved_endpoint(target: str, options: Mapping[str, Any]) -> str | None:
    """The endpoint the client of the remote URL ``target`` reads from when no option names
    one but the configuration does (an ``s3://`` URL: ``$AWS_ENDPOINT_URL_S3``,
    ``$AWS_ENDPOINT_URL``, the AWS profile's, unless ``$AWS_IGNORE_CONFIGURED_ENDPOINT_URLS``
    says to ignore them: :func:`~.s3._s3config.s3_endpoint`); None otherwise (AWS). Cache
    keys count it: the bytes of one server are never served for another.

    Example:
        >>> resolved_endpoint("memory://x/y", {}) is None
        True
    """
    if route(target).protocol not in _S3_SCHEMES:
        return None
    from .s3.s3_source import s3_endpoint

    return s3_endpoint(options)
