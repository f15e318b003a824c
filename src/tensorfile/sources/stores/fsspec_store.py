"""A store on any fsspec filesystem (``s3://``, ``gs://``, ``az://``, ``hdfs://``,
``memory://``, ...), with ``storage_options`` passed to fsspec and the credentials fsspec
finds in the environment.

Object stores have no atomic rename of folders, but a single object write is atomic: a
small file written in one ``pipe`` (a dataset's manifest) is a commit point. Other
filesystems write in place (``atomic_publish`` is False). Listings are never taken from
fsspec's cache: other processes (a job's tasks) write here too. Errors go through the one
fsspec mapper (:mod:`._fsspec`), shared with :class:`~.fsspec_source.FsspecSource`.

Conditional writes: on S3 a version is the object's ETag and :meth:`FsspecStore.write_if`
is one put with ``If-Match`` (``If-None-Match: *`` for a file that must not exist yet), so
the server refuses it when another writer got there first; on ``memory://`` (one process)
the compare and the write hold a lock of the process. Other filesystems compare the
content's SHA-256 and then write (``conditional_writes`` is False).

Example:
    >>> s = FsspecStore("memory://fsspec-store-doc/one")
    >>> s.write_atomic("a.bin", b"0123456789")
    >>> s.read_range("a.bin", 8, 2), s.supports_writes, s.atomic_publish
    (b'89', True, True)
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import posixpath
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from ...core.errors import FormatError, SourceError, TensorFileError
from ...core.source import ByteRequest, Source
from ..http import redact
from ..local.paths import check_name, too_big
from ._fsspec import OBJECT_STORES, connect, failure, protocols_of
from .store import Store

__all__ = ["FsspecStore"]

_READ_ONLY = frozenset({"http", "https"})
"""Protocols whose filesystems read only."""
_ATOMIC = OBJECT_STORES | {"memory"}
"""Protocols where one put is seen whole or not at all."""
_S3 = frozenset({"s3", "s3a"})
"""Protocols whose puts take ``If-Match``/``If-None-Match``."""
_CONDITIONAL = _S3 | {"memory"}
"""Protocols where :meth:`FsspecStore.write_if` is atomic against other writers."""
_MEMORY_LOCK = threading.RLock()
"""Compares and writes of ``memory://`` files take turns (one process holds them all)."""


class FsspecStore(Store):
    """A folder of an fsspec filesystem (the URL's ``root``; ``storage_options`` for it)."""

    def __init__(
        self,
        root: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self.root = root.rstrip("/")
        self.options = dict(storage_options or {})
        self.read_only = read_only
        protocol = self.root.partition("://")[0].lower().split("::")[0]
        writable = not read_only and protocol not in _READ_ONLY
        self.supports_writes = self.supports_deletes = writable
        self.supports_listing = protocol not in _READ_ONLY
        self.atomic_publish = protocol in _ATOMIC
        self.conditional_writes = protocol in _CONDITIONAL
        self._protocol = protocol
        self._fs: Any = None
        self._base = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remake, (type(self), self.root, self.options, self.read_only))

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (made on first use, in each process)."""
        if self._fs is None:
            fs, base = connect(self.root, self.options, self.url(), "a store at a URL")
            self._fs, self._base = fs, base.rstrip("/")
        return self._fs

    def _p(self, name: str, *, folder: bool = False) -> str:
        """The filesystem path of ``name`` (checked: it cannot leave the root)."""
        check_name(name, folder=folder)
        if self._fs is None:
            self._fs = self.fs  # (sets _base too)
        return posixpath.join(self._base, name) if name else self._base

    def open_url(self, name: str) -> str:
        check_name(name)
        return f"{self.root}/{name}"

    def url(self, name: str = "") -> str:
        return redact(f"{self.root}/{name}" if name else self.root)

    def location(self) -> str:
        return self.root

    def _fail(self, doing: str, name: str, exc: BaseException) -> TensorFileError:
        return failure(doing, self.url(name), exc, self.root)

    def _info(self, name: str) -> dict[str, Any] | None:
        path = self._p(name, folder=True)
        try:
            self.fs.invalidate_cache(path)  # never a cached listing
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail("stat", name, exc) from None
        return info if isinstance(info, dict) else None

    def make_root(self) -> None:
        self._require("writes", "create")
        if protocols_of(self.fs) & OBJECT_STORES:
            # no folders to make; and s3fs's makedirs would create a missing bucket, which a
            # dataset write must not do behind the user's back (the first upload fails)
            return
        try:
            self.fs.makedirs(self._p("", folder=True), exist_ok=True)
        except FileExistsError:
            pass
        except Exception as exc:
            raise self._fail("create", "", exc) from None
        info = self._info("")
        if info is not None and info.get("type") == "file":
            raise SourceError(f"cannot create the dataset folder {self.url()}: a file is there")

    def is_folder(self) -> bool:
        try:
            return bool(self.fs.isdir(self._p("", folder=True)))
        except Exception as exc:
            raise self._fail("stat", "", exc) from None

    def _file_info(self, name: str) -> dict[str, Any] | None:
        """The filesystem's fresh record of the file ``name``; None when nothing is there,
        a :class:`SourceError` when something that is not a file is."""
        check_name(name)
        info = self._info(name)
        if info is not None and info.get("type") != "file":
            raise SourceError(f"{self.url(name)} is not a file")
        return info

    def file_size(self, name: str) -> int | None:
        info = self._file_info(name)
        if info is None:
            return None
        size = info.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise SourceError(f"{self.url(name)}: the filesystem gives no usable size")
        return size

    def open_source(self, name: str, *, first: ByteRequest | None = None) -> Source:
        check_name(name)
        url = f"{self.root}/{name}"
        if self._protocol in _READ_ONLY:  # HTTP(S): the transport open_path reads it with
            from ..http.remote import HTTPSource, check_http_options

            check_http_options(url, self.options)
            return HTTPSource(url, first=first, **self.options)
        from .fsspec_source import FsspecSource

        return FsspecSource(url, first=first, **self.options)

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        size = self.file_size(name)
        if size is None:
            return None
        if size > limit:
            raise FormatError(too_big(what, self.url(name), limit))
        if size == 0:
            return b""  # (a range request of an empty object is unsatisfiable on S3)
        try:
            data = self.fs.cat_file(self._p(name), start=0, end=limit + 1)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail("read", name, exc) from None
        if not isinstance(data, bytes):
            raise SourceError(f"cannot read {self.url(name)}: the filesystem gave no bytes")
        if len(data) > limit:
            raise FormatError(too_big(what, self.url(name), limit))
        return data

    def write_atomic(self, name: str, data: bytes) -> None:
        self._require("writes", "write", name)
        # one object written in one request: an object store shows it whole or not at all
        try:
            self.fs.pipe_file(self._p(name), bytes(data))
        except Exception as exc:
            raise self._fail("write", name, exc) from None

    def version(self, name: str) -> str | None:
        info = self._file_info(name)
        if info is None:
            return None
        etag = info.get("ETag") or info.get("etag")
        if self._protocol in _S3 and isinstance(etag, str) and etag:
            return "etag:" + etag.strip('"')
        digest = hashlib.sha256()
        try:
            with self.fs.open(self._p(name), "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail("read", name, exc) from None
        return "sha256:" + digest.hexdigest()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        if self._protocol != "memory":  # (an object store has no lock: its puts are conditional)
            yield
            return
        with _MEMORY_LOCK:
            yield

    def write_if(self, name: str, data: bytes, expected: str | None) -> str | None:
        self._require("writes", "write", name)
        if self._protocol not in _S3 or (expected is not None and not expected.startswith("etag:")):
            return super().write_if(name, data, expected)
        self.check_version(name, expected)  # (fails early, and without a request's cost)
        condition = (
            {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected[len("etag:") :]}
        )
        try:
            reply = self.fs.pipe_file(self._p(name), bytes(data), **condition)
        except Exception as exc:
            # the server refused the condition (412; 409 while another put of it runs), or
            # the request failed, or only its answer was lost: the object now says which
            if self.version(name) != expected:
                if self._holds(name, data):
                    return self.version(name)  # the put landed; its answer did not
                raise self.changed(name) from None
            raise self._fail("write", name, exc) from None
        etag = reply.get("ETag") if isinstance(reply, dict) else None
        if isinstance(etag, str) and etag:
            return "etag:" + etag.strip('"')
        return self.version(name)  # (a reply without the ETag: ask for it)

    def _holds(self, name: str, data: bytes) -> bool:
        """Whether the file ``name`` holds exactly ``data``."""
        try:
            return self.read_bounded(name, "the file", len(data)) == data
        except SourceError:
            return False
        except FormatError:  # (longer than data)
            return False

    def upload(self, local_path: str, name: str) -> None:
        self._require("writes", "write", name)
        try:
            self.fs.put_file(local_path, self._p(name))
        except Exception as exc:
            raise self._fail("upload", name, exc) from None
        finally:
            try:
                os.unlink(local_path)
            except OSError:
                pass

    def move(self, src: str, dst: str) -> None:
        self._require("writes", "move", src)
        source, target = self._p(src), self._p(dst)
        try:
            self.fs.invalidate_cache(source)  # (written by another process)
            self.fs.mv(source, target)
        except Exception as exc:
            raise self._fail("move", src, exc) from None

    def list_files(self, folder: str = "") -> list[str]:
        # ("dir/": a folder marker, as S3 consoles and SeaweedFS's empty folders show)
        return sorted(
            posixpath.basename(e["name"])
            for e in self._entries(folder)
            if e.get("type") == "file" and not e["name"].endswith("/")
        )

    def _entries(self, folder: str) -> list[dict[str, Any]]:
        """The filesystem's fresh listing of ``folder`` (``[]`` when there is none)."""
        self._require("listing", "list", folder)
        path = self._p(folder, folder=True)
        try:
            self.fs.invalidate_cache(path)
            entries = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except Exception as exc:
            raise self._fail("list", folder, exc) from None
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)]

    def list_folders(self, folder: str = "") -> list[str]:
        return sorted(
            posixpath.basename(e["name"].rstrip("/"))
            for e in self._entries(folder)
            if e.get("type") == "directory"
        )

    def modified(self, name: str) -> float | None:
        info = self._file_info(name)
        return None if info is None else _timestamp(info)

    def remove(self, name: str) -> None:
        self._require("deletes", "remove", name)
        path = self._p(name)
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail("remove", name, exc) from None

    def remove_tree(self, name: str) -> None:
        self._require("deletes", "remove", name)
        path = self._p(name, folder=True)
        try:
            # the tasks that wrote there were other processes: list afresh, or a cached
            # listing from before them finds nothing to remove
            self.fs.invalidate_cache()
            self.fs.rm(path, recursive=True)
        except Exception:  # best effort: a staging folder left over hides nothing
            pass


_TIME_KEYS = ("LastModified", "mtime", "created", "last_modified", "updated")
"""Where fsspec filesystems put the times of a file's last changes (s3fs, local, memory,
adlfs, gcsfs): the latest of them counts (a local rename keeps ``mtime`` and sets the change
time, which fsspec calls ``created``)."""


def _timestamp(info: dict[str, Any]) -> float | None:
    """The time of a file's last change in an fsspec record (seconds since the epoch), or
    None when the record has none."""
    times = [t for t in map(_seconds, (info.get(k) for k in _TIME_KEYS)) if t is not None]
    return max(times, default=None)


def _seconds(when: Any) -> float | None:
    if isinstance(when, str):
        try:
            when = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:  # (fsspec's are UTC)
            when = when.replace(tzinfo=datetime.UTC)
        return float(when.timestamp())
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return float(when)
    return None


def _remake(
    cls: type[FsspecStore], root: str, options: dict[str, Any], read_only: bool
) -> FsspecStore:
    """The store (of class ``cls``: a subclass is remade as itself) a pickle holds."""
    return cls(root, options, read_only=read_only)
