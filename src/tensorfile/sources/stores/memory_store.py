"""A store of files held in memory, in this process: for tests, and for building a dataset
or a checkpoint before it is published somewhere else. Folders exist while files are in
them (as on an object store); every write replaces a file whole.

Example:
    >>> s = MemoryStore()
    >>> s.write_atomic("sub/a.bin", b"0123456789")
    >>> s.read_range("sub/a.bin", 7, 3), s.list_files("sub"), s.list_files()
    (b'789', ['a.bin'], [])
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from ...core.errors import FormatError, SourceError, SourceNotFoundError
from ...core.source import ByteRequest
from ..local.memory import MemorySource
from ..local.paths import check_name, too_big
from .store import Store

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Files as bytes in a dict, shared by the threads of one process. ``files`` seeds it
    (name -> bytes); ``read_only`` refuses every change. A pickled copy is a copy. Its
    :meth:`location` is its own (``name`` and an id made for the instance): two stores of
    the same name never share cached shards."""

    def __init__(
        self,
        files: Mapping[str, bytes] | None = None,
        *,
        name: str = "memory-store",
        read_only: bool = False,
    ) -> None:
        self.root = name
        self._location = f"memory-store:{name}:{uuid.uuid4().hex}"  # (a copy gets its own)
        self.read_only = read_only
        self.supports_writes = self.supports_deletes = not read_only
        self.conditional_writes = True
        self._lock = threading.RLock()
        self._files: dict[str, bytes] = {}
        self._writes = 0  # (a file's version: the count of writes when it was written)
        self._version: dict[str, int] = {}
        for key, data in (files or {}).items():
            self._files[check_name(key)] = bytes(data)

    def __reduce__(self) -> tuple[Any, ...]:
        with self._lock:
            files = dict(self._files)
        return (_remake, (files, self.root, self.read_only))

    def url(self, name: str = "") -> str:
        return f"<{self.root}>/{name}" if name else f"<{self.root}>"

    def location(self) -> str:
        return self._location

    def _get(self, name: str) -> bytes | None:
        check_name(name)
        with self._lock:
            data = self._files.get(name)
            folder = data is None and any(k.startswith(name + "/") for k in self._files)
        if folder:
            raise SourceError(f"{self.url(name)} is a folder, not a file")
        return data

    def make_root(self) -> None:
        self._require("writes", "create")

    def is_folder(self) -> bool:
        with self._lock:
            return bool(self._files)

    def file_size(self, name: str) -> int | None:
        data = self._get(name)
        return None if data is None else len(data)

    def open_source(self, name: str, *, first: ByteRequest | None = None) -> MemorySource:
        data = self._get(name)
        if data is None:
            raise SourceNotFoundError(f"cannot open {self.url(name)}: no such file")
        return MemorySource(data, name=self.url(name))

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        data = self._get(name)
        if data is not None and len(data) > limit:
            raise FormatError(too_big(what, self.url(name), limit))
        return data

    def _put(self, name: str, data: bytes) -> None:
        check_name(name)
        with self._lock:
            if any(k.startswith(name + "/") for k in self._files):
                raise SourceError(f"cannot write {self.url(name)}: a folder is there")
            parts = name.split("/")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in self._files:
                    raise SourceError(f"cannot write {self.url(name)}: a file is in the way")
            self._files[name] = data
            self._writes += 1
            self._version[name] = self._writes

    def _version_of(self, name: str) -> str | None:
        return f"w{self._version.get(name, 0)}" if name in self._files else None

    def version(self, name: str) -> str | None:
        check_name(name)
        with self._lock:
            return self._version_of(name)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def write_atomic(self, name: str, data: bytes) -> None:
        self._require("writes", "write", name)
        self._put(name, bytes(data))

    def upload(self, local_path: str, name: str) -> None:
        self._require("writes", "write", name)
        try:
            with open(local_path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise SourceError(f"cannot read {local_path}: {exc.strerror or exc}") from exc
        self._put(name, data)
        try:
            os.unlink(local_path)
        except OSError:
            pass

    def move(self, src: str, dst: str) -> None:
        self._require("writes", "move", src)
        data = self._get(src)
        if data is None:
            raise SourceNotFoundError(f"cannot move {self.url(src)}: no such file")
        self._put(dst, data)
        with self._lock:
            if dst != src:
                self._files.pop(src, None)

    def _below(self, folder: str) -> list[str]:
        """The names of every file under ``folder``, relative to it (listing checked)."""
        self._require("listing", "list", folder)
        check_name(folder, folder=True)
        prefix = folder + "/" if folder else ""
        with self._lock:
            keys = list(self._files)
        return [k[len(prefix) :] for k in keys if k.startswith(prefix)]

    def list_files(self, folder: str = "") -> list[str]:
        return sorted(n for n in self._below(folder) if "/" not in n)

    def list_folders(self, folder: str = "") -> list[str]:
        return sorted({n.partition("/")[0] for n in self._below(folder) if "/" in n})

    def remove(self, name: str) -> None:
        self._require("deletes", "remove", name)
        check_name(name)
        with self._lock:
            self._files.pop(name, None)

    def remove_tree(self, name: str) -> None:
        self._require("deletes", "remove", name)
        check_name(name, folder=True)
        prefix = name + "/" if name else ""
        with self._lock:
            for key in [k for k in self._files if k.startswith(prefix)]:
                del self._files[key]


def _remake(files: dict[str, bytes], name: str, read_only: bool) -> MemoryStore:
    return MemoryStore(files, name=name, read_only=read_only)
