"""Sharded checkpoints as one reader.

:func:`open_checkpoint` reads a sharded safetensors checkpoint: its
``*.safetensors.index.json`` (a path, an ``http(s)://`` URL or an fsspec URL) or a local
folder holding one; ``tensorfile.open`` (:mod:`tensorfile.formats.open`) opens one through
it. The :class:`ShardedReader` has the reader surface (``keys()``, ``metadata``, ``info``,
``view``, ``get_tensor``, ``read_slice``, ``get_tensors``), opens each shard on first use and
only once, and checks that a shard holds the tensors the index places in it.

A :class:`ShardedReader` is a :class:`~tensorfile.core.reader.Reader`: ``catalog`` is the
checkpoint's whole catalog (every shard's header read, each tensor's ``file`` its shard) and
``metadata`` the index's ``metadata`` merged with what every shard's metadata agrees on (see
:func:`tensorfile.formats.catalogs.checkpoint_metadata`); both read the headers of the shards
not opened yet on first use (concurrently), and a remote checkpoint keeps those shards open,
so each shard's header is fetched once whichever is asked first, the tensors or the metadata.
The index is held to the operations' rules: at most 64 MiB, a ``weight_map`` of text to text,
shards named by plain relative names in the index's folder (no ``..``, no absolute paths or
URLs); a remote index's shards are fetched from next to it.

Example:
    >>> import numpy as np, os, tempfile, tensorfile
    >>> from tensorfile.safetensors.numpy import save_sharded
    >>> d = tempfile.mkdtemp()
    >>> _ = save_sharded({"a": np.zeros(300, np.float32), "b": np.ones(300, np.float32)}, d,
    ...                  max_shard_size="1KB")
    >>> with tensorfile.open(d) as ck:
    ...     ck.keys(), ck.get_tensor("b").sum(), ck.opened
    (['a', 'b'], np.float32(300.0), ['model-00002-of-00002.safetensors'])
    >>> with tensorfile.open(d) as ck:
    ...     isinstance(ck, tensorfile.Reader), dict(ck.metadata), ck.total_size
    (True, {}, 2400)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..core.catalog import Catalog, TensorInfo
from ..core.digests import Verify
from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    InvalidTypeError,
    SafetensorError,
    TensorFileError,
    TensorNotFoundError,
    UnsupportedError,
)
from ..core.parallel import in_threads
from ..core.plan import Pending
from ..core.reader import Allocator, NDArray, Reader, names_list, numpy_allocator
from ..core.source import Source
from . import open_reader

if TYPE_CHECKING:  # catalogs (the index reader) loads when a checkpoint is opened
    from .catalogs import CheckpointIndex

__all__ = ["ShardedReader", "open_checkpoint"]

T = TypeVar("T")


class ShardedReader(Reader):
    """A sharded checkpoint read as one file (see the module docstring)."""

    def __init__(self, ck: CheckpointIndex, *, verify: Verify = None) -> None:
        # no Reader.__init__: a checkpoint has no one source
        self._ck = ck
        self._verify = verify
        self.index = ck.shown
        self.total_size: int | None = ck.total_size
        self._readers: dict[str, Reader] = {}
        self._opening: dict[str, threading.Lock] = {}  # one per shard: opened once, in parallel
        self._lock = threading.Lock()
        self._closed = False
        self._catalog: Catalog | None = None

    # -- the checkpoint as a whole ---------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        """The whole checkpoint's catalog (reads the headers of the shards not opened yet on
        first use; a remote checkpoint keeps them open, so each header is fetched once)."""
        if self._catalog is None:
            from .catalogs import checkpoint_catalog

            self._catalog = checkpoint_catalog(self._ck, read=self._shard_catalogs)
        return self._catalog

    @catalog.setter
    def catalog(self, value: Catalog) -> NoReturn:
        raise AttributeError("a ShardedReader's catalog is read from its shards")

    def _shard_catalogs(self, files: list[str]) -> list[Catalog]:
        """The catalogs of the shard ``files`` (paths or URLs), each read once: an open
        shard's from its reader; a remote shard not open yet is opened (its header is the
        first request of its reads to come), on up to 8 threads; a local one's header is
        read without keeping the file open (it costs no request)."""
        from .catalogs import file_catalog, reader_catalog

        shard_of = {where: shard for shard, where in self._ck.where.items()}
        out: dict[str, Catalog] = {}

        def one(path: str) -> None:
            shard = shard_of[path]
            with self._lock:
                reader = self._readers.get(shard)
            if reader is None and self._ck.local:
                out[path] = file_catalog(path, local=True)
            else:
                out[path] = reader_catalog(self._open_shard(shard), path)

        in_threads(max(1, min(8, len(files))), files, one)
        return [out[f] for f in files]

    @property
    def source(self) -> Source:
        """A checkpoint has no one source: each shard's reader has its own."""
        raise UnsupportedError(
            f"{self.index}: a sharded checkpoint has one source per shard; read through the "
            "checkpoint (get_tensor, read_into...) or open a shard"
        )

    @source.setter
    def source(self, value: Source) -> NoReturn:
        raise AttributeError("a ShardedReader's sources are its shards'")

    @property
    def format(self) -> str:
        """``safetensors``: the format of the shards."""
        return "safetensors"

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The index's metadata and what every shard's metadata agrees on."""
        return self.catalog.metadata

    # -- the shards ------------------------------------------------------------------------

    @property
    def shards(self) -> list[str]:
        """The shard files the index names, each once, in order of first mention."""
        return self._ck.shards

    @property
    def opened(self) -> list[str]:
        """The shards opened so far."""
        return list(self._readers)

    def _reader(self, name: str) -> Reader:
        if self._closed:
            raise InvalidArgumentError(f"{self.index}: the checkpoint is closed")
        if not isinstance(name, str):
            raise InvalidTypeError(f"a tensor name is a string, got {type(name).__name__}")
        shard = self._ck.weight_map.get(name)
        if shard is None:
            raise TensorNotFoundError(f"{self.index}: no tensor named {name!r}")
        reader = self._open_shard(shard)
        if name not in reader.catalog.tensors:
            raise FormatError(
                f"{self.index}: the index places tensor {name!r} in {shard}, which does not hold it"
            )
        return reader

    def _open_shard(self, shard: str) -> Reader:
        """The reader of ``shard``, opened on first use and only once (threads opening other
        shards meanwhile do not wait)."""
        with self._lock:
            reader = self._readers.get(shard)
            if reader is not None:
                return reader
            opening = self._opening.setdefault(shard, threading.Lock())
        with opening:
            with self._lock:
                if self._closed:
                    raise InvalidArgumentError(f"{self.index}: the checkpoint is closed")
                reader = self._readers.get(shard)
            if reader is not None:
                return reader
            try:
                reader = open_reader(
                    self._ck.where[shard],
                    format="safetensors",
                    allow_full_download=self._ck.allow_full_download,
                    verify=self._verify,
                )
            except TensorFileError as exc:  # the shard's error, its attributes kept
                _in_checkpoint(exc, self.index, shard)
                raise
            except OSError as exc:
                raise SafetensorError(f"{self.index}: shard {shard}: {exc}") from exc
            with self._lock:
                closed = self._closed
                if not closed:
                    self._readers[shard] = reader
            if closed:
                reader.close()
                raise InvalidArgumentError(f"{self.index}: the checkpoint is closed")
            return reader

    # -- the reader surface ----------------------------------------------------------------

    def keys(self) -> list[str]:
        """The tensor names of the index, sorted (as a safetensors file lists them)."""
        return sorted(self._ck.weight_map)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._ck.weight_map
        except TypeError:  # unhashable
            return False

    def __len__(self) -> int:
        return len(self._ck.weight_map)

    def info(self, name: str) -> TensorInfo:
        """The tensor's :class:`TensorInfo` (its byte ranges are in its shard)."""
        return self._reader(name).info(name)

    def checks_digest(self, name: str) -> bool:
        """Whether reading ``name`` compares a digest its shard records."""
        return self._reader(name).checks_digest(name)

    def stored_digest(self, name: str, algorithm: str) -> str | None:
        """The digest ``algorithm`` of ``name``'s data bytes its shard stores."""
        return self._reader(name).stored_digest(name, algorithm)

    def reader_of(self, name: str) -> Reader:
        """The reader of the shard holding ``name`` (opened on first use): where its bytes
        are, for a consumer that reads them itself (the torch device stream)."""
        return self._reader(name)

    def shard_of(self, name: str) -> str:
        """The shard file the index places ``name`` in."""
        if name not in self._ck.weight_map:
            raise TensorNotFoundError(f"{self.index}: no tensor named {name!r}")
        return self._ck.weight_map[name]

    def view(self, name: str) -> NDArray:
        """A zero-copy, read-only view of the tensor (see ``Reader.view``)."""
        return self._reader(name).view(name)

    def get_tensor(self, name: str) -> NDArray:
        """An owned copy of the tensor."""
        return self._reader(name).get_tensor(name)

    def read_slice(self, name: str, key: Any) -> NDArray:
        """Part of the tensor, reading only the bytes it needs."""
        return self._reader(name).read_slice(name, key)

    def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, NDArray]:
        """Owned copies of ``names`` (default: every tensor), shard by shard."""
        wanted = self.keys() if names is None else names_list(names)
        got = self.read_into(wanted, numpy_allocator)
        return dict(zip(wanted, got, strict=True))

    def start_read(self, names: list[str], alloc: Allocator[T]) -> Pending[T]:
        """The reads of ``names`` from every shard they are in, as one plan: the pieces of
        all shards run in one pool (parallel across shards, not shard by shard), then each
        shard checks and finishes its own tensors."""
        by_shard: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            self._reader(name)  # unknown names and misplaced tensors fail before any read
            by_shard.setdefault(self._ck.weight_map[name], []).append(i)
        parts = [
            (where, self._readers[shard].start_read([names[i] for i in where], alloc))
            for shard, where in by_shard.items()
        ]

        def finish() -> list[T]:
            out: list[Any] = [None] * len(names)
            for where, pending in parts:
                for i, value in zip(where, pending.finish(), strict=True):
                    out[i] = value
            return out

        return Pending([p for _, pending in parts for p in pending.pieces], finish)

    def close(self) -> None:
        """Close every opened shard."""
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
            self._closed = True
        for reader in readers:
            reader.close()

    def __repr__(self) -> str:
        n = len(self._ck.weight_map)
        return f"ShardedReader({self.index!r}, {n} tensors, {len(self.shards)} shards)"


def _in_checkpoint(exc: TensorFileError, index: str, shard: str) -> None:
    """Say in ``exc``'s message that the file it names is ``shard`` of the checkpoint
    ``index`` (``exc.path`` stays the shard's path).

    Example:
        >>> exc = SafetensorError("ck/a.safetensors: header too short")
        >>> exc.path = "ck/a.safetensors"
        >>> _in_checkpoint(exc, "ck/model.safetensors.index.json", "a.safetensors")
        >>> str(exc), exc.path
        ('ck/model.safetensors.index.json: shard a.safetensors: header too short', \
'ck/a.safetensors')
    """
    message = exc.args[0] if exc.args else ""
    if not isinstance(message, str):
        return
    if exc.path is not None and message.startswith(f"{exc.path}: "):
        message = message[len(exc.path) + 2 :]
    exc.args = (f"{index}: shard {shard}: {message}", *exc.args[1:])


def open_checkpoint(
    target: str, *, allow_full_download: bool | None = None, verify: Verify = None
) -> ShardedReader:
    """A :class:`ShardedReader` over the checkpoint ``target`` (an index path or URL, or a
    local folder holding one)."""
    from .catalogs import locate_checkpoint

    ck = locate_checkpoint(target, allow_full_download=allow_full_download)
    return ShardedReader(ck, verify=verify)
