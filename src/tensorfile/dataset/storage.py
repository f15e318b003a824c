"""Where a dataset lives: a local folder, or a folder of any fsspec filesystem.

Every file operation of :mod:`tensorfile.dataset` (and of the Spark data source) goes
through a :class:`Storage`, made once from what the user passed (:func:`storage_for`):

* :class:`LocalStorage` for a path or a ``file://`` URL: the hardened primitives of
  :mod:`.files` (no FIFO waited on, no symlink followed out of the folder, deletes through a
  descriptor of the folder) and atomic renames.
* :class:`FsspecStorage` for every other URL (``s3://``, ``gs://``, ``az://``, ``hdfs://``,
  ``memory://``, ...), with ``storage_options`` passed to fsspec and the credentials fsspec
  finds in the environment. Object stores have no atomic rename of folders, but a single
  object write is atomic: the manifest, written in one ``pipe``, is the commit point, and
  readers trust only the manifest. Shards are staged under ``_staging/`` and copied into
  place at commit (a server-side copy on S3), so a failed, retried or speculative task, or
  a failed job, never leaves a shard beside the dataset's.

Names given to a storage are relative to its root, ``/``-separated (``_staging/job/x``).
Every foreign exception becomes a :class:`~tensorfile.errors.SourceError` naming the file,
its URL redacted.

Example:
    >>> import fsspec
    >>> s = storage_for("memory://ds-doc/one")
    >>> s.write_atomic("a.json", b"{}")
    >>> s.read_bounded("a.json", "the manifest", 10), s.file_size("a.json"), s.list_files()
    (b'{}', 2, ['a.json'])
    >>> storage_for("/tmp/x").is_local, storage_for("file:///tmp/x").root
    (True, '/tmp/x')
"""

from __future__ import annotations

import os
import posixpath
import shutil
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ..core.errors import FormatError, InvalidArgumentError, SourceError, UnsupportedError
from ..core.reader import Reader
from ..core.source import Source
from . import files

__all__ = [
    "SHARD_FIRST_READ",
    "FsspecStorage",
    "LocalStorage",
    "Location",
    "Storage",
    "open_located",
    "storage_for",
]


_OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "r2"}
"""fsspec protocols of object stores: no folders, and no bucket is ever created."""


SHARD_FIRST_READ = 16 << 10
"""Bytes of the first request for a remote shard (its header, and a little data)."""


class Storage:
    """The operations a dataset needs of the place it lives in (see the module docstring).
    Picklable: a Spark job ships it to its executors."""

    root: str
    is_local: bool = False

    def url(self, name: str = "") -> str:
        """The path or URL of ``name`` (relative to the root) as messages show it."""
        raise NotImplementedError

    def make_root(self) -> None:
        """Create the root folder (where folders exist) or check that it can be one."""
        raise NotImplementedError

    def is_folder(self) -> bool:
        """Whether the root exists as a folder (on an object store: holds any object)."""
        raise NotImplementedError

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        """The bytes of the file ``name``, None when it does not exist; a file over
        ``limit`` bytes is a :class:`FormatError`, refused before it is read."""
        raise NotImplementedError

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``name``: readers see the old file or the new one, whole."""
        raise NotImplementedError

    def file_size(self, name: str) -> int | None:
        """The size of the regular file ``name``; None when nothing is there; a
        :class:`SourceError` when something that is not a file is."""
        raise NotImplementedError

    def list_files(self, folder: str = "") -> list[str]:
        """The names of the files directly in ``folder`` (relative to the root): on a local
        file system every entry that is not a folder."""
        raise NotImplementedError

    def upload(self, local_path: str, name: str) -> None:
        """Put the finished local file ``local_path`` at ``name`` (removing the local one)."""
        raise NotImplementedError

    def write_file(self, name: str, write: Callable[[str], None]) -> int:
        """Have ``write(local_path)`` write a file (atomically), then put it at ``name``;
        return its size. Locally it is written in place; elsewhere to a local temporary
        file that is uploaded and removed."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="tensorfile-upload-") as tmp:
            local = os.path.join(tmp, posixpath.basename(name))
            write(local)
            size = os.path.getsize(local)
            self.upload(local, name)
        return size

    def locate(self, name: str) -> str | Source:
        """What a reader opens for the file ``name`` (no checks: for the writer's own
        staged files)."""
        raise NotImplementedError

    def move(self, src: str, dst: str) -> None:
        """Move the file ``src`` to ``dst`` (both relative), replacing ``dst``."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Remove the file ``name`` if it is there."""
        raise NotImplementedError

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` and all below it, if it is there (best effort)."""
        raise NotImplementedError

    def check_shard(self, shard_path: str, size: int) -> None:
        """Check that the listed shard ``shard_path`` is a file of the dataset of ``size``
        bytes (a :class:`FormatError` says which shard lies), reading none of it."""
        raise NotImplementedError

    def shard(self, shard_path: str, size: int) -> str | Source:
        """What a reader opens for the listed shard ``shard_path`` (a path, or a source),
        after :meth:`check_shard`."""
        self.check_shard(shard_path, size)
        return self.locate(shard_path)

    def delete_previous(self, listed: Iterable[object], keep: Collection[str]) -> list[str]:
        """Delete, of the names the previous manifest ``listed``, those a commit may delete
        (:func:`~tensorfile.dataset.files.deletable`'s rules) and return them."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.url()


class LocalStorage(Storage):
    """A dataset folder on the local file system."""

    is_local = True

    def __init__(self, root: str) -> None:
        self.root = root

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStorage, (self.root,))

    def __fspath__(self) -> str:
        return self.root

    def path(self, name: str = "") -> str:
        """The local path of ``name``."""
        return os.path.join(self.root, *name.split("/")) if name else self.root

    def url(self, name: str = "") -> str:
        return self.path(name)

    def make_root(self) -> None:
        _makedirs(self.root, "the dataset folder")

    def make_folder(self, name: str, what: str) -> str:
        """Create the folder ``name`` (not through a symlink out of the dataset)."""
        path = self.path(name)
        _makedirs(path, what)
        if os.path.islink(path) or not os.path.isdir(path):
            raise SourceError(f"{what} {path} is not a folder of the dataset")
        return path

    def is_folder(self) -> bool:
        return os.path.isdir(self.root)

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        return files.read_bounded(self.path(name), what, limit)

    def write_atomic(self, name: str, data: bytes) -> None:
        from ..core.atomic import atomic_write, write_all

        with atomic_write(self.path(name), fsync=True) as fd:
            write_all(fd, memoryview(data))

    def file_size(self, name: str) -> int | None:
        fd = files.open_regular(self.path(name), name)
        if fd is None:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def list_files(self, folder: str = "") -> list[str]:
        try:
            entries = list(os.scandir(self.path(folder)))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SourceError(f"cannot list {self.path(folder)}: {exc.strerror or exc}") from exc
        # everything but folders: a FIFO or a symlink named like a shard is refused by name
        # when it is used, not skipped in silence
        return sorted(e.name for e in entries if not e.is_dir(follow_symlinks=False))

    def upload(self, local_path: str, name: str) -> None:
        self.move_local(local_path, self.path(name))

    def write_file(self, name: str, write: Callable[[str], None]) -> int:
        path = self.path(name)
        write(path)
        try:
            return os.path.getsize(path)
        except OSError as exc:
            raise SourceError(f"cannot stat {path}: {exc.strerror or exc}") from exc

    def locate(self, name: str) -> str:
        return self.path(name)

    @staticmethod
    def move_local(src: str, dst: str) -> None:
        try:
            os.replace(src, dst)
        except OSError as exc:
            raise SourceError(f"cannot move {src} to {dst}: {exc.strerror or exc}") from exc

    def move(self, src: str, dst: str) -> None:
        self.move_local(self.path(src), self.path(dst))

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise SourceError(f"cannot remove {self.path(name)}: {exc.strerror or exc}") from exc

    def remove_tree(self, name: str) -> None:
        shutil.rmtree(self.path(name), ignore_errors=True)

    def check_shard(self, shard_path: str, size: int) -> None:
        files.check_shard_file(self.root, shard_path, size)

    def shard(self, shard_path: str, size: int) -> str:
        return files.check_shard_file(self.root, shard_path, size)

    def delete_previous(self, listed: Iterable[object], keep: Collection[str]) -> list[str]:
        return files.delete_previous(self.root, listed, keep)


class FsspecStorage(Storage):
    """A dataset folder on an fsspec filesystem (the URL's; ``storage_options`` for it)."""

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = root.rstrip("/")
        self.options = dict(storage_options or {})
        self._fs: Any = None
        self._base = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (FsspecStorage, (self.root, self.options))

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (made on first use, in each process)."""
        if self._fs is None:
            try:
                import fsspec
            except ImportError:
                raise UnsupportedError(
                    f"{self.url()}: datasets at URLs need fsspec: pip install 'tensorfile[remote]'"
                ) from None
            try:
                self._fs, self._base = fsspec.core.url_to_fs(self.root, **self.options)
            except ImportError as exc:
                raise UnsupportedError(
                    f"{self.url()}: the filesystem's package is missing: {self._say(exc)}"
                ) from None
            except TypeError as exc:
                raise InvalidArgumentError(
                    f"{self.url()}: bad storage options: {self._say(exc)}"
                ) from None
            except Exception as exc:
                raise SourceError(f"cannot use {self.url()}: {self._say(exc)}") from None
            self._base = self._base.rstrip("/")
        return self._fs

    def _p(self, name: str) -> str:
        """The filesystem path of ``name``."""
        if self._fs is None:
            self._fs = self.fs  # (sets _base too)
        return posixpath.join(self._base, name) if name else self._base

    def url(self, name: str = "") -> str:
        from ..sources._urls import redact

        return redact(f"{self.root}/{name}" if name else self.root)

    def _say(self, exc: BaseException) -> str:
        from ..sources._urls import scrub

        return f"{type(exc).__name__}: {scrub(str(exc), self.root) or '(no details)'}"

    def _fail(self, doing: str, name: str, exc: BaseException) -> SourceError:
        return SourceError(f"cannot {doing} {self.url(name)}: {self._say(exc)}")

    def _info(self, name: str) -> dict[str, Any] | None:
        try:
            # other processes (a job's tasks) write here too: never a cached listing
            self.fs.invalidate_cache(self._p(name))
            info = self.fs.info(self._p(name))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail("stat", name, exc) from None
        return info if isinstance(info, dict) else None

    def make_root(self) -> None:
        protocols = self.fs.protocol
        protocols = {protocols} if isinstance(protocols, str) else set(protocols)
        if protocols & _OBJECT_STORES:
            # no folders to make; and s3fs's makedirs would create a missing bucket, which a
            # dataset write must not do behind the user's back (the first upload fails)
            return
        try:
            self.fs.makedirs(self._p(""), exist_ok=True)
        except FileExistsError:
            pass
        except Exception as exc:
            raise self._fail("create", "", exc) from None
        info = self._info("")
        if info is not None and info.get("type") == "file":
            raise SourceError(f"cannot create the dataset folder {self.url()}: a file is there")

    def is_folder(self) -> bool:
        try:
            return bool(self.fs.isdir(self._p("")))
        except Exception as exc:
            raise self._fail("stat", "", exc) from None

    def file_size(self, name: str) -> int | None:
        info = self._info(name)
        if info is None:
            return None
        if info.get("type") != "file":
            raise SourceError(f"{self.url(name)} is not a file")
        size = info.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise SourceError(f"{self.url(name)}: the filesystem gives no usable size")
        return size

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        size = self.file_size(name)
        if size is None:
            return None
        if size > limit:
            raise FormatError(
                f"{what} {self.url(name)} is over {limit} bytes; it is not a dataset's {what}"
            )
        try:
            data = self.fs.cat_file(self._p(name), start=0, end=limit + 1)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail("read", name, exc) from None
        if not isinstance(data, bytes):
            raise SourceError(f"cannot read {self.url(name)}: the filesystem gave no bytes")
        if len(data) > limit:
            raise FormatError(
                f"{what} {self.url(name)} is over {limit} bytes; it is not a dataset's {what}"
            )
        return data

    def write_atomic(self, name: str, data: bytes) -> None:
        # one object written in one request: an object store shows it whole or not at all
        try:
            self.fs.pipe_file(self._p(name), data)
        except Exception as exc:
            raise self._fail("write", name, exc) from None

    def list_files(self, folder: str = "") -> list[str]:
        try:
            self.fs.invalidate_cache(self._p(folder))
            entries = self.fs.ls(self._p(folder), detail=True)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._fail("list", folder, exc) from None
        out = []
        for e in entries:
            if isinstance(e, dict) and e.get("type") == "file" and isinstance(e.get("name"), str):
                out.append(posixpath.basename(e["name"].rstrip("/")))
        return sorted(out)

    def upload(self, local_path: str, name: str) -> None:
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
        try:
            self.fs.invalidate_cache(self._p(src))  # (written by another process)
            self.fs.mv(self._p(src), self._p(dst))
        except Exception as exc:
            raise self._fail("move", src, exc) from None

    def remove(self, name: str) -> None:
        try:
            self.fs.rm_file(self._p(name))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail("remove", name, exc) from None

    def remove_tree(self, name: str) -> None:
        try:
            # the tasks that wrote there were other processes: list afresh, or a cached
            # listing from before them finds nothing to remove
            self.fs.invalidate_cache()
            self.fs.rm(self._p(name), recursive=True)
        except Exception:  # best effort: a staging folder left over hides nothing
            pass

    def locate(self, name: str) -> Source:
        from ..formats import SAFETENSORS
        from ..sources.fsspec_source import FsspecSource

        # a shard's header is a few KiB: the first request reads that much, so a read of
        # some columns fetches little more than their bytes (a longer header costs one more
        # request)
        first = SAFETENSORS.first_request(SHARD_FIRST_READ)
        return FsspecSource(f"{self.root}/{name}", first=first, **self.options)

    def check_shard(self, shard_path: str, size: int) -> None:
        if not files.is_plain_name(shard_path):
            raise FormatError(
                f"{self.url()}: shard {shard_path!r} is not a file name inside the dataset folder"
            )
        got = self.file_size(shard_path)
        if got is None:
            raise FormatError(f"{self.url()}: the manifest lists {shard_path}, which is missing")
        if got != size:
            raise FormatError(
                f"{self.url()}: the manifest says shard {shard_path} has {size} bytes, the "
                f"file has {got}"
            )

    def delete_previous(self, listed: Iterable[object], keep: Collection[str]) -> list[str]:
        present = set(self.list_files())
        removed = []
        for name in files.deletable_names(listed, keep):
            if name in present:
                try:
                    self.remove(name)
                except SourceError:
                    continue  # the new dataset is committed; an unlisted shard is ignored
                removed.append(name)
        return removed


def open_located(where: str | Source) -> Reader:
    """A safetensors reader of a local path or a source (what :meth:`Storage.shard` and
    :meth:`Storage.locate` give)."""
    from ..formats import SAFETENSORS, open_reader

    if isinstance(where, str):
        return open_reader(where, format="safetensors")
    return SAFETENSORS.impl().open_reader(where)


Location = str | os.PathLike[str] | Storage
"""Where a dataset is: a local path, a URL, or a :class:`Storage`."""


def storage_for(
    location: str | os.PathLike[str] | Storage, storage_options: Mapping[str, Any] | None = None
) -> Storage:
    """The :class:`Storage` of a dataset location: a local path, a ``file://`` URL, or any
    other fsspec URL (with ``storage_options``).

    Example:
        >>> storage_for("s3://bucket/ds", {"anon": True}).url("x.json")
        's3://bucket/ds/x.json'
    """
    if isinstance(location, Storage):
        if storage_options:
            raise InvalidArgumentError("storage_options go with a path or URL, not a Storage")
        return location
    try:
        text = os.fspath(location)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(
            f"a dataset location is a path or URL, got {type(location).__name__}"
        )
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a mapping, got {type(storage_options).__name__}"
        )
    scheme, sep, _ = text.partition("://")
    if not sep or os.path.exists(text):  # (a local name may hold "://")
        # absolute from here on: a Spark job ships the storage to executors whose working
        # directories are not the driver's
        return LocalStorage(os.path.abspath(text))
    if scheme == "file" or scheme == "local":
        if storage_options:
            raise InvalidArgumentError("storage_options apply to remote URLs, not file://")
        path = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
        if not path:
            raise InvalidArgumentError(f"{text}: a file:// URL needs a path")
        return LocalStorage(os.path.abspath(path))
    if not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        raise InvalidArgumentError(f"{text!r} is not a path or a URL")
    return FsspecStorage(text, storage_options)


def _makedirs(path: str, what: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot create {what} {path}: {exc.strerror or exc}") from exc
