"""One publication at a time in an object-store folder: a lock object made by a conditional put.

An object store has no lock and no rename: a save publishes by completing its uploads and
putting its index, several requests that another job's could interleave with (one job's
shards under the other's index). :func:`publication_lock` serializes them: the object
:data:`LOCK_NAME` (``{"save": <id>, "since": <unix time>}``) is created with
``If-None-Match: *`` (:meth:`~tensorfile.sources.Store.write_if`), so of two saves one gets
it and the other fails with :class:`~tensorfile.errors.ConcurrentWriteError` at once. The
holder removes it when its publication ends, failed or not.

A lock a killed job left is older than :data:`STALE_AFTER` (15 minutes, by the clocks of the
machines that wrote and read it): the next save takes it over with a put conditional on
that lock's version (two saves taking over one stale lock: one wins). A publication is a few
requests (uploads completed, an index put): far less than the bound.

Example:
    >>> from tensorfile.sources.stores.memory_store import MemoryStore
    >>> s = MemoryStore()
    >>> with publication_lock(s, "a"):
    ...     with publication_lock(s, "b"):
    ...         pass
    Traceback (most recent call last):
    ...
    tensorfile.core.errors.ConcurrentWriteError: ...
    >>> s.version(LOCK_NAME) is None
    True
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from tensorfile.core.errors import ConcurrentWriteError, FormatError, SourceError

__all__ = ["LOCK_NAME", "STALE_AFTER", "publication_lock"]

LOCK_NAME = ".tensorfile-dcp-publishing"
"""The lock object of a folder (hidden: no reader takes it for a checkpoint's file)."""

STALE_AFTER = 15 * 60
"""Seconds after which a lock is taken to be a killed job's and taken over."""

_TRIES = 3

_LATEST = 253402300800
"""The first second of year 10000: a lock dated at or after it is undated (time.gmtime)."""


@contextlib.contextmanager
def publication_lock(store: Any, save_id: str) -> Iterator[None]:
    """Hold the folder's publication lock while the block runs (see the module docstring);
    a :class:`~tensorfile.errors.ConcurrentWriteError` when another save holds it."""
    mine = json.dumps({"save": save_id, "since": time.time()}).encode()
    version = _take(store, mine)
    try:
        yield
    finally:
        _release(store, version, mine)


def _take(store: Any, mine: bytes) -> str | None:
    for _ in range(_TRIES):
        try:
            return store.write_if(LOCK_NAME, mine, None)  # type: ignore[no-any-return]
        except ConcurrentWriteError:
            pass
        held = store.version(LOCK_NAME)
        if held is None:
            continue  # (released meanwhile: try again)
        holder, since = _read(store)
        age = time.time() - since if since is not None else None
        if age is None or age < STALE_AFTER:
            raise ConcurrentWriteError(
                f"{store.url()}: another save ({holder or 'unknown'}) is publishing a "
                f"checkpoint here{_since(since)}; this one published nothing. If no save "
                f"is running, remove {store.url(LOCK_NAME)} (a killed save's lock is taken "
                f"over after {STALE_AFTER // 60} minutes)",
                changed=LOCK_NAME,
            )
        try:
            return store.write_if(LOCK_NAME, mine, held)  # type: ignore[no-any-return]
        except ConcurrentWriteError:
            continue  # (another save took it over first, or it was released)
    raise ConcurrentWriteError(
        f"{store.url()}: other saves kept taking the publication lock {LOCK_NAME}; "
        "this one published nothing",
        changed=LOCK_NAME,
    )


def _read(store: Any) -> tuple[str | None, float | None]:
    """The holder and start time a lock says (None, None: gone or unreadable)."""
    try:
        raw = store.read_bounded(LOCK_NAME, "a publication lock", 4096)
        got = json.loads(raw) if raw is not None else None
    except (SourceError, FormatError, ValueError):
        return None, None
    if not isinstance(got, dict):
        return None, None
    holder = got.get("save")
    return holder if isinstance(holder, str) else None, _time(got.get("since"))


def _time(since: object) -> float | None:
    """A lock's start as a unix time; None (undated: the lock is held) where it is not a
    number in :data:`_LATEST`'s range (a huge int, infinity, NaN, a date past year 9999)."""
    if not isinstance(since, int | float) or isinstance(since, bool):
        return None
    if not 0 <= since < _LATEST:  # (False for NaN; a huge int never reaches float())
        return None
    return float(since)


def _since(since: float | None) -> str:
    if since is None:
        return " (its lock does not say since when)"
    return time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(since))


def _release(store: Any, version: str | None, mine: bytes) -> None:
    """Remove the lock if it is still this save's (best effort: a stale lock is taken over)."""
    try:
        now = store.version(LOCK_NAME)
        if now is None:
            return
        if (version is not None and now == version) or (
            version is None and store.read_bounded(LOCK_NAME, "a publication lock", 4096) == mine
        ):
            store.remove(LOCK_NAME)
    except SourceError:
        pass
