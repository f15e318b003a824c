"""The format-neutral reader: tensors out of a :class:`Catalog` and a :class:`Source`.

:func:`tensorfile.open` returns a :class:`Reader`. It serves zero-copy read-only views of
raw tensors on a mapped file (:meth:`Reader.view`), owned copies read straight into freshly
allocated arrays (:meth:`Reader.get_tensor`), and slices that read only the rows they need
(:meth:`Reader.read_slice`). Framework bridges reuse :meth:`Reader.read_into` with their own
allocator, so torch tensors are filled in place without an intermediate numpy copy; those
that plan their own reads read a file's bytes through :meth:`Reader.readinto`.

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> with tensorfile.open(save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)})) as r:
    ...     r.keys(), r.view("w")[1].tolist(), r.read_slice("w", (slice(None), -1)).tolist()
    (['w'], [3.0, 4.0, 5.0], [2.0, 5.0])
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

import numpy as np

from . import dtypes, plan, slicing
from .catalog import Catalog, TensorInfo
from .errors import (
    InvalidArgumentError,
    InvalidTypeError,
    TensorFileError,
    TensorNotFoundError,
    UnsupportedError,
)
from .source import Source
from .values import brief

__all__ = [
    "Allocator",
    "Reader",
    "brief",
    "bytes_view",
    "empty_for_reading",
    "holds_blocks",
    "index_copy",
    "names_list",
    "numpy_allocator",
]

T = TypeVar("T")
NDArray = np.ndarray[Any, Any]

Allocator = Callable[[TensorInfo], tuple[memoryview, Callable[[], T]]]
"""Given a tensor, return a writable byte view of its stored size and a function that turns
the filled buffer into the result."""


def _numpy_hugepage_switch() -> Callable[[bool], bool] | None:
    """numpy's ``_set_madvise_hugepage`` (None where this numpy has none)."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    return switch if callable(switch) else None


_SET_HUGEPAGE = _numpy_hugepage_switch()
_HUGEPAGE_LOCK = threading.Lock()
_HUGEPAGE_MIN_BYTES = 4 << 20  # numpy advises arrays from this size up


def empty_for_reading(shape: tuple[int, ...], dtype: np.dtype[Any]) -> NDArray:
    """``np.empty(shape, dtype)`` for an array a read is about to fill: without numpy's
    transparent-huge-page advice.

    numpy marks every array of 4 MiB or more ``MADV_HUGEPAGE``. In a fresh process on a
    virtual machine whose host backs memory lazily that is a loss: the guest keeps its
    already-backed free memory in pieces smaller than 2 MiB and hands whole 2 MiB blocks
    back to the host, so a huge page is one the host must back on first touch (a 1 GiB
    ``load_file`` in a fresh process took ~1.4-2.7 s with the advice, ~0.35-0.6 s without;
    see the ``process_load_numpy`` benchmark). Without it the kernel's own policy applies,
    as for ``malloc`` (the reference's buffers) and torch tensors: where that policy is
    ``always``, the arrays still get huge pages. numpy's switch is global, so it is flipped
    under a lock and restored; an array another thread allocates meanwhile just follows the
    kernel's policy too.

    Example:
        >>> a = empty_for_reading((1024, 1024, 2), np.dtype(np.float32))
        >>> a.shape, a.dtype.name, a.flags.owndata
        ((1024, 1024, 2), 'float32', True)
    """
    if _SET_HUGEPAGE is None or math.prod(shape) * dtype.itemsize < _HUGEPAGE_MIN_BYTES:
        return np.empty(shape, dtype)
    with _HUGEPAGE_LOCK:
        previous = _SET_HUGEPAGE(False)
        try:
            return np.empty(shape, dtype)
        finally:
            _SET_HUGEPAGE(previous)


def bytes_view(arr: NDArray) -> memoryview:
    """A flat writable byte view of a C-contiguous array (of any dtype, ml_dtypes included)."""
    if arr.size == 0:
        return memoryview(bytearray())
    flat: Any = arr.reshape(-1).view(np.uint8)  # numpy's stubs do not declare __buffer__
    return memoryview(flat)


def numpy_allocator(info: TensorInfo) -> tuple[memoryview, Callable[[], NDArray]]:
    """Allocate an owned numpy array for ``info`` (unpacking sub-byte types when filled)."""
    dt = info.dtype
    if dt.is_subbyte:
        packed = empty_for_reading((info.byte_range.length,), np.dtype(np.uint8))
        shape = info.shape
        numel = math.prod(shape)

        def unpacked() -> NDArray:
            return dtypes.unpack(packed, dt.bits, numel).view(dt.numpy).reshape(shape)

        return bytes_view(packed), unpacked
    arr = empty_for_reading(info.shape, dt.numpy)
    return bytes_view(arr), lambda: arr


def holds_blocks(info: TensorInfo) -> bool:
    """Whether ``info`` is ggml's quantized blocks as stored (GGUF's, zTensor v2's
    ``gguf.<type>/1``): layout ``quantized`` and one ``data`` component. Only a format's
    own rule gives that layout (GGUF's table of types, zTensor v2's registered
    ``gguf.<type>/1`` profiles); a layout a file names ``quantized`` (a zTensor v1.0
    extension, an unregistered v2 layout id) is ``ext:quantized``
    (:func:`~tensorfile.core.catalog.extension_name`), never this.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Component
        >>> from tensorfile.core.dtypes import from_name
        >>> data = {"data": Component(ByteRange(0, 34), from_name("U8"))}
        >>> holds_blocks(TensorInfo("w", from_name("U8"), (32,), data, "quantized", "q8_0"))
        True
        >>> holds_blocks(TensorInfo("w", from_name("U8"), (34,), data, "ext:quantized", "uint8"))
        False
    """
    return info.layout == "quantized" and set(info.components) == {"data"}


def digest_covers_data(info: TensorInfo) -> bool:
    """Whether a digest of ``info``'s stored ``data`` component can be a digest of its data
    bytes at all: a dense tensor or ggml blocks (:func:`holds_blocks`) with such a
    component, not a BOOL one (whose stored bytes may hold any nonzero byte for True, which
    the data bytes hold as 1)."""
    return (
        (info.layout == "dense" or holds_blocks(info))
        and "data" in info.components
        and info.common_dtype != "BOOL"
    )


class Reader:
    """Read tensors described by a catalog from a source.

    Args:
        source: where the bytes are.
        catalog: what the format reader found in the header.
        not_found: the error raised for an unknown name (a format may use its own subclass).
        owns_source: close the source when the reader is closed.
    """

    verify: bool = False
    """Whether reads compare the digests the file stores (a format's reader sets it)."""

    def __init__(
        self,
        source: Source,
        catalog: Catalog,
        *,
        not_found: type[TensorNotFoundError] = TensorNotFoundError,
        owns_source: bool = True,
    ) -> None:
        self.source = source
        self.catalog = catalog
        self._not_found = not_found
        self._owns_source = owns_source

    # -- description ---------------------------------------------------------------------

    @property
    def format(self) -> str:
        """The file's format name."""
        return self.catalog.format

    @property
    def metadata(self) -> Mapping[str, Any]:
        """File-level metadata as plain values (empty when the file has none): text for
        safetensors and zTensor, plain Python values for GGUF."""
        return self.catalog.metadata

    @property
    def typed_metadata(self) -> Mapping[str, Any]:
        """File-level metadata with the types the file stores: GGUF's values as
        :class:`~tensorfile.core.values.TypedValue`; other formats' as :attr:`metadata`."""
        return self.catalog.metadata

    def keys(self) -> list[str]:
        """Tensor names in file order."""
        return list(self.catalog.tensors)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self.catalog.tensors
        except TypeError:  # unhashable
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.catalog.tensors)

    def checks_digest(self, name: str) -> bool:
        """Whether reading ``name`` compares a digest the file stores for it: one over each
        of its stored components (a tensor a digest covers only in part is not covered)."""
        comps = self.info(name).components.values()
        return self.verify and bool(comps) and all(c.digest for c in comps)

    def stored_digest(self, name: str, algorithm: str) -> str | None:
        """The digest ``algorithm`` (one of :data:`~tensorfile.core.digests.ALGORITHMS`)
        that the file stores of ``name``'s data bytes, in
        :meth:`~tensorfile.core.digests.Digest.value`'s form; None when it stores none.

        The data bytes are the tensor's elements, row-major and little-endian (a sub-byte
        type packed, as a raw file stores it; GGUF's quantized blocks as stored): what the
        content id hashes. Only a digest over exactly those bytes counts: that of a dense
        tensor's single ``data`` component over its stored bytes when they are raw, or over
        its decoded bytes (zTensor v2). A digest over compressed bytes (zTensor v1.0 zstd),
        or of a sparse tensor's parts, covers other bytes. The digest is what the file
        claims: nothing is read or checked here.

        Example:
            >>> from tensorfile.core.catalog import ByteRange, Component
            >>> from tensorfile.core.dtypes import from_name
            >>> u8 = from_name("U8")
            >>> data = Component(ByteRange(0, 3), u8, "raw", "crc32c:0x364B3FB7")
            >>> t = TensorInfo("w", u8, (3,), {"data": data})
            >>> r = Reader(None, Catalog("ztensor", {}, {"w": t}, 0, 0))
            >>> r.stored_digest("w", "crc32c"), r.stored_digest("w", "sha256")
            ('crc32c:364b3fb7', None)
        """
        from .digests import canonical

        info = self.info(name)
        if not digest_covers_data(info):
            return None
        comp = info.components["data"]
        if comp.digest is None or len(info.components) != 1:
            return None
        if comp.encoding != "raw" and comp.digest_over != "decoded":
            return None  # over the compressed bytes
        if comp.digest_over not in ("stored", "decoded"):
            return None
        found = canonical(comp.digest)
        return found if found is not None and found.startswith(algorithm + ":") else None

    def expected_digest(self, name: str) -> str | None:
        """The ``algorithm:hex`` digest that reading ``name`` compares with its stored
        bytes (a raw tensor's data), for a consumer that reads those bytes itself and checks
        them as they pass (the torch device stream); None when a read compares none.

        Example:
            >>> from tensorfile.core.catalog import ByteRange, Component
            >>> from tensorfile.core.dtypes import from_name
            >>> data = Component(ByteRange(0, 3), from_name("U8"), "raw", "crc32c:364b3fb7")
            >>> w = TensorInfo("w", data.dtype, (3,), {"data": data})
            >>> r = Reader(None, Catalog("x", {}, {"w": w}, 0, 0))
            >>> r.verify = True
            >>> r.expected_digest("w")
            'crc32c:364b3fb7'
        """
        if not self.checks_digest(name):
            return None
        info = self.info(name)
        comp = info.components.get("data")
        if comp is None or len(info.components) != 1 or comp.encoding != "raw":
            return None
        return comp.digest

    def compare_digest(self, name: str, got: str) -> None:
        """Raise this format's checksum error unless ``got`` (a
        :class:`~tensorfile.core.digests.Digest` value of ``name``'s stored bytes) is
        :meth:`expected_digest`."""
        from .digests import canonical
        from .errors import ChecksumError

        expected = self.expected_digest(name)
        if expected is not None and canonical(expected) != canonical(got):
            raise ChecksumError(
                f"{self.source.name}: tensor {name!r} has digest {got}, the file records "
                f"{expected}: its bytes changed after it was written"
            )

    def info(self, name: str) -> TensorInfo:
        """The catalog entry of ``name``."""
        if not isinstance(name, str):
            raise InvalidTypeError(f"a tensor name is a string, got {type(name).__name__}")
        try:
            return self.catalog.tensors[name]
        except KeyError:
            raise self._not_found(
                f"{self.source.name} does not contain a tensor named {_name_text(name)}"
            ) from None

    # -- reading -------------------------------------------------------------------------

    def _dense(self, info: TensorInfo) -> None:
        if info.layout == "quantized":
            raise UnsupportedError(
                f"tensor {info.name!r} is quantized ({info.common_dtype}): "
                f"get_tensor({info.name!r}, dequantize=True) returns it as float32"
            )
        if (
            info.layout != "dense"
            or set(info.components) != {"data"}
            or info.data.encoding != "raw"
        ):
            raise UnsupportedError(
                f"tensor {info.name!r} is stored as {info.layout}/{info.data.encoding}; "
                "only raw dense tensors can be read as plain arrays"
            )

    def view(self, name: str) -> NDArray:
        """A read-only numpy array over the mapped file: no copy, no read until touched."""
        info = self.info(name)
        self._dense(info)
        dt = info.dtype
        if dt.is_subbyte:
            raise UnsupportedError(
                f"tensor {name!r} is {dt.name}, bit-packed in the file; get_tensor() returns "
                "an unpacked copy"
            )
        numel = info.numel
        if numel == 0:
            arr = self._empty(info, info.shape)
        else:
            buf = self.source.buffer()
            if buf is None:
                raise UnsupportedError(f"{self.source.name} cannot be mapped; use get_tensor()")
            start = info.byte_range.start
            flat = np.frombuffer(buf, dtype=dt.numpy, count=numel, offset=start)
            try:
                arr = flat.reshape(info.shape)
            except ValueError as exc:
                raise self._unholdable(info, exc) from exc
        arr.flags.writeable = False
        return arr

    def get_tensor(self, name: str) -> NDArray:
        """An owned, writable numpy copy of ``name``."""
        return self.read_into([name], numpy_allocator)[0]

    def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, NDArray]:
        """Owned numpy copies of ``names`` (all tensors by default), read in as few calls as
        the file layout allows."""
        names = self.keys() if names is None else names_list(names)
        return dict(zip(names, self.read_into(names, numpy_allocator), strict=True))

    def read_into(self, names: list[str], alloc: Allocator[T]) -> list[T]:
        """Read ``names`` into buffers from ``alloc``: one plan (:mod:`~tensorfile.core.plan`)
        for all of them, adjacent tensors sharing reads, pieces read in parallel where the
        source allows."""
        return self.start_read(names, alloc).run()

    def start_read(self, names: list[str], alloc: Allocator[T]) -> plan.Pending[T]:
        """The reads of :meth:`read_into`, planned but not run: a sharded checkpoint runs
        the pieces of all its shards in one pool, then finishes each shard."""
        infos = [self.info(n) for n in names]
        for info in infos:
            self._dense(info)
        slots = [self._allocate(alloc, info) for info in infos]
        jobs = [
            (info.name, info.byte_range, slot[0]) for info, slot in zip(infos, slots, strict=True)
        ]

        def finish() -> list[T]:
            self._after_read(jobs)
            return [done() for _, done in slots]

        return plan.Pending(self.plan_reads(jobs), finish)

    def _allocate(
        self, alloc: Allocator[T], info: TensorInfo
    ) -> tuple[memoryview, Callable[[], T]]:
        """``alloc(info)``, with numpy's and torch's refusals (too many dimensions, too many
        bytes) turned into this format's error."""
        try:
            return alloc(info)
        except (ValueError, MemoryError, OverflowError, RuntimeError) as exc:
            raise self._unholdable(info, exc) from exc

    def _empty(self, info: TensorInfo, shape: tuple[int, ...]) -> NDArray:
        try:
            return empty_for_reading(shape, info.dtype.numpy)
        except (ValueError, MemoryError, OverflowError) as exc:
            raise self._unholdable(info, exc) from exc

    def _unholdable(self, info: TensorInfo, exc: BaseException) -> TensorFileError:
        """The error for a tensor the file describes validly but memory cannot hold."""
        return UnsupportedError(
            f"{self.source.name}: tensor {info.name!r} of shape {slicing.shape_text(info.shape)} "
            f"cannot be held as an array: {exc}"
        )

    def plan_reads(self, jobs: list[plan.Job]) -> list[plan.Piece]:
        """The pieces that fill each job's buffer from its byte range (see
        :func:`tensorfile.core.plan.plan`), read through :meth:`readinto`."""
        return plan.plan(self.source, self.readinto, jobs)

    def _read_ranges(self, jobs: list[plan.Job]) -> None:
        """Fill each buffer from its byte range, as planned, then check what was read."""
        plan.execute(self.plan_reads(jobs))
        self._after_read(jobs)

    def _after_read(self, jobs: list[plan.Job]) -> None:
        """Called once ``jobs`` were read: a format that records digests checks them here."""

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers``, one after the other, with the file's stored bytes from ``offset``
        on (a raw tensor's are its ``info(name).byte_range``); a failed read is this format's
        error. For bridges that plan their own reads (the pinned torch stream reads chunks
        of several tensors into one staging buffer); every other read is :meth:`read_into`'s.

        Example:
            >>> import numpy as np, tensorfile
            >>> from tensorfile.safetensors.numpy import save
            >>> with tensorfile.open(save({"w": np.arange(3, dtype=np.int8)})) as r:
            ...     out = bytearray(3)
            ...     r.readinto(r.info("w").byte_range.start, [memoryview(out)])
            >>> list(out)
            [0, 1, 2]
        """
        self.source.readinto(offset, buffers)

    def read_slice(self, name: str, key: Any) -> NDArray:
        """``tensor[key]`` as an owned numpy array, reading only the rows the index touches.

        Basic indexing (ints, slices with any step, ``...``, ``None``) reads the bounding
        rows of the first sliced axis (or only the selected rows when a step skips a lot);
        other numpy indices read the whole tensor first.
        """
        info = self.info(name)
        self._dense(info)
        dt = info.dtype
        if dt.is_subbyte:
            return index_copy(self.get_tensor(name), key)
        try:
            p = slicing.plan(info.shape, key, dt.itemsize)
        except TypeError:
            return index_copy(self.get_tensor(name), key)
        except InvalidArgumentError:
            raise
        except ValueError as exc:  # numpy cannot even describe the shape
            raise self._unholdable(info, exc) from exc
        if not p.span:
            return self._empty(info, p.result_shape)
        rest = info.shape[p.axis + 1 :]
        row_bytes = math.prod(rest) * dt.itemsize
        base = info.byte_range.start + p.prefix * dt.itemsize
        arr = self._empty(info, (len(p.span), *rest))
        if p.dense:
            self.readinto(base + p.span[0] * row_bytes, [bytes_view(arr)])
        else:
            for k, row in enumerate(p.span):
                self.readinto(base + row * row_bytes, [bytes_view(arr[k])])
        ndim = len(info.shape)
        sub = arr.reshape((1,) * p.axis + arr.shape) if p.axis < ndim else arr.reshape((1,) * ndim)
        out = sub[(*p.key, Ellipsis)]
        return out.copy() if out.size < arr.size or not out.flags.c_contiguous else out

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the source (views already handed out stay valid)."""
        if self._owns_source:
            self.source.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tensorfile.Reader {self.format} {self.source.name!r}: {len(self)} tensors>"


def names_list(names: Iterable[str]) -> list[str]:
    """``names`` as a list; an :class:`InvalidArgumentError` when it is not an iterable of
    names (a lone string is one name).

    Example:
        >>> names_list("w"), names_list(("a", "b"))
        (['w'], ['a', 'b'])
    """
    if isinstance(names, str):
        return [names]
    try:
        return list(names)
    except TypeError:
        raise InvalidArgumentError(
            f"expected an iterable of tensor names, got {type(names).__name__}"
        ) from None


def _name_text(name: object) -> str:
    """A tensor name for a message: its repr, cut short when long (never the repr of an
    arbitrary object, which can be huge or fail)."""
    if isinstance(name, str):
        if len(name) > 200:
            return f"{name[:200]!r}... ({len(name):,} characters)"
        return repr(name)
    if isinstance(name, int) and name.bit_length() <= 64:
        return repr(name)
    return f"<{type(name).__name__}>"


def index_copy(arr: NDArray, key: Any) -> NDArray:
    """``arr[key]`` as an owned C-contiguous array; a bad index is an InvalidArgumentError."""
    try:
        return np.array(arr[key], order="C", copy=True)  # (ascontiguousarray makes 0-d 1-d)
    except (IndexError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(
            f"invalid index {brief(key)} for shape {list(arr.shape)}: {exc}"
        ) from exc
