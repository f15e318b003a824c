"""The one place that reads the cache's environment and parses its limits: where the
cache folder is, how much it may hold, the chunk size of newly cached files and whether
entries are checked when read. Both kinds of entries (chunks of remote files, whole shards
of remote datasets) take their settings from here, so one folder has one limit.

Example:
    >>> settings(limit="1GiB", chunk="4MiB", verify=False)
    CacheSettings(limit=1073741824, chunk=4194304, verify=False)
    >>> parse_limit("512MiB"), parse_limit(1000)
    (536870912, 1000)
    >>> resolve_cache_dir("/tmp/c"), resolve_cache_dir(False), resolve_cache_dir("")
    ('/tmp/c', None, None)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...core.errors import InvalidArgumentError
from ...core.sizes import parse_size

__all__ = [
    "CACHE_CHUNK_ENV",
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
    "CACHE_VERIFY_ENV",
    "DEFAULT_CHUNK",
    "DEFAULT_LIMIT",
    "MAX_CHUNK",
    "CacheSettings",
    "default_cache_dir",
    "parse_limit",
    "resolve_cache_dir",
    "settings",
    "verify_default",
]

CACHE_DIR_ENV = "TENSORFILE_CACHE_DIR"
"""The cache folder for every remote load (and remote dataset) that does not pass
``cache_dir=``."""
CACHE_SIZE_ENV = "TENSORFILE_CACHE_SIZE"
"""The cache folder's one size limit (``"20GiB"``, ``"500MB"``, a number of bytes): chunks
and shards together."""
CACHE_CHUNK_ENV = "TENSORFILE_CACHE_CHUNK"
"""The chunk size of newly cached files (a file cached with another size is a miss)."""
CACHE_VERIFY_ENV = "TENSORFILE_CACHE_VERIFY"
"""``1``: chunks are written with a CRC-32 checked when read (a chunk without one is
fetched again), and every open of a cached shard checks its XXH3-64 and asks the store for
the object's ETag; costs ~0.5 s per GiB of one core each way."""

DEFAULT_LIMIT = 20 << 30
"""The size limit when neither ``cache_limit`` nor ``$TENSORFILE_CACHE_SIZE`` says: 20 GiB."""
DEFAULT_CHUNK = 16 << 20
"""The chunk size when ``$TENSORFILE_CACHE_CHUNK`` is unset: 16 MiB."""
MAX_CHUNK = 1 << 30
"""The largest chunk size."""


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """How a cache folder is used: the size limit, the chunk size of new entries and
    whether reads check each entry."""

    limit: int = DEFAULT_LIMIT
    chunk: int = DEFAULT_CHUNK
    verify: bool = False


def verify_default() -> bool:
    """Whether ``$TENSORFILE_CACHE_VERIFY`` asks for checked reads (``1``, ``true``, ``yes``)."""
    return os.environ.get(CACHE_VERIFY_ENV, "").strip().lower() in ("1", "true", "yes")


def settings(
    limit: int | str | None = None, chunk: int | str | None = None, verify: bool | None = None
) -> CacheSettings:
    """The settings from the arguments, else the environment, else the defaults."""
    size = _size(chunk, CACHE_CHUNK_ENV, DEFAULT_CHUNK)
    if size > MAX_CHUNK:
        raise InvalidArgumentError(f"cache chunk size {size:,}: at most 1 GiB")
    return CacheSettings(
        limit=parse_limit(limit),
        chunk=size,
        verify=verify_default() if verify is None else bool(verify),
    )


def _size(value: int | str | None, env: str, default: int) -> int:
    """``value``, else ``$env``, else ``default``, as a byte count; a bad variable is an
    error that names it."""
    if value is not None:
        return parse_size(value)
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        return parse_size(text)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"${env}: {exc}") from None


def parse_limit(value: int | str | None) -> int:
    """A cache size limit in bytes: ``value`` (an int, or a text like ``"20GB"`` or
    ``"512MiB"``), else ``$TENSORFILE_CACHE_SIZE``, else :data:`DEFAULT_LIMIT`.

    Example:
        >>> try:
        ...     parse_limit("12 parsecs")
        ... except InvalidArgumentError as exc:
        ...     print(str(exc).partition(":")[0])
        cache_limit '12 parsecs'
    """
    where = "cache_limit"
    if value is None:
        text = os.environ.get(CACHE_SIZE_ENV, "").strip()
        if not text:
            return DEFAULT_LIMIT
        value, where = text, f"${CACHE_SIZE_ENV}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(
            f"{where} {value!r}: give a whole number of bytes (an int > 0) or a size text "
            "such as '20GiB' or '500MB'"
        )
    try:
        return parse_size(value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where} {value!r}: {str(exc).partition(': ')[2]}") from None


def default_cache_dir() -> str:
    """``$TENSORFILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorfile`` (``~/.cache/tensorfile``)."""
    found = os.environ.get(CACHE_DIR_ENV)
    if found:
        return found
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorfile")


def resolve_cache_dir(cache_dir: str | bytes | os.PathLike[str] | bool | None) -> str | None:
    """The cache folder a load uses: ``cache_dir`` when given (``False`` or ``""``: none;
    ``True``: :func:`default_cache_dir`), else ``$TENSORFILE_CACHE_DIR`` (unset or empty:
    none)."""
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_DIR_ENV) or False
    if cache_dir is True:
        return default_cache_dir()
    if cache_dir is False or cache_dir == "":
        return None
    if not isinstance(cache_dir, str | bytes | os.PathLike):
        raise InvalidArgumentError(
            "cache_dir must be a folder (a str, bytes or os.PathLike), a bool or None, got "
            f"{cache_dir!r}"
        )
    text = os.fsdecode(cache_dir)
    if not isinstance(text, str) or "\0" in text:
        raise InvalidArgumentError(f"cache_dir is not a usable folder name: {text!r}")
    return text or None
