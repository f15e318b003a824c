"""numpy's ``.npy`` and ``.npz`` as registry entries (``npy``, ``npz``): read and written.

Reading never unpickles (``allow_pickle=False``: an object array is refused) and never
allocates what a header only claims:

* an ``.npy`` holds one tensor, named after the file (``embed.npy``: ``embed``; bytes in
  memory: ``tensor``); a header that claims more data than the file holds is refused;
* an ``.npz`` is a zip archive of ``.npy`` members, one tensor each, named after the member
  without ``.npy``; every member's header is read (not its data) when the archive is opened,
  and a member whose header claims more bytes than the member can hold (its stated size,
  and for a compressed member no more than its compressed bytes can expand to) is refused
  before anything is allocated; a member that is not an ``.npy`` is refused by name, and
  so are two members that share bytes of the archive (nested in each other, they would
  make a file hold many times its size);
* little-endian C-ordered data of a stored (uncompressed, ``np.savez``) member or of an
  ``.npy`` is read in place: :meth:`~tensorfile.core.reader.Reader.view` maps it; a stored
  member's CRC-32 is checked once reads have covered the member whole, in whatever pieces
  and order (a whole tensor read in parallel pieces, the content id's chunks, ``verify``,
  ``convert``), and by a view before it is returned; a slice that reads part of a member
  checks nothing (as a safetensors file without digests); a mismatch is a
  :class:`~tensorfile.errors.NpzChecksumError` (a ``FormatError`` and a
  ``ChecksumError``) naming the member, and every later read of the member fails the same;
* deflated members (``np.savez_compressed``), big-endian and Fortran-ordered arrays are
  decoded when first read, into little-endian C order, as every tensor format stores them
  (``zipfile`` checks a deflated member's CRC-32: a mismatch is an ``NpzChecksumError``
  too). A member is inflated chunk by chunk into memory that grows with the bytes really
  inflated, before the tensor's destination is allocated: a size its headers only claim is
  never allocated, and a member that inflates to more or fewer bytes than its zip header
  states is refused by name.

Writing (:meth:`tensorfile.formats.Format.save`): an ``.npz`` member by member, not
compressed (as ``np.savez``); an ``.npy`` of exactly one tensor. Both atomic (a temporary
file renamed into place). Types an ``.npy`` cannot hold without pickle (bfloat16, the fp8
family) are refused before anything is written.

Example:
    >>> import numpy as np, os, tempfile, tensorfile
    >>> d = tempfile.mkdtemp()
    >>> np.savez(os.path.join(d, "a.npz"), w=np.arange(4, dtype=">i2"), b=np.ones(2))
    >>> with tensorfile.open(os.path.join(d, "a.npz")) as f:
    ...     f.format, f.keys(), f.get_tensor("w").tolist(), f.info("w").dtype.name
    ('npz', ['w', 'b'], [0, 1, 2, 3], 'I16')
"""

from __future__ import annotations

import copy
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..core import dtypes
from ..core.atomic import AtomicFile
from ..core.catalog import ByteRange, Catalog, Component, TensorInfo, first_overlap
from ..core.errors import (
    FormatError,
    InvalidArgumentError,
    NpzChecksumError,
    SourceError,
    UnsupportedError,
)
from ..core.source import Source
from . import NPY, NPZ, GetTensor, TensorSpec
from ._arrays import ArraysReader, ArraysSource, Segment, SourceFile, file_stem
from ._zipcrc import CrcCheck

__all__ = ["NPY_ENTRY", "NPZ_ENTRY", "NpyEntry", "NpzEntry", "little"]

_MAX_HEADER = 1 << 16  # numpy's own limit on an .npy header
_MEMBER = NPY.suffixes[0]  # an .npz member: "<tensor name>.npy"
_LOCAL_HEADER = 30  # a zip local file header's fixed part
_HEADER_ERRORS = (
    ValueError,
    OSError,
    EOFError,
    SyntaxError,
    TypeError,
    zipfile.BadZipFile,
    zlib.error,
)


class _Array(NamedTuple):
    """An array's header: shape, dtype, whether it is Fortran-ordered, where data starts."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran: bool
    data_at: int


def little(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` C-ordered and little-endian, as every tensor format stores it.

    Example:
        >>> little(np.arange(3, dtype=">u2")).dtype.str
        '<u2'
    """
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return _c_order(arr)


def _c_order(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` C-contiguous, keeping a 0-d array 0-d (``np.ascontiguousarray`` does not)."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


_MAX_DIM = (1 << 48) - 1  # the largest dimension any tensor format here allows
_MAX_DIMS = 64  # numpy's own limit on dimensions


def _header(f: Any) -> _Array:
    """The ``.npy`` header at the position of the file object ``f``."""
    major, _minor = np.lib.format.read_magic(f)
    read = (
        np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read(f, max_header_size=_MAX_HEADER)
    dims = tuple(int(d) for d in shape)
    if len(dims) > _MAX_DIMS:
        raise ValueError(f"the shape has {len(dims)} dimensions; at most {_MAX_DIMS}")
    bad = next((d for d in dims if not 0 <= d <= _MAX_DIM), None)
    if bad is not None:  # numpy's own reader takes -1 or 2**70 here
        raise ValueError(f"the shape {dims} has a dimension ({bad}) outside 0..{_MAX_DIM:,}")
    return _Array(dims, dtype, bool(fortran), int(f.tell()))


def _dtype(dtype: np.dtype[Any], where: str, name: str) -> dtypes.DType:
    """The tensorfile dtype of an array's numpy dtype (any byte order)."""
    try:
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise KeyError(dtype.str)
        return dtypes.from_numpy(dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype)
    except (KeyError, TypeError, ValueError, UnsupportedError):
        raise UnsupportedError(
            f"{where}: array {name!r} has dtype {dtype}, which no tensor format holds"
        ) from None


def _claimed(arr: _Array) -> int:
    return int(np.prod(arr.shape, dtype=object)) * arr.dtype.itemsize


def _in_place(arr: _Array) -> bool:
    """Whether the stored bytes are already little-endian C order."""
    c_order = not arr.fortran or sum(d > 1 for d in arr.shape) <= 1
    return c_order and arr.dtype.byteorder != ">"


def _decoder(
    raw: Callable[[], bytes | bytearray], arr: _Array
) -> Callable[[], np.ndarray[Any, Any]]:
    """A fetch that reads the stored bytes and returns them little-endian, C-ordered."""

    def fetch() -> np.ndarray[Any, Any]:
        data = np.frombuffer(raw(), arr.dtype, count=int(np.prod(arr.shape, dtype=np.int64)))
        return little(data.reshape(arr.shape, order="F" if arr.fortran else "C"))

    return fetch


def _info(name: str, dt: dtypes.DType, arr: _Array, start: int) -> TensorInfo:
    rng = ByteRange(start, start + _claimed(arr))
    return TensorInfo(name, dt, arr.shape, {"data": Component(rng, dt)})


class NpyEntry:
    """The ``npy`` registry entry (see the module docstring)."""

    def _open(self, source: Source) -> tuple[Catalog, list[Segment]]:
        try:
            arr = _header(SourceFile(source))
        except _HEADER_ERRORS as exc:
            raise FormatError(f"{source.name}: not a valid .npy: {exc}", format="npy") from exc
        name = file_stem(source.name)
        dt = _dtype(arr.dtype, source.name, name)
        holds = source.size - arr.data_at
        if _claimed(arr) > holds:
            raise FormatError(
                f"{source.name}: the header claims {_claimed(arr):,} bytes of data but the file "
                f"holds {holds:,}",
                format="npy",
            )
        segments = []
        start = arr.data_at
        if not _in_place(arr):
            start = source.size
            at, length = arr.data_at, _claimed(arr)
            raw = _decoder(lambda: source.read(at, length), arr)
            segments.append(Segment(start, length, raw))
        info = _info(name, dt, arr, start)
        return Catalog("npy", {}, {name: info}, arr.data_at, arr.data_at), segments

    def read_catalog(self, source: Source) -> Catalog:
        """The catalog of the ``.npy`` in ``source``: one tensor."""
        return self._open(source)[0]

    def open_reader(self, source: Source, *, verify: bool | None = None) -> ArraysReader:
        """A reader over the ``.npy`` in ``source``."""
        catalog, segments = self._open(source)
        return ArraysReader(ArraysSource(source.name, source, segments), catalog)

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``.npy`` output takes no options."""
        return _no_options("npy", options)

    def save(
        self,
        path: str,
        tensors: Sequence[TensorSpec],
        get: GetTensor,
        metadata: Mapping[str, Any],
        *,
        tick: Callable[[str], None] | None = None,
    ) -> list[str]:
        """Write the one tensor of ``tensors`` as an ``.npy`` (metadata is not kept)."""
        if len(tensors) != 1:
            raise InvalidArgumentError(
                f"an .npy holds exactly one array; {len(tensors):,} tensors were given (write "
                "an .npz)"
            )
        _check_dtypes(tensors)
        spec = tensors[0]
        with _atomic(path) as f:
            np.lib.format.write_array(f, _array(spec, get), allow_pickle=False)
            if tick is not None:
                tick(spec.name)
        return [path]


class _Member(NamedTuple):
    info: zipfile.ZipInfo
    arr: _Array


class NpzEntry:
    """The ``npz`` registry entry (see the module docstring)."""

    def _members(self, zf: zipfile.ZipFile, where: str) -> list[_Member]:
        _refuse_overlaps(zf.infolist(), where)
        out = []
        for info in zf.infolist():
            if not info.filename.endswith(_MEMBER):
                raise UnsupportedError(f"{where}: member {info.filename} is not an .npy array")
            try:
                with zf.open(info) as f:
                    arr = _header(f)
            except (*_HEADER_ERRORS, NotImplementedError, RuntimeError) as exc:
                what = f"{where}: member {info.filename}"
                raise _zip_error(what, exc, f"{what} is not a valid .npy: {exc}") from exc
            holds = max(0, _member_bound(info) - arr.data_at)
            if _claimed(arr) > holds:
                raise FormatError(
                    f"{where}: member {info.filename} claims {_claimed(arr):,} bytes of data "
                    f"but holds {holds:,}",
                    format="npz",
                )
            out.append(_Member(info, arr))
        return out

    def _open(self, source: Source) -> tuple[Catalog, list[Segment], list[CrcCheck]]:
        where = source.name
        try:
            zf = zipfile.ZipFile(SourceFile(source))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            raise FormatError(
                f"{where}: not a valid .npz (zip) archive: {exc}", format="npz"
            ) from exc
        members = self._members(zf, where)
        tensors: dict[str, TensorInfo] = {}
        segments: list[Segment] = []
        checks: list[CrcCheck] = []
        end = source.size
        for m in members:
            name = m.info.filename[: -len(_MEMBER)]
            if name in tensors:
                raise FormatError(f"{where}: two members are named {m.info.filename}", format="npz")
            dt = _dtype(m.arr.dtype, where, name)
            start = _stored_data(source, m) if _in_place(m.arr) else None
            if start is None:
                segments.append(Segment(end, _claimed(m.arr), _member_decoder(zf, m, where)))
                start, end = end, end + _claimed(m.arr)
            else:
                stop = start + _claimed(m.arr)
                prefix = zlib.crc32(source.read(start - m.arr.data_at, m.arr.data_at))
                checks.append(
                    CrcCheck(start, stop, prefix, m.info.CRC, f"member {m.info.filename}")
                )
            tensors[name] = _info(name, dt, m.arr, start)
        catalog = Catalog("npz", {}, tensors, 0, 0, extra={"members": len(members)})
        return catalog, segments, checks

    def read_catalog(self, source: Source) -> Catalog:
        """The catalog of the ``.npz`` in ``source``: one tensor per member."""
        return self._open(source)[0]

    def open_reader(self, source: Source, *, verify: bool | None = None) -> ArraysReader:
        """A reader over the ``.npz`` in ``source``."""
        catalog, segments, checks = self._open(source)
        arrays = ArraysSource(source.name, source, segments, checks)
        return ArraysReader(arrays, catalog, zip_crcs=True)

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``.npz`` output takes no options."""
        return _no_options("npz", options)

    def save(
        self,
        path: str,
        tensors: Sequence[TensorSpec],
        get: GetTensor,
        metadata: Mapping[str, Any],
        *,
        tick: Callable[[str], None] | None = None,
    ) -> list[str]:
        """Write ``tensors`` as an ``.npz``, member by member (metadata is not kept)."""
        _check_dtypes(tensors)
        with _atomic(path) as f, zipfile.ZipFile(f, "w") as zf:
            for spec in tensors:
                with zf.open(spec.name + _MEMBER, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, _array(spec, get), allow_pickle=False)
                if tick is not None:
                    tick(spec.name)
        return [path]


def _refuse_overlaps(infos: list[zipfile.ZipInfo], where: str) -> None:
    """Refuse two members that share bytes of the archive (each member's local header,
    name and stored bytes, at least): members nested inside each other, each a valid
    ``.npy`` whose data is the rest of the archive, would make a file hold many times its
    size (no writer makes such an archive)."""
    # (a name's characters are no more than its bytes, and the extra field is left out:
    # no member is taken to end past where it does)
    ends = (i.header_offset + _LOCAL_HEADER + len(i.orig_filename) + i.compress_size for i in infos)
    spans = ((i.header_offset, end, i) for i, end in zip(infos, ends, strict=True))
    found = first_overlap(spans)
    if found is not None:
        (s0, e0, a), (s1, _e1, b) = found
        raise FormatError(
            f"{where}: members {a.filename} (bytes {s0:,} to {e0:,}) and {b.filename} (from "
            f"byte {s1:,}) overlap; each member of an archive must be its own bytes",
            format="npz",
        )


def _member_bound(info: zipfile.ZipInfo) -> int:
    """The most bytes a zip member can yield: its stated size, and no more than its method
    can expand its stored bytes to where that bound is known and tight: stored bytes as
    they are, deflate at most ~1032 times. bzip2 and LZMA expand far more (a bzip2 block
    of 45 MB of one byte packs into a few dozen bytes) and have no such bound worth using:
    only the stated size, which the streaming decoder (:func:`_member_decoder`) holds the
    member to while memory grows with the bytes really inflated, so no claim is ever an
    allocation."""
    if info.compress_type == zipfile.ZIP_STORED:
        return min(info.file_size, info.compress_size)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return min(info.file_size, info.compress_size * 1100 + (1 << 16))
    return info.file_size


def _stored_data(source: Source, m: _Member) -> int | None:
    """Where a stored member's array data starts in the file, or None when it must be
    decoded (compressed, encrypted, or with bytes after the array)."""
    info = m.info
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
        return None
    if info.file_size != m.arr.data_at + _claimed(m.arr):
        return None
    head = source.read(info.header_offset, min(_LOCAL_HEADER, source.size - info.header_offset))
    if len(head) < _LOCAL_HEADER or not head.startswith(NPZ.magic):
        return None
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    start = int(info.header_offset + _LOCAL_HEADER + name_len + extra_len)
    if start + info.file_size > source.size:
        return None
    return start + m.arr.data_at


_CHUNK = 1 << 20  # a compressed member is inflated this many bytes at a time


def _member_decoder(
    zf: zipfile.ZipFile, m: _Member, where: str
) -> Callable[[], np.ndarray[Any, Any]]:
    """A fetch that inflates member ``m`` chunk by chunk (``zipfile`` checks its CRC-32)
    and returns its array little-endian, C order. Memory grows with the bytes really
    inflated, never with a size the member's headers claim; a member that inflates to more
    or fewer bytes than its zip header states is a :class:`FormatError` naming it."""
    first, stop = m.arr.data_at, m.arr.data_at + _claimed(m.arr)
    stated = m.info.file_size
    probe = copy.copy(m.info)
    probe.file_size = stated + _CHUNK  # zipfile stops at the stated size: let more show

    def raw() -> bytearray:
        what = f"{where}: member {m.info.filename}"
        data = bytearray()
        pos = 0
        try:
            with zf.open(probe) as f:
                while chunk := f.read(_CHUNK):
                    data += memoryview(chunk)[max(0, first - pos) : max(0, stop - pos)]
                    pos += len(chunk)
                    if pos > stated:
                        raise FormatError(
                            f"{what} inflates to more than the {stated:,} bytes its zip header "
                            "states",
                            format="npz",
                        )
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error) as exc:
            raise _zip_error(what, exc, f"{what}: {exc}") from exc
        if pos != stated:
            raise FormatError(
                f"{what} inflates to {pos:,} bytes, not the {stated:,} its zip header states "
                f"({len(data):,} of its {stop - first:,} bytes of array data)",
                format="npz",
            )
        return data

    return _decoder(raw, m.arr)


def _zip_error(what: str, exc: BaseException, message: str) -> FormatError:
    """``zipfile``'s ``exc`` about member ``what`` as tensorfile's error: ``message``, or
    for a CRC-32 mismatch (a small member's is checked as its header is read) an
    :class:`~tensorfile.errors.NpzChecksumError` saying so."""
    if str(exc).startswith("Bad CRC-32"):  # zipfile's words for a changed member
        return NpzChecksumError(f"{what}: {exc}", format="npz")
    return FormatError(message, format="npz")


def _no_options(fmt: str, options: Mapping[str, Any]) -> dict[str, Any]:
    for key in options:
        raise InvalidArgumentError(f"{key.replace('_', '-')} does not apply to {fmt} output")
    return {}


def _check_dtypes(tensors: Sequence[TensorSpec]) -> None:
    """Refuse, before anything is written, a type an ``.npy`` cannot hold without pickle."""
    for spec in tensors:
        dt = spec.dtype.numpy
        if dt.kind == "V" or dt.type.__module__.startswith("ml_dtypes") or spec.dtype.is_subbyte:
            raise UnsupportedError(
                f"tensor {spec.name!r} is {spec.dtype.name}, "
                "which .npz/.npy cannot hold without pickle"
            )


def _array(spec: TensorSpec, get: GetTensor) -> np.ndarray[Any, Any]:
    value = get(spec.name)
    if not isinstance(value, np.ndarray):
        raise UnsupportedError(f"tensor {spec.name!r} ({spec.layout}) is not a dense array")
    return _c_order(value)


class _atomic:
    """A binary file object at a temporary name renamed to ``path`` on success."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> Any:
        self._out = AtomicFile(self._path)
        try:
            self._file = os.fdopen(os.dup(self._out.fd), "wb")
        except BaseException:
            self._out.abort()
            raise
        return self._file

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            self._file.close()
        except OSError as failed:
            if exc is None:
                exc = failed
        if exc is None:
            self._out.commit()
            return
        self._out.abort()
        if isinstance(exc, OSError):
            raise SourceError(f"cannot write {self._path}: {exc}") from exc


NPY_ENTRY = NpyEntry()
NPZ_ENTRY = NpzEntry()
