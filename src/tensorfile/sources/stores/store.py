"""One store under everything: a folder of files that hands out byte ranges and, where it
can, writes, lists and deletes (zarr-python v3's ``Store`` is the model).

A :class:`Store` says what it can do with capability flags, and an operation it lacks is an
:class:`~tensorfile.errors.UnsupportedError`, never a silent no-op:

* ``supports_ranges``: :meth:`Store.open_source` gives a
  :class:`~tensorfile.core.source.Source` of a file (the formats read through it).
* ``supports_writes``: :meth:`Store.write_atomic`, :meth:`Store.write_file`,
  :meth:`Store.upload`, :meth:`Store.move`.
* ``supports_listing``: :meth:`Store.list_files`, :meth:`Store.list_folders`.
* ``supports_deletes``: :meth:`Store.remove`, :meth:`Store.remove_tree`.
* ``atomic_publish``: a write is seen whole or not at all (an atomic rename on a local
  file system; a single put on an object store).
* ``conditional_writes``: :meth:`Store.write_if` publishes a file only if it is still the
  version the writer read, atomically against every other writer (a lock of the folder
  around the rename on a local file system, S3's ``If-Match``/``If-None-Match`` put, a
  lock in the process for ``memory://``). Where it is False, :meth:`Store.write_if`
  compares and then writes, and a writer that slips between the two is not seen.

What a consumer may ask instead of testing a store's class (the dataset layer never does):

* :meth:`Store.local_path`: the local path of a file or folder, for the file-system rules a
  local folder has (links, FIFOs, folders in the way); None where the files are not local.
* :meth:`Store.open_url` and :attr:`Store.options`: the URL (and storage options) the URL
  router opens a file at with its own clients (:func:`~tensorfile.sources.open_path`: the
  native S3 client, the HTTP transport); None where the store's files have no such URL.
* :meth:`Store.make_folder` and :meth:`Store.remove_empty_folder`: folders where they are
  real (a local file system); an object store, whose folders are name prefixes, has none to
  make or leave empty.

The stores: :class:`~.local_store.LocalStore` (a local folder, with the path rules of
:mod:`..local.paths`), :class:`~.memory_store.MemoryStore` (files in a dict) and
:class:`~.fsspec_store.FsspecStore` (any fsspec filesystem: ``s3://``, ``gs://``,
``memory://``, ...). :func:`~..router.store_for` picks one through the URL router. Names
are relative to the store's root, ``/``-separated (``_staging/job/x``), and checked by
:func:`~..local.paths.check_name`: nothing escapes the root.
Every foreign exception becomes a :class:`~tensorfile.errors.SourceError` naming the file,
its URL redacted. Stores are picklable (a Spark job ships them to its executors).

Example:
    >>> from tensorfile.sources import store_for
    >>> s = store_for("memory://store-doc/one")
    >>> s.write_atomic("a.json", b"{}")
    >>> s.read_bounded("a.json", "the file", 10), s.file_size("a.json"), s.list_files()
    (b'{}', 2, ['a.json'])
    >>> store_for("/tmp/x").is_local, store_for("file:///tmp/x").root
    (True, '/tmp/x')
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ...core.errors import ConcurrentWriteError, SourceError, UnsupportedError
from ...core.source import ByteRequest, Source
from ..local.paths import check_name

__all__ = ["Store"]


class Store:
    """A folder of files (see the module docstring). Subclasses implement the ``_``-less
    operations their flags promise; the base class refuses the rest."""

    supports_ranges: ClassVar[bool] = True
    supports_writes: bool = True
    supports_listing: bool = True
    supports_deletes: bool = True
    atomic_publish: bool = True
    conditional_writes: bool = False
    is_local: ClassVar[bool] = False
    root: str
    read_only: bool = False
    options: Mapping[str, Any] = MappingProxyType({})
    """The storage options the store was made with (an fsspec store's; empty for others)."""

    # -- what every store has -----------------------------------------------------------------

    def url(self, name: str = "") -> str:
        """The path or URL of ``name`` (relative to the root) as messages show it."""
        raise NotImplementedError

    def location(self) -> str | None:
        """The root as the store's client reads it, unredacted: unlike :meth:`url` it keeps
        what names the files there (for ``s3://`` or ``memory://``, a ``?`` or ``#`` is part
        of an object's name). It may hold credentials: never shown, only passed through
        :func:`~tensorfile.sources.cache.keys.identity` for a cache key. It must name these
        files and no others: two stores with the same location share cached shards. None
        (the default: a store that does not say): the shard cache is not used for its
        datasets (a :class:`~tensorfile.sources.CacheWarning` says so), never keyed by
        :meth:`url`, which two stores may share."""
        return None

    def __str__(self) -> str:
        return self.url()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url()}>"

    def _require(self, flag: str, doing: str, name: str = "") -> None:
        """Refuse an operation the store's ``flag`` says it lacks."""
        if not getattr(self, f"supports_{flag}"):
            why = "it is read-only" if self.read_only else f"it does not support {flag}"
            raise UnsupportedError(f"cannot {doing} {self.url(name)}: {why}")

    def make_root(self) -> None:
        """Create the root folder (where folders exist) or check that it can be one."""
        self._require("writes", "create")

    def is_folder(self) -> bool:
        """Whether the root exists as a folder (on an object store: holds any object)."""
        raise NotImplementedError

    def file_size(self, name: str) -> int | None:
        """The size of the regular file ``name``; None when nothing is there; a
        :class:`SourceError` when something that is not a file is."""
        raise NotImplementedError

    def local_path(self, name: str = "") -> str | None:
        """The local path of ``name`` (checked: it cannot leave the root), for the rules of a
        local file system; None where the store's files are not local files."""
        return None

    def open_url(self, name: str) -> str | None:
        """The URL at which :func:`~tensorfile.sources.open_path` (with :attr:`options`) opens
        the file ``name`` through tensorfile's own clients; None where there is none (a
        local folder: see :meth:`local_path`; files in memory). The router refuses options
        only the store's own client takes (an :class:`~tensorfile.errors.InvalidArgumentError`):
        then :meth:`open_source` is the way."""
        return None

    # -- reading ------------------------------------------------------------------------------

    def open_source(self, name: str, *, first: ByteRequest | None = None) -> Source:
        """A :class:`~tensorfile.core.source.Source` over the file ``name`` (``first``: the
        first request of a remote one; the caller's format decides)."""
        raise NotImplementedError

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes of ``name`` at ``offset`` (past the end: a
        :class:`SourceError`)."""
        src = self.open_source(name)
        try:
            return src.read(offset, length)
        finally:
            src.close()

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        """The bytes of the file ``name``, None when it does not exist; a file over
        ``limit`` bytes is a :class:`~tensorfile.errors.FormatError`, refused before it is
        read."""
        raise NotImplementedError

    def locate(self, name: str, *, first: ByteRequest | None = None) -> str | Source:
        """What a reader opens for the file ``name``: a local path, or a source (no checks:
        for a writer's own files)."""
        return self.open_source(name, first=first)

    # -- writing ------------------------------------------------------------------------------

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``name``: readers see the old file or the new one, whole (where
        ``atomic_publish``)."""
        self._require("writes", "write", name)
        raise NotImplementedError

    def upload(self, local_path: str, name: str) -> None:
        """Put the finished local file ``local_path`` at ``name`` (removing the local one)."""
        self._require("writes", "write", name)
        raise NotImplementedError

    def write_file(self, name: str, write: Callable[[str], None]) -> int:
        """Have ``write(local_path)`` write a file, then publish it at ``name``; return its
        size. ``write`` writes atomically (a temporary file renamed into place, as every
        tensorfile writer does): a local store hands it the final path, the others a local
        temporary one they upload. A failure of ``write`` leaves what was at ``name``."""
        import tempfile

        self._require("writes", "write", check_name(name))
        with tempfile.TemporaryDirectory(prefix="tensorfile-upload-") as tmp:
            local = os.path.join(tmp, posixpath.basename(name))
            write(local)
            try:
                size = os.path.getsize(local)
            except OSError as exc:
                raise SourceError(f"cannot stat {local}: {exc.strerror or exc}") from exc
            self.upload(local, name)
        return size

    def version(self, name: str) -> str | None:
        """An opaque token of the file ``name`` as it is now (None when there is none): it
        changes whenever the file is written. :meth:`write_if` compares it."""
        raise NotImplementedError

    def write_if(self, name: str, data: bytes, expected: str | None) -> str | None:
        """Write ``data`` as ``name`` (as :meth:`write_atomic` does) only if the file is
        still at the :meth:`version` ``expected`` (None: only if there is no such file);
        otherwise a :class:`~tensorfile.errors.ConcurrentWriteError` and nothing written.
        Returns the version written (None where the store cannot tell it). Atomic against
        other writers where ``conditional_writes``: the compare and the write hold
        :meth:`locked`."""
        self._require("writes", "write", name)
        with self.locked():
            self.check_version(name, expected)
            self.write_atomic(name, data)
            return self.version(name)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """While the block runs, other writers' :meth:`write_if` and :meth:`while_at` of this
        store wait (a lock of the folder locally, of the process for in-memory stores); a
        store with no such lock (an object store) holds none."""
        yield

    @contextlib.contextmanager
    def while_at(self, name: str, version: str | None) -> Iterator[None]:
        """Run the block only while ``name`` stays at ``version`` (under :meth:`locked`):
        a :class:`~tensorfile.errors.ConcurrentWriteError` before it when another writer
        has changed it. For files that follow another (a dataset's index follows its
        manifest): written or removed only while that one is still theirs."""
        with self.locked():
            self.check_version(name, version)
            yield

    def check_version(self, name: str, expected: str | None) -> None:
        """A :class:`~tensorfile.errors.ConcurrentWriteError` unless ``name`` is at the
        version ``expected``."""
        if self.version(name) != expected:
            raise self.changed(name)

    def changed(self, name: str) -> ConcurrentWriteError:
        """The error of a file that another writer changed since it was read."""
        return ConcurrentWriteError(
            f"{self.url(name)} was changed by another writer since this one read it; "
            "nothing was written over it",
            changed=name,
        )

    def make_folder(self, name: str, what: str) -> str | None:
        """Create the folder ``name`` where folders are real, refusing one that is not a
        folder of the store (``what`` names it in the message); returns its local path. A
        store whose folders are name prefixes (an object store, memory) makes nothing:
        None."""
        self._require("writes", "create", check_name(name, folder=True))
        return None

    def remove_empty_folder(self, name: str) -> bool:
        """Remove the folder ``name`` if nothing is in it; whether it is gone (False:
        something is in it, and it stays). On a store whose folders are name prefixes a
        folder goes with its last file: nothing to remove, and gone unless a file is listed
        in it."""
        self._require("deletes", "remove", name)
        return not self.supports_listing or not self.list_files(name)

    def move(self, src: str, dst: str) -> None:
        """Move the file ``src`` to ``dst`` (both relative), replacing ``dst``."""
        self._require("writes", "move", src)
        raise NotImplementedError

    # -- listing and deleting -----------------------------------------------------------------

    def list_files(self, folder: str = "") -> list[str]:
        """The names of the files directly in ``folder`` (relative to the root), sorted:
        every entry that is not a folder; ``[]`` when there is no such folder."""
        self._require("listing", "list", folder)
        raise NotImplementedError

    def list_folders(self, folder: str = "") -> list[str]:
        """The names of the folders directly in ``folder`` (relative to the root), sorted;
        never a symlink to one. On an object store, the name prefixes with objects under
        them."""
        self._require("listing", "list", folder)
        raise NotImplementedError

    def modified(self, name: str) -> float | None:
        """When the file ``name`` last changed, in content or in place (seconds since the
        epoch): a local file's later of its modification and change times (a rename sets the
        latter), an object's last-modified time (a copy sets it). None when the store cannot
        tell, or nothing is there; a :class:`SourceError` when something that is not a
        regular file is (a local symlink too)."""
        return None

    def remove(self, name: str) -> None:
        """Remove the file ``name`` if it is there."""
        self._require("deletes", "remove", name)
        raise NotImplementedError

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` and all below it, if it is there (best effort)."""
        self._require("deletes", "remove", name)
        raise NotImplementedError
