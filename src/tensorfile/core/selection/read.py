"""Read regions of many tensors in one planned pass, straight into their boxes.

:func:`read_regions` takes :class:`Want` items (a reader, a tensor, a region, the box's
array) and fills every box. Each region becomes byte runs (:mod:`.runs`):

* a region of a few runs (at most :data:`MANY_RUNS`: a row range, a block of rows, a
  column block of a short matrix) is read run by run, each run straight into its part of
  the box: every run of every tensor of a file goes to the read planner together
  (:mod:`tensorfile.core.plan`: sorted, neighbours merged, pieces read in parallel), and
  the gaps between runs are read over only while they stay under 10% of the bytes wanted;
* a region of many runs (one per row of a column block of a tall matrix) from a local
  file is copied out of a read-only mapping of the tensor in one strided copy (the kernel
  reads the pages that hold it), and from a remote file, where the rows its runs span are
  at most :data:`SPAN_WASTE` times the bytes wanted (or :data:`SPAN_FLOOR` bytes, for small
  regions, or :data:`RUN_BYTES` per run: a run read alone costs a request), those rows are
  read as one range into a buffer and copied out;
  else run by run through the planner (whose gap rule bounds the bytes read over: a column
  of a wide tensor is never a whole-tensor read);
* a tensor that is not stored raw (compressed, bit-packed, quantized), and every tensor
  of a reader that checks digests, is read whole (decoded, its digest checked), and the
  region copied out.

A box is a C-contiguous numpy array of the region's box shape whose last dimension is the
element's bytes (``uint8``, :func:`element_size` of them): bytes move as bytes, whatever
the element type (bfloat16 and the float8 types included).

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> from tensorfile.core.selection.region import region
    >>> r = tensorfile.open(save({"w": np.arange(12, dtype=np.int16).reshape(3, 4)}))
    >>> reg = region((3, 4), (slice(1, 3), [slice(0, 1), slice(3, 4)]))
    >>> box = np.empty((*reg.box_shape, 2), np.uint8)
    >>> read_regions([Want(r, "w", reg, box)]) > 0
    True
    >>> box.view(np.int16)[..., 0].tolist()
    [[4, 7], [8, 11]]
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import plan
from ..catalog import ByteRange, TensorInfo
from ..errors import InvalidArgumentError, SourceError
from ..parallel import in_threads
from ..reader import Reader, bytes_view, empty_for_reading
from .region import Interval, Region
from .runs import run_count, runs, take

__all__ = [
    "MANY_RUNS",
    "RUN_BYTES",
    "SPAN_FLOOR",
    "SPAN_WASTE",
    "Frugal",
    "Want",
    "element_size",
    "finish",
    "local_file",
    "mapped",
    "new_box",
    "raw",
    "read_regions",
]

NDArray = np.ndarray[Any, Any]

MANY_RUNS = 64
"""Runs of one region from which one strided copy beats a read per run."""

SPAN_WASTE = 8
"""A remote region's span is read as one range only while it is at most this many times
the bytes wanted (or :data:`SPAN_FLOOR`)."""

SPAN_FLOOR = 256 << 10
"""The span bytes always allowed for a remote region (small spans: one read, whatever the
ratio)."""

RUN_BYTES = 1024
"""What a run read on its own costs, in bytes read over instead: a request (or a system
call). A remote region's span is read while it is at most this much per run (a column of
a tall, narrow matrix: one request, not one per row), even past :data:`SPAN_WASTE`."""


@dataclass(slots=True)
class Want:
    """One region to read: ``reader``'s tensor ``name``, ``region`` of it, into ``box`` (a
    C-contiguous ``uint8`` array of shape ``(*region.box_shape, element_size)``)."""

    reader: Reader
    name: str
    region: Region
    box: NDArray
    info: TensorInfo = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.info = self.reader.info(self.name)


class Frugal:
    """A source's tuning for reading parts of tensors: a gap may be read over only while
    the bytes read for nothing stay under ``coalesce_waste`` of those wanted (the gaps
    between one reader's parts are usually another's)."""

    coalesce_waste = 0.1

    def __init__(self, source: Any) -> None:
        self._source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def raw(reader: Reader, info: TensorInfo) -> bool:
    """Whether ``info``'s bytes are its elements as stored, each ``itemsize`` bytes in C
    order (so a region is byte runs of the file)."""
    return (
        info.layout == "dense"
        and set(info.components) == {"data"}
        and info.data.encoding == "raw"
        and not info.dtype.is_subbyte
        and not reader.verify
    )


def element_size(info: TensorInfo) -> int:
    """Bytes per element of ``info`` in memory (the unpacked size of a bit-packed type)."""
    return int(info.dtype.numpy.itemsize)


def new_box(reg: Region, info: TensorInfo) -> NDArray:
    """An empty box for ``reg`` of the tensor ``info`` (see :class:`Want`)."""
    return empty_for_reading((*reg.box_shape, element_size(info)), np.dtype(np.uint8))


def finish(reg: Region, box: NDArray) -> NDArray:
    """The region's result from its filled box: ``reg.key`` applied, C-contiguous bytes of
    shape ``(*reg.result_shape, element size)`` (the box itself when there is no key)."""
    if reg.key is None:
        return box
    return np.ascontiguousarray(box[(*reg.key, Ellipsis)])


def read_regions(wants: Sequence[Want], threads: int | None = None) -> int:
    """Fill every want's box with its region (see the module docstring); the bytes asked of
    the sources (runs and the gaps read over, spans, mapped bytes, whole tensors)."""
    jobs: dict[int, tuple[Reader, list[plan.Job]]] = {}
    after: list[Callable[[], None]] = []
    total = 0
    for w in wants:
        _check_box(w)
        count = run_count(w.region)
        if count == 0:
            continue
        if not raw(w.reader, w.info):
            after.append(_decoded(w))
            total += w.info.nbytes
            continue
        itemsize = w.info.dtype.itemsize
        base = w.info.byte_range.start
        flat = bytes_view(w.box)
        if count > MANY_RUNS:
            mapped = _mapped_copy(w)
            if mapped is not None:
                after.append(mapped)
                total += w.box.nbytes
                continue
            hull = _hull(w.region)
            stride = math.prod(w.region.shape[1:]) * itemsize
            spanned = (hull[1] - hull[0]) * stride
            if spanned <= max(SPAN_WASTE * w.box.nbytes, SPAN_FLOOR, RUN_BYTES * count):
                span = np.empty(((hull[1] - hull[0]), *w.region.shape[1:], itemsize), np.uint8)
                rng = ByteRange(base + hull[0] * stride, base + hull[1] * stride)
                jobs.setdefault(id(w.reader), (w.reader, []))[1].append(
                    (w.name, rng, bytes_view(span))
                )
                after.append(_span_copy(span, w, hull[0]))
                continue
        starts, lengths = runs(w.region, itemsize)
        ends = np.cumsum(lengths)
        slot = jobs.setdefault(id(w.reader), (w.reader, []))[1]
        for s, n, e in zip(starts.tolist(), lengths.tolist(), ends.tolist(), strict=True):
            slot.append((w.name, ByteRange(base + s, base + s + n), flat[e - n : e]))
    pieces: list[plan.Piece] = []
    for reader, group in jobs.values():
        pieces.extend(plan.plan(Frugal(reader.source), reader.readinto, group))
    total += sum(p.nbytes for p in pieces)
    plan.execute(pieces, threads)
    in_threads(min(_COPY_THREADS, threads or _COPY_THREADS), after, _call)
    return total


_COPY_THREADS = 4
"""Copies out of mappings, spans and decoded tensors run on up to this many threads."""


def _call(copy: Callable[[], None]) -> None:
    copy()


def _check_box(w: Want) -> None:
    want = (*w.region.box_shape, element_size(w.info))
    box = w.box
    if box.dtype != np.uint8 or box.shape != want or not box.flags.c_contiguous:
        raise InvalidArgumentError(
            f"tensor {w.name!r}: a box is a C-contiguous uint8 array of shape {list(want)}, got "
            f"{box.dtype} {list(box.shape)}"
        )
    if w.region.shape != w.info.shape:
        raise InvalidArgumentError(
            f"tensor {w.name!r}: the region is of a tensor of shape {list(w.region.shape)}, the "
            f"file's is {list(w.info.shape)}"
        )


def _as_bytes(arr: NDArray, shape: tuple[int, ...], itemsize: int) -> NDArray:
    return np.ascontiguousarray(arr).view(np.uint8).reshape(*shape, itemsize)


def _decoded(w: Want) -> Callable[[], None]:
    def copy() -> None:
        arr = w.reader.get_tensor(w.name)
        take(_as_bytes(arr, w.info.shape, element_size(w.info)), w.region.dims, w.box)

    return copy


def _hull(reg: Region) -> Interval:
    """The rows of dimension 0 from the region's first to its last."""
    if not reg.shape:
        return 0, 1
    dim = [iv for iv in reg.dims[0] if iv[1] > iv[0]]
    return min(a for a, _ in dim), max(b for _, b in dim)


def _span_copy(span: NDArray, w: Want, lo: int) -> Callable[[], None]:
    dims = (tuple((a - lo, b - lo) for a, b in w.region.dims[0]), *w.region.dims[1:])

    def copy() -> None:
        take(span, dims, w.box)

    return copy


def local_file(source: Any, end: int) -> int | None:
    """The descriptor of ``source``'s local file, to map bytes up to ``end`` from (None
    where it is not a local file); a :class:`~tensorfile.errors.SourceError` where the
    file now ends before ``end`` (cut short after it was opened: never a SIGBUS later)."""
    fileno = getattr(source, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = int(fileno())
        size = os.fstat(fd).st_size
    except (OSError, ValueError, TypeError, SourceError):
        return None
    if size < end:
        raise SourceError(
            f"{source.name}: the file ended at offset {size}; it was truncated after it was opened"
        )
    return fd


@contextmanager
def mapped(fd: int, start: int, nbytes: int) -> Iterator[memoryview | None]:
    """Bytes ``start .. start + nbytes`` of the file ``fd``, mapped read-only (a shared
    read-only mapping is not charged against the memory commit) for the block, then
    unmapped; None where it cannot be mapped."""
    at = start - start % mmap.ALLOCATIONGRANULARITY
    try:
        mapping = mmap.mmap(fd, start + nbytes - at, access=mmap.ACCESS_READ, offset=at)
    except (OSError, ValueError, OverflowError):
        yield None
        return
    whole = memoryview(mapping)
    view = whole[start - at : start - at + nbytes]
    try:
        yield view
    finally:
        for done in (view.release, whole.release, mapping.close):
            try:
                done()
            except BufferError:  # (a view still held: unmapped when it is freed)
                pass


def _mapped_copy(w: Want) -> Callable[[], None] | None:
    """The copy of ``w``'s region out of a read-only mapping of its tensor, where its file
    is a local one (None: read it otherwise)."""
    start, nbytes = w.info.byte_range.start, w.info.byte_range.length
    fd = local_file(w.reader.source, start + nbytes) if nbytes else None
    if fd is None:
        return None
    itemsize = w.info.dtype.itemsize

    def copy() -> None:
        with mapped(fd, start, nbytes) as buf:
            if buf is None:
                raise SourceError(f"{w.reader.source.name}: cannot map tensor {w.name!r}")
            whole = np.frombuffer(buf, np.uint8).reshape(*w.info.shape, itemsize)
            take(whole, w.region.dims, w.box)
            del whole

    return copy
