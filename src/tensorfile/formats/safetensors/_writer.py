"""Write safetensors files: byte-identical to the reference, atomic, and streamable.

Tensors are ordered as the reference orders them (dtype enumeration descending, then name),
the header is padded with spaces to a multiple of 8 (or to ``align``), metadata keys are
sorted. Arrays are written by value: strided, transposed, Fortran-ordered and big-endian
arrays are converted, never written as their raw memory.

Example:
    >>> import numpy as np
    >>> blob = to_bytes({"b": prepare_array("b", np.zeros(2, np.int8)),
    ...                  "a": prepare_array("a", np.ones(1, np.float32))}, None)
    >>> blob[8:blob.index(b"}}") + 2]
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[2],"data_offsets":[4,6]}}'
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from tensorfile.core import dtypes, slicing
from tensorfile.core.atomic import AtomicFile, atomic_write, preallocate, write_all
from tensorfile.core.chunks import check_chunk
from tensorfile.core.digests import METADATA_KEY, Digest, digest_of, placeholder
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SafetensorError,
    SafetensorIOError,
    SourceError,
    UnknownDtypeError,
)
from tensorfile.core.reader import bytes_view
from tensorfile.formats.safetensors._encode import (
    check_align,
    check_name,
    check_shape,
    encode_header,
)

__all__ = [
    "Prepared",
    "StreamWriter",
    "check_size",
    "order",
    "prepare_array",
    "to_bytes",
    "write_file",
]

_MAX_STREAM_BITS = (1 << 64) * 8


@dataclass(frozen=True, slots=True)
class Prepared:
    """A tensor ready to be written: its dtype, logical shape and stored bytes."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data: memoryview

    @property
    def nbytes(self) -> int:
        """Stored size in bytes."""
        return self.data.nbytes

    def __post_init__(self) -> None:
        check_name(self.name)
        shape = check_size(self.name, self.dtype, self.shape, self.data.nbytes)
        if shape != self.shape or type(self.shape) is not tuple:
            object.__setattr__(self, "shape", shape)


def check_size(name: str, dtype: DType, shape: object, nbytes: int) -> tuple[int, ...]:
    """Check that ``shape`` (see :func:`check_shape`) of ``dtype`` is exactly ``nbytes``
    bytes, in time linear in the number of dimensions; return the shape as a tuple."""
    dims = check_shape(name, shape)
    bits = dtype.bits
    nbits = nbytes * 8
    numel = _numel(dims, nbits // bits + 1)
    if numel * bits != nbits:
        need = "more" if numel * bits > nbits else f"{numel * bits / 8:,g}"
        raise InvalidArgumentError(
            f"tensor {name!r}: {dtype.name} shape {slicing.shape_text(dims)} needs {need} "
            f"bytes, got {nbytes:,}"
        )
    return dims


def _numel(shape: Sequence[int], limit: int | None = None) -> int:
    """The product of ``shape``, stopping early once it passes ``limit`` (then some number
    over ``limit``): linear time however many dimensions a shape has."""
    if 0 in shape:
        return 0
    n = 1
    for d in shape:
        n *= d
        if limit is not None and n > limit:
            return n
    return n


def prepare_array(name: str, arr: Any) -> Prepared:
    """Prepare a numpy array (any strides, byte order or ``ml_dtypes`` type) for writing."""
    check_name(name)
    if isinstance(arr, np.generic):
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray):
        raise InvalidTypeError(f"tensor {name!r}: expected a numpy array, got {type(arr).__name__}")
    try:
        dt = dtypes.from_numpy(arr.dtype)
    except (KeyError, TypeError):
        raise UnknownDtypeError(
            f"tensor {name!r}: numpy dtype {arr.dtype} has no safetensors equivalent"
        ) from None
    if dt.is_subbyte:
        if _numel(arr.shape) * dt.bits % 8:
            raise InvalidArgumentError(
                f"tensor {name!r}: {arr.size} {dt.name} elements do not fill whole bytes"
            )
        codes = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        return Prepared(name, dt, arr.shape, bytes_view(dtypes.pack(codes, dt.bits)))
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    return Prepared(name, dt, arr.shape, bytes_view(arr))


class _Sized(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def nbytes(self) -> int: ...


S = TypeVar("S", bound=_Sized)


def order(tensors: Iterable[S]) -> list[S]:
    """The reference's tensor order: dtype enumeration descending, then name."""
    return sorted(tensors, key=lambda p: (-p.dtype.order, p.name))


def _layout(
    tensors: Mapping[str, S] | Iterable[S],
    metadata: Mapping[str, str] | None,
    align: int,
) -> tuple[bytes, list[S]]:
    items = tensors.values() if isinstance(tensors, Mapping) else tensors
    ordered = order(items)
    entries = []
    offset = 0
    for p in ordered:
        entries.append((p.name, p.dtype, p.shape, offset, offset + p.nbytes))
        offset += p.nbytes
    return encode_header(entries, metadata, align=align), ordered


def with_digests(
    tensors: Mapping[str, Prepared] | Iterable[Prepared],
    metadata: Mapping[str, str] | None,
    checksum: str | None,
) -> Mapping[str, str] | None:
    """``metadata`` with each tensor's digest under
    :data:`~tensorfile.core.digests.METADATA_KEY` when ``checksum`` names an algorithm (see
    :mod:`tensorfile.core.digests`); ``metadata`` as it is when ``checksum`` is None.

    Example:
        >>> import numpy as np
        >>> p = prepare_array("w", np.zeros(2, np.float32))
        >>> with_digests([p], {"format": "np"}, "crc32c")
        {'format': 'np', 'tensorfile.digests': '{"w":"crc32c:8c28b28a"}'}
    """
    if checksum is None:
        return metadata
    items = tensors.values() if isinstance(tensors, Mapping) else tensors
    return _digest_metadata(metadata, {p.name: digest_of(checksum, p.data) for p in items})


def _digest_metadata(
    metadata: Mapping[str, str] | None, found: Mapping[str, str]
) -> dict[str, str]:
    """``metadata`` with the digests ``found`` (by name, written in name order)."""
    out = dict(metadata or {})
    ordered = dict(sorted(found.items()))
    out[METADATA_KEY] = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
    return out


def to_bytes(
    tensors: Mapping[str, Prepared] | Iterable[Prepared],
    metadata: Mapping[str, str] | None,
    *,
    align: int = 8,
    checksum: str | None = None,
) -> bytes:
    """The whole file as bytes (``checksum``: see :func:`with_digests`)."""
    tensors = list(tensors.values() if isinstance(tensors, Mapping) else tensors)
    header, ordered = _layout(tensors, with_digests(tensors, metadata, checksum), align)
    out = bytearray(len(header) + sum(p.nbytes for p in ordered))
    out[: len(header)] = header
    pos = len(header)
    for p in ordered:
        n = p.data.nbytes
        out[pos : pos + n] = p.data.cast("B") if p.data.format != "B" else p.data
        pos += n
    return bytes(out)


def write_file(
    tensors: Mapping[str, Prepared] | Iterable[Prepared],
    path: str | os.PathLike[str],
    metadata: Mapping[str, str] | None,
    *,
    align: int = 8,
    fsync: bool = False,
    checksum: str | None = None,
) -> None:
    """Write the file atomically (temporary file in the same folder, then rename);
    ``checksum``: see :func:`with_digests`."""
    tensors = list(tensors.values() if isinstance(tensors, Mapping) else tensors)
    header, ordered = _layout(tensors, with_digests(tensors, metadata, checksum), align)
    try:
        with atomic_write(path, fsync=fsync) as fd:
            write_all(fd, memoryview(header))
            # Buffered writes to one file serialize on its inode lock, so threads would not
            # help; reserving the space first is what makes the writes fast.
            preallocate(fd, len(header) + sum(p.nbytes for p in ordered))
            for p in ordered:
                if p.nbytes:
                    write_all(fd, p.data)
    except SafetensorError:
        raise
    except SourceError as exc:  # the reference's write errors are SafetensorErrors
        raise SafetensorIOError(str(exc)) from exc


class StreamWriter:
    """Write a safetensors file one tensor (or one chunk) at a time.

    The tensor specs come first, so the header, and every tensor's place, is known before
    any data; then :meth:`write` appends bytes to each tensor's region, in any order of
    tensors and in as many chunks as you like. Only the chunk in hand is in memory, so a
    model larger than memory can be written. The file appears at ``path`` on :meth:`close`
    when every tensor is complete; on error (or :meth:`abort`) nothing is left behind.

    The bytes are identical to :func:`tensorfile.safetensors.numpy.save_file` of the same
    tensors.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "big.safetensors")
        >>> with StreamWriter(path, {"w": ("F32", (4, 2))}) as w:
        ...     w.write("w", np.zeros((2, 2), np.float32))  # first two rows
        ...     w.write("w", np.ones((2, 2), np.float32))   # last two rows
        >>> os.path.getsize(path)
        104
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        specs: Mapping[str, tuple[Any, Sequence[int]]],
        metadata: Mapping[str, str] | None = None,
        *,
        align: int = 8,
        fsync: bool = False,
        checksum: str | None = None,
    ) -> None:
        self._checksum = checksum
        self._digests: dict[str, Digest] = {}
        if not isinstance(specs, Mapping):
            raise InvalidArgumentError(
                f"specs must map names to (dtype, shape), got {type(specs).__name__}"
            )
        placeholders = []
        for name, declared in specs.items():
            check_name(name)
            if not isinstance(declared, tuple | list) or len(declared) != 2:
                raise InvalidArgumentError(f"tensor {name!r}: a spec is (dtype, shape)")
            dtype, shape = declared
            dt = _dtype_of(name, dtype)
            shape_t = check_shape(name, shape)
            numel = _numel(shape_t, _MAX_STREAM_BITS // dt.bits)
            if numel * dt.bits > _MAX_STREAM_BITS:
                raise InvalidArgumentError(
                    f"tensor {name!r}: shape {slicing.shape_text(shape_t)} of {dt.name} is "
                    "over 2**64 bytes"
                )
            if numel * dt.bits % 8:
                raise InvalidArgumentError(
                    f"tensor {name!r}: {numel} {dt.name} elements do not fill whole bytes"
                )
            placeholders.append(_Spec(name, dt, shape_t, dt.nbytes(numel)))
        align = check_align(align)
        if checksum is not None:  # digests of a fixed length now, the real ones on close
            self._digests = {s.name: Digest(checksum) for s in placeholders}
            filler = {s.name: placeholder(checksum) for s in placeholders}
            metadata = _digest_metadata(metadata, filler)
        self._layout_args = (placeholders, metadata, align)
        header, ordered = _layout(placeholders, metadata, align)
        self._header_len = len(header)
        self._regions: dict[str, tuple[int, int]] = {}
        pos = len(header)
        for spec in ordered:
            self._regions[spec.name] = (pos, pos + spec.nbytes)
            pos += spec.nbytes
        self._specs = {s.name: s for s in placeholders}
        self._written = dict.fromkeys(self._regions, 0)
        self._chunks = dict.fromkeys(self._regions, 0)
        self._file = AtomicFile(path, fsync=fsync)
        self._fd = self._file.fd
        self._done = False
        try:
            write_all(self._fd, memoryview(header))
        except OSError as exc:
            self.abort()
            raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from exc
        except BaseException:
            self.abort()
            raise

    def write(self, name: str, data: Any) -> None:
        """Append ``data`` (an array or bytes-like) to tensor ``name``'s bytes."""
        if self._done:
            raise InvalidArgumentError("the writer is closed")
        if name not in self._regions:
            raise InvalidArgumentError(f"tensor {name!r} was not declared when the writer opened")
        spec = self._specs[name]
        index = self._chunks[name]
        if isinstance(data, np.ndarray | np.generic):
            arr = np.asarray(data)
            done = self._written[name] * 8 // spec.dtype.bits
            check_chunk(name, spec.shape, arr.shape, index=index, done=done)
            if spec.dtype.is_subbyte:
                view = prepare_array(name, arr).data
            else:
                if arr.dtype != spec.dtype.numpy:
                    raise InvalidArgumentError(
                        f"tensor {name!r} is {spec.dtype.name}; chunk {index} is an array "
                        f"of {arr.dtype}"
                    )
                view = prepare_array(name, arr).data
        else:
            try:
                view = memoryview(data).cast("B")
            except TypeError as exc:
                raise InvalidArgumentError(
                    f"tensor {name!r}: expected an array or a contiguous bytes-like object, "
                    f"got {type(data).__name__}: {exc}"
                ) from None
        start, stop = self._regions[name]
        done = self._written[name]
        if start + done + view.nbytes > stop:
            raise InvalidArgumentError(
                f"tensor {name!r} takes {stop - start} bytes; {done} are written and "
                f"{view.nbytes} more would overflow it"
            )
        try:
            if index == 0 and stop > start:  # its region, reserved once its data is in hand:
                preallocate(self._fd, stop - start, start)  # never from the specs alone
            write_all(self._fd, view, start + done)
        except OSError as exc:
            self.abort()
            raise SafetensorError(f"writing tensor {name!r} failed: {exc}") from exc
        if self._digests:
            self._digests[name].update(view)
        self._written[name] = done + view.nbytes
        self._chunks[name] = index + 1

    def missing(self) -> list[str]:
        """Tensors not yet completely written."""
        return [n for n, (a, b) in self._regions.items() if self._written[n] != b - a]

    def close(self) -> None:
        """Finish: check every tensor is complete, then move the file into place."""
        if self._done:
            return
        missing = self.missing()
        if missing:
            self.abort()
            parts = [
                f"{n!r} has {self._written[n]:,} of {self._regions[n][1] - self._regions[n][0]:,}"
                " bytes"
                for n in missing[:5]
            ]
            raise InvalidArgumentError(
                f"{len(missing)} {'tensor was' if len(missing) == 1 else 'tensors were'} not "
                f"completely written, so no file was created: {'; '.join(parts)}"
            )
        if self._digests:
            self._write_digests()
        self._done = True
        self._file.commit()

    def _write_digests(self) -> None:
        """Rewrite the header with the real digests (the same length as the placeholders)."""
        placeholders, metadata, align = self._layout_args
        found = {n: d.value() for n, d in self._digests.items()}
        header, _ = _layout(placeholders, _digest_metadata(metadata, found), align)
        if len(header) != self._header_len:  # fixed-length digests: cannot happen
            self.abort()
            raise SafetensorError("the header with digests changed length; no file was written")
        try:
            write_all(self._fd, memoryview(header), 0)
        except OSError as exc:
            self.abort()
            raise SafetensorError(f"writing the digests failed: {exc}") from exc

    def abort(self) -> None:
        """Discard everything written; the destination is left as it was."""
        self._done = True
        self._file.abort()

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.abort()
        else:
            self.close()


@dataclass(frozen=True, slots=True)
class _Spec:
    """A declared tensor of a stream: its place is known before its bytes."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int


def _dtype_of(name: str, dtype: Any) -> DType:
    if isinstance(dtype, DType):
        return dtype
    try:
        if isinstance(dtype, str):
            return dtypes.from_name(dtype)
        if type(dtype).__module__.startswith("torch"):
            return dtypes.from_torch(dtype)
        return dtypes.from_numpy(dtype)
    except (KeyError, TypeError):
        raise UnknownDtypeError(f"tensor {name!r}: unknown dtype {dtype!r}") from None
