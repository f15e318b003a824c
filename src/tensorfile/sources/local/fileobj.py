"""A source over a file object the caller already opened (``open(...)``, an fsspec or
object-store file, ``io.BytesIO``).

:func:`open_file_object` takes the fast road when the object has an operating-system file
behind it (``fileno()``): a :class:`~.local.LocalSource` over a duplicate descriptor, with
positional reads and a private mapping, whatever mode the object was opened in. Any other
object that can ``seek`` and ``read`` bytes is read through those calls, one at a time under
a lock, and put back where it was when the source closes. The caller keeps the object and
closes it; tensorfile never does.

Example:
    >>> import io
    >>> src = open_file_object(io.BytesIO(b"0123456789"))
    >>> src.size, src.read(2, 3)
    (10, b'234')
"""

from __future__ import annotations

import io
import threading
from typing import Any

from ...core.errors import InvalidTypeError, SourceError
from ...core.source import Source, SourceBase
from .local import LocalSource

__all__ = ["FileObjectSource", "open_file_object"]


def _name(f: Any) -> str:
    name = getattr(f, "name", None)
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name if isinstance(name, str) and name else f"<{type(f).__name__}>"


def _fileno(f: Any) -> int | None:
    """The descriptor behind ``f``, or None when it has none (or will not say)."""
    fileno = getattr(f, "fileno", None)
    if not callable(fileno):
        return None
    try:
        fd = fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    return fd if isinstance(fd, int) and not isinstance(fd, bool) and fd >= 0 else None


def open_file_object(f: Any) -> Source:
    """A source over the open file object ``f`` (see the module's docstring)."""
    if getattr(f, "closed", False) is True:
        raise SourceError(f"{_name(f)} is closed")
    fd = _fileno(f)
    if fd is not None:
        return LocalSource.from_fd(fd, _name(f))
    return FileObjectSource(f)


class FileObjectSource(SourceBase):
    """Read a seekable binary file object through ``seek`` and ``read``/``readinto``.

    The size is found by seeking to the end once; every read seeks first, so other users
    of the object between reads do no harm. A text-mode object, or one that cannot seek,
    is an :class:`~tensorfile.errors.InvalidTypeError`; a read that comes back short (the
    file shrank) or fails is a :class:`~tensorfile.errors.SourceError`.
    """

    def __init__(self, f: Any) -> None:
        super().__init__()
        self.name = _name(f)
        for method in ("seek", "read"):
            if not callable(getattr(f, method, None)):
                raise InvalidTypeError(
                    f"expected a binary file object with seek() and read(), got "
                    f"{type(f).__name__} (no {method}())"
                )
        if isinstance(f, io.TextIOBase):
            raise InvalidTypeError(f"{self.name} is open in text mode; open it with 'rb'")
        self._f = f
        self._lock = threading.Lock()
        try:
            self._home = f.tell() if callable(getattr(f, "tell", None)) else None
            self._size = int(f.seek(0, io.SEEK_END))
        except (OSError, ValueError, TypeError, io.UnsupportedOperation) as exc:
            raise SourceError(f"{self.name} cannot seek: {exc}") from exc
        if self._size < 0:
            raise SourceError(f"{self.name} reports a negative size")

    @property
    def size(self) -> int:
        """The object's size when the source was made."""
        return self._size

    def _read(self, offset: int, length: int) -> bytes:
        out = bytearray()
        with self._lock:
            try:
                self._f.seek(offset)
                while len(out) < length:
                    chunk = self._f.read(length - len(out))
                    if not isinstance(chunk, bytes | bytearray | memoryview):
                        raise InvalidTypeError(
                            f"{self.name}: read() gave {type(chunk).__name__}, not bytes; "
                            "open the file in binary mode ('rb')"
                        )
                    if not chunk:
                        raise SourceError(
                            f"{self.name}: the file ended at offset {offset + len(out)}; it "
                            "was truncated after it was opened"
                        )
                    out += memoryview(chunk)[: length - len(out)]  # never more than asked
            except (OSError, ValueError, io.UnsupportedOperation) as exc:
                if isinstance(exc, SourceError | InvalidTypeError):
                    raise
                raise SourceError(f"{self.name}: read at offset {offset} failed: {exc}") from exc
        self.stats.add(length)
        return bytes(out)

    def close(self) -> None:
        """Put the object back where it was; it stays open (it is the caller's)."""
        if self._closed:
            return
        super().close()
        if self._home is not None:
            try:
                self._f.seek(self._home)
            except (OSError, ValueError, io.UnsupportedOperation):
                pass  # closed by its owner meanwhile: nothing to put back
