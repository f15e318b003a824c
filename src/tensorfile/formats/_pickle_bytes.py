"""A PyTorch pickle's bytes as ``torch.load`` reads them: the scan reads what torch runs.

The scan (:mod:`._pickle_claims`) is worth something only if torch then runs the very bytes
it read. So:

* :func:`pinned`: the bytes are read once. A local file is read through the descriptor
  tensorfile opened, and :func:`load` gives torch that descriptor (``/proc/self/fd/N``: the
  same file even if its name has since been given to another), never the name, mapped
  (``mmap=True``: the tensors stay in the page cache) where torch can map it. Any other
  source (HTTP, S3, a cache) is read once, whole, into an anonymous file in memory
  (``memfd``; an unlinked temporary file where the system has none), which the scan and
  torch both read: a server answering the scan's reads with one ``data.pkl`` and torch's
  with another is never asked twice.
* :func:`zip_records`: a zip's records are found by torch's own zip reader
  (``torch._C.PyTorchFileReader``, the one ``torch.load`` uses), never by another parser
  that could find another central directory (a zip64 locator leading elsewhere, a gap read
  as prepended data) and so another ``data.pkl``. Every record must lie within the file,
  stored, none overlapping another and no two named alike (torch finds names in any case):
  the records' sizes then add up to no more than the file.
* :func:`torch_rules`: how torch's weights-only unpickler names globals and which it loads.

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.zeros(4)}, buf)
    >>> with pinned(MemorySource(buf.getvalue(), "m.pt")) as held:
    ...     pickle, sizes = zip_records(held)
    ...     sizes["data/0"], load(torch, held)["w"].tolist()
    (16, [0.0, 0.0, 0.0, 0.0])
"""

from __future__ import annotations

import importlib
import mmap
import os
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from ..core.errors import FormatError, SourceError, quoted_name
from ..core.source import Source
from ..sources import LocalSource, MemorySource
from ._arrays import BufferedSourceFile

__all__ = [
    "STRICT",
    "Rules",
    "claimed",
    "dtype_size",
    "empty_again",
    "fold",
    "itemsize",
    "load",
    "pinned",
    "torch_rules",
    "zip_records",
]

_FD_DIR = "/proc/self/fd"  # (where a descriptor can be opened again as the same file)
_PIECE = 64 << 20  # bytes a copy reads at a time


@contextmanager
def pinned(source: Source) -> Iterator[LocalSource | MemorySource]:
    """``source`` itself where what it reads cannot change under it by name or by server
    (a local file, through its descriptor; bytes in memory); else a copy of its bytes read
    once, in an anonymous file, closed on exit (what torch mapped of it stays)."""
    if isinstance(source, LocalSource | MemorySource):
        yield source
        return
    fd = _anonymous()
    try:
        try:
            os.ftruncate(fd, source.size)
            if source.size:
                with mmap.mmap(fd, source.size) as whole, memoryview(whole) as view:
                    for at in range(0, source.size, _PIECE):  # (a piece in memory at most)
                        with view[at : at + _PIECE] as piece:
                            source.readinto(at, [piece])
        except OSError as exc:
            raise SourceError(
                f"{quoted_name(source.name)}: cannot keep the {source.size:,} bytes of the "
                f"pickle to scan and load them: {exc.strerror or exc}"
            ) from exc
        copy = LocalSource.from_fd(fd, source.name)
    finally:
        os.close(fd)
    with copy:
        yield copy


def _anonymous() -> int:
    """A new file no other process can open by name: in memory where the system can."""
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create("tensorfile-pickle", os.MFD_CLOEXEC)
        except OSError:
            pass
    fd, path = tempfile.mkstemp(prefix="tensorfile-pickle-")
    os.unlink(path)
    return fd


def load(torch: Any, source: LocalSource | MemorySource) -> Any:
    """``torch.load(weights_only=True)`` of the bytes of ``source`` (from :func:`pinned`):
    a local file through its descriptor, mapped where torch can map it (a zip), else read
    through the source."""
    if isinstance(source, LocalSource) and os.path.isdir(_FD_DIR):
        path = f"{_FD_DIR}/{source.fileno()}"  # (the file read, whatever its name is now)
        try:
            return torch.load(path, weights_only=True, map_location="cpu", mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):  # an old (not zip) pickle cannot be mapped
                raise
    with BufferedSourceFile(source) as f:  # (a string's claimed length is no allocation)
        return torch.load(f, weights_only=True, map_location="cpu")


class Rules(NamedTuple):
    """How torch's unpickler names a global: ``rename`` maps a ``GLOBAL``'s module and name
    as torch does (``__builtin__`` is ``builtins``) to ``module.name``; ``allows`` says
    whether torch loads it (a global torch refuses ends the scan: torch stops there)."""

    rename: Callable[[str, str], str]
    allows: Callable[[str], bool]


def _plain_rename(module: str, name: str) -> str:
    return f"{'builtins' if module == '__builtin__' else module}.{name}"


STRICT = Rules(_plain_rename, lambda name: True)
"""Rules that let no global end the scan (every call is judged here)."""


def torch_rules(torch: Any) -> Rules:
    """How ``torch``'s weights-only unpickler names globals and which it loads (its own
    tables); without them (another torch): :data:`STRICT`."""
    try:
        _utils, wo = torch._utils, torch._weights_only_unpickler
        allowed = set(wo._get_allowed_globals()) | set(wo._get_user_allowed_globals())
        blocked = set(wo._blocklisted_modules)
        imports, names = dict(_utils.IMPORT_MAPPING), dict(_utils.NAME_MAPPING)
    except (ImportError, AttributeError, TypeError):
        return STRICT

    def rename(module: str, name: str) -> str:
        if (module, name) in names:
            module, name = names[module, name]
        elif module in imports:
            module = imports[module]
        return f"{module}.{name}"

    return Rules(rename, lambda name: name in allowed and name.rpartition(".")[0] not in blocked)


_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """``name`` as torch's zip reader (miniz) compares names: ASCII letters in any case.

    Example:
        >>> fold("Archive/DATA.pkl")
        'archive/data.pkl'
    """
    return name.translate(_FOLD)


def _refuse(where: str, what: str) -> FormatError:
    return FormatError(f"{quoted_name(where)}: {what}", format="pytorch")


def zip_records(source: Source) -> tuple[bytes, dict[str, int]]:
    """The ``data.pkl`` torch would run from the zip in ``source`` (torch's own reader
    finds it) and the size of every record, by folded name within the archive
    (``data/0``); a :class:`FormatError` for a zip torch cannot read, or with a record
    outside the file, compressed or encrypted, overlapping another, or named like another."""
    torch: Any = importlib.import_module("torch")
    where = source.name
    with BufferedSourceFile(source) as f:
        try:
            reader = torch._C.PyTorchFileReader(f)
            spans = sorted(
                (reader.get_record_offset(name), reader.get_record_size(name), name)
                for name in reader.get_all_records()
            )
            headers = {name: reader.get_record_header_offset(name) for _, _, name in spans}
        except (RuntimeError, ValueError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise _refuse(where, f"not a zip torch.load reads: {first}") from None
        sizes: dict[str, int] = {}
        end = 0
        for start, size, name in spans:
            if fold(name) in sizes:
                raise _refuse(where, f"two records are named {name!r} (torch reads one of them)")
            if start < end or start + size > source.size:
                raise _refuse(
                    where,
                    f"record {name!r} ({size:,} bytes at offset {start:,}) overlaps another "
                    "or goes past the end of the file; torch.save writes each record once, "
                    "stored, one after another",
                )
            head = source.read(headers[name], 30) if headers[name] + 30 <= source.size else b""
            flags, method = struct.unpack("<HH", head[6:10]) if len(head) == 30 else (1, 0)
            if method != 0 or flags & 1:
                raise _refuse(
                    where,
                    f"record {name!r} is compressed or encrypted; torch.save stores every "
                    "record as it is",
                )
            sizes[fold(name)] = size
            end = start + size
        if "data.pkl" not in sizes:
            raise _refuse(where, "no data.pkl in the archive")
        try:
            pickle: bytes = reader.get_record("data.pkl")  # (at most the file's size)
        except RuntimeError as exc:
            raise _refuse(where, f"data.pkl cannot be read: {exc}") from None
    return pickle, sizes


_SIZES = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
          "Char": 1, "Byte": 1, "Bool": 1, "ComplexDouble": 16, "ComplexFloat": 8, "QUInt8": 1,
          "QInt8": 1, "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1, "Untyped": 1}  # fmt: skip
"""Bytes per element of torch's storage and legacy tensor classes by their stem
(``FloatStorage``, ``torch.FloatTensor``: ``Float``); any other class: 16, the most."""
_LARGEST = 16


def itemsize(name: str) -> int:
    """The element size of a storage or legacy tensor class named ``name``
    (``torch.FloatStorage``: 4); 16, the largest, for one not known."""
    module, _, stem = name.rpartition(".")
    if not module.startswith("torch"):
        return _LARGEST
    for suffix in ("Storage", "Tensor"):
        if stem.endswith(suffix) and stem[: -len(suffix)] in _SIZES:
            return _SIZES[stem[: -len(suffix)]]
    return _LARGEST


def dtype_size(name: str) -> int:
    """The element size of the torch dtype named ``name`` (``torch.float32``: 4); 0 unknown."""
    torch = sys.modules.get("torch")
    module, _, attr = name.rpartition(".")
    dtype = getattr(torch, attr, None) if module == "torch" and torch is not None else None
    return int(dtype.itemsize) if torch is not None and isinstance(dtype, torch.dtype) else 0


def claimed(pids: list[tuple[str, int]]) -> dict[str, int]:
    """The bytes each storage key of ``pids`` ``(key, bytes)`` claims (torch allocates a
    key once: the largest)."""
    owned: dict[str, int] = {}
    for key, nbytes in pids:
        owned[key] = max(owned.get(key, 0), nbytes)
    return owned


def empty_again(pids: list[tuple[str, int]]) -> str | None:
    """The first storage key of ``pids`` ``(key, bytes)`` named again after its first
    persistent id claimed no bytes (torch's old-format loader gives each later one a new
    storage, never filled from the file); None if there is none."""
    first: dict[str, int] = {}
    for key, nbytes in pids:
        if key in first and first[key] == 0:
            return key
        first.setdefault(key, nbytes)
    return None
