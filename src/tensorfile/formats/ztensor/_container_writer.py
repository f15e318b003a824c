"""What both zTensor writers share: an atomic temporary file appended to at aligned offsets.

:class:`ContainerWriter` owns the temporary file (:class:`~tensorfile.core.atomic.AtomicFile`)
and the write position. It appends bytes (preallocating large ones), moves to the next
aligned offset (writing the padding, or leaving a hole that reads as zeros), writes a
compressed component from a background thread while the caller compresses the next one
(:meth:`~ContainerWriter._write_behind`), streams a tensor given chunk by chunk, and runs every
step under :meth:`~ContainerWriter._guard`: any failure discards the temporary file (the
destination is left as it was) and an ``OSError`` becomes a :class:`ZTensorIOError`.
:meth:`~ContainerWriter.close` appends what the subclass's ``_tail`` returns (the manifest and
footer) and renames the file into place. The v1.0 and v2 writers add the manifest specifics.

Example:
    >>> import os, tempfile
    >>> class Raw(ContainerWriter):
    ...     def _tail(self) -> bytes:
    ...         return b"END"
    >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> with Raw(path, magic=b"MAGIC") as w:
    ...     w._guard(lambda: w._write(memoryview(b"abc")))
    >>> open(path, "rb").read()
    b'MAGICabcEND'
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Self

import numpy as np

from tensorfile.core.atomic import AtomicFile, preallocate, write_all
from tensorfile.core.catalog import ByteRange
from tensorfile.core.chunks import check_chunk
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import (
    InvalidArgumentError,
    SourceError,
    TensorFileError,
    ZTensorIOError,
)
from tensorfile.core.reader import brief, bytes_view
from tensorfile.formats.ztensor._inputs import checksum_of, compression_of, level_of

__all__ = ["UNSET", "ContainerWriter", "chunk_views", "path_of"]

UNSET: Any = object()
"""The default of a per-tensor option: the writer's own setting."""

_RESERVE = 1 << 20
"""Bytes from which a write preallocates its extent first."""


def path_of(path: Any) -> str:
    """``path`` as text, or an InvalidArgumentError naming what it is.

    Example:
        >>> path_of(b"a.zt")
        'a.zt'
    """
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError:
        raise InvalidArgumentError(
            f"path must be a str or os.PathLike, got {type(path).__name__}"
        ) from None


class ContainerWriter(ABC):
    """An atomic temporary file that grows by appends; subclasses give the manifest."""

    VERSION = 1
    """The zTensor version written (which compression and digest names are valid)."""

    def __init__(self, path: Any, *, magic: bytes, fsync: bool = False) -> None:
        self.path = path_of(path)
        self._entries: dict[str, Any] = {}
        self._open(magic, fsync)

    def _set_options(self, compression: Any, level: Any, checksum: Any) -> None:
        """Check and keep the writer's default compression, zstd level and digest."""
        self._compression = compression_of(compression, self.VERSION)
        self._level = level_of(level)
        self._checksum = checksum_of(checksum, self.VERSION)

    def _options(
        self, compression: Any, level: Any, checksum: Any
    ) -> tuple[str | None, int, str | None]:
        """One tensor's options: each the writer's own unless given (checked)."""
        return (
            self._compression
            if compression is UNSET
            else compression_of(compression, self.VERSION),
            self._level if level is UNSET else level_of(level),
            self._checksum if checksum is UNSET else checksum_of(checksum, self.VERSION),
        )

    def _open(self, magic: bytes, fsync: bool) -> None:
        """Create the temporary file and write ``magic`` (once the options are checked)."""
        try:
            self._file = AtomicFile(self.path, fsync=fsync)
        except SourceError as exc:
            raise ZTensorIOError(str(exc)) from exc
        except (ValueError, UnicodeError) as exc:  # a NUL byte, a name the OS cannot encode
            raise InvalidArgumentError(f"cannot write {brief(self.path)}: {exc}") from None
        self._fd = self._file.fd
        self._pos = 0
        self._pool: Any = None  # the background writer of compressed components
        self._pending: Any = None
        self._done = False
        self._guard(lambda: self._write(memoryview(magic)))

    # -- what subclasses give --------------------------------------------------------------

    @abstractmethod
    def _tail(self) -> bytes:
        """The bytes that end the file (manifest, footer), at the current position."""

    def _name_rule(self, name: Any) -> None:
        """Raise InvalidArgumentError unless ``name`` is a valid tensor name (a hook: every
        name passes unless the subclass says otherwise)."""
        return None

    def _release(self) -> None:
        """Close what the subclass holds besides the file (a hook: nothing by default)."""
        return None

    # -- appending -------------------------------------------------------------------------

    def _check_name(self, name: Any) -> None:
        if self._done:
            raise InvalidArgumentError(f"the writer for {self.path} is closed")
        self._name_rule(name)
        if name in self._entries:
            raise InvalidArgumentError(f"tensor {name!r} was already added")

    def _write(self, view: memoryview, *, reserve: bool = False) -> None:
        if reserve and view.nbytes >= _RESERVE:
            preallocate(self._fd, view.nbytes, self._pos)
        write_all(self._fd, view, self._pos)
        self._pos += view.nbytes

    def _start_at(self, alignment: int, *, fill: bool) -> int:
        """Move to the next multiple of ``alignment`` and return it: the gap is written as
        zeros (``fill``) or left as a hole, which reads as zeros."""
        pad = -self._pos % alignment
        if pad and fill:
            self._guard(lambda: self._write(memoryview(bytes(pad))))
        else:
            self._pos += pad
        return self._pos

    def _write_behind(self, view: memoryview) -> None:
        """Write ``view`` at the current end from a background thread (``pwrite`` and zstd
        both release the GIL, so writing one component overlaps compressing the next)."""
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tensorfile-zt-write")
        fd, pos = self._fd, self._pos

        def job() -> None:
            if view.nbytes >= _RESERVE:
                preallocate(fd, view.nbytes, pos)
            write_all(fd, view, pos)

        self._pending = self._pool.submit(job)
        self._pos += view.nbytes

    def _drain(self) -> None:
        """Wait for the background write (its error, if any, is raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _stop_pool(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.exception()  # wait; an error is moot once the file is discarded
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _guard(self, action: Any) -> Any:
        """Run ``action``; on failure discard the file and raise a tensorfile error."""
        try:
            return action()
        except TensorFileError:
            self.abort()
            raise
        except OSError as exc:
            self.abort()
            raise ZTensorIOError(f"writing {self.path} failed: {exc.strerror or exc}") from exc
        except BaseException:
            self.abort()
            raise

    def _stream(
        self,
        name: str,
        start: int,
        total: int,
        views: Iterator[memoryview],
        *,
        pack: Callable[[memoryview], Iterable[Any]] | None = None,
        flush: Callable[[], Iterable[Any]] | None = None,
        decoded: Any = None,
        stored: Any = None,
    ) -> ByteRange:
        """Append a tensor whose ``total`` bytes arrive as ``views``, from ``start``: each
        piece through ``pack`` (then ``flush``) when it is encoded; ``decoded`` and
        ``stored`` digest the bytes before and after encoding. Too many or too few bytes,
        or a chunk refused, discard the file."""
        if pack is None:
            self._guard(lambda: preallocate(self._fd, total, start))

        def emit(pieces: Iterable[Any]) -> None:
            for piece in pieces:
                if stored is not None:
                    stored.update(piece)
                self._write(memoryview(piece))

        seen = 0
        while True:
            try:
                view = next(views)
            except StopIteration:
                break
            except BaseException:  # a chunk refused: nothing is left half written
                self.abort()
                raise
            seen += view.nbytes
            if seen > total:
                self.abort()
                raise InvalidArgumentError(
                    f"tensor {name!r}: the chunks hold more than the {total:,} bytes its "
                    "shape and dtype need; no file was written"
                )
            if decoded is not None:
                decoded.update(view)
            self._guard(lambda v=view: emit((v,) if pack is None else pack(v)))
        if seen != total:
            self.abort()
            raise InvalidArgumentError(
                f"tensor {name!r}: the chunks hold {seen:,} bytes, its shape and dtype need "
                f"{total:,}; no file was written"
            )
        if flush is not None:
            self._guard(lambda: emit(flush()))
        return ByteRange(start, self._pos)

    # -- finishing -------------------------------------------------------------------------

    def close(self) -> None:
        """Append the manifest and footer, and move the file into place."""
        if self._done:
            return
        self._guard(self._drain)
        self._stop_pool()
        tail = self._tail()
        self._guard(lambda: self._write(memoryview(tail)))
        self._done = True
        self._release()
        try:
            self._file.commit()
        except SourceError as exc:
            raise ZTensorIOError(str(exc)) from exc

    def abort(self) -> None:
        """Discard everything written; the destination is left as it was."""
        if self._done:
            return
        self._done = True
        self._stop_pool()
        self._release()
        self._file.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.abort()
        else:
            self.close()


def chunk_views(
    name: str, dt: DType, shape: Sequence[int], chunks: Iterable[Any], *, rows: bool = True
) -> Iterator[memoryview]:
    """The bytes of each chunk, after checking an array chunk's dtype (and, with ``rows``,
    its shape: :func:`~tensorfile.core.chunks.check_chunk`). A TypeError at once when
    ``chunks`` is not iterable.

    Example:
        >>> from tensorfile.core import dtypes
        >>> f32 = dtypes.from_name("float32")
        >>> [v.nbytes for v in chunk_views("w", f32, (2, 2), [np.ones((1, 2), "f4")] * 2)]
        [8, 8]
    """
    found = iter(chunks)

    def views() -> Iterator[memoryview]:
        done = 0
        for index, chunk in enumerate(found):
            view = _chunk_view(name, dt, shape, chunk, index, done * 8 // dt.bits, rows)
            done += view.nbytes
            yield view

    return views()


def _chunk_view(
    name: str, dt: DType, shape: Sequence[int], chunk: Any, index: int, done: int, rows: bool
) -> memoryview:
    if isinstance(chunk, np.ndarray | np.generic):
        arr = np.asarray(chunk)
        if arr.dtype != dt.numpy and arr.dtype.newbyteorder("<") != dt.numpy:
            raise InvalidArgumentError(
                f"tensor {name!r} is {dt.numpy_name}; chunk {index} is an array of {arr.dtype}"
            )
        if rows:
            check_chunk(name, shape, arr.shape, index=index, done=done)
        return bytes_view(np.ascontiguousarray(arr, dtype=dt.numpy))
    try:
        return memoryview(chunk).cast("B")
    except TypeError as exc:  # not a buffer, or a strided one
        raise InvalidArgumentError(
            f"tensor {name!r}: chunk {index} must be an array or a contiguous byte buffer, "
            f"got {type(chunk).__name__}: {exc}"
        ) from None
