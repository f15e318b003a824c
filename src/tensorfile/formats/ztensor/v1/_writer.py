"""Write zTensor v1.0 files: component by component, atomically.

A :class:`Writer1` appends each tensor's components to a temporary file as it is given them
(64-byte aligned, zero padding, optionally zstd-compressed and digested), so only the tensor
in hand is in memory; :meth:`Writer1.close` appends the CBOR manifest and the footer and
renames the file into place. An error, or leaving a ``with`` block by an exception, leaves
whatever was at the destination untouched. The layout is the v1.0 reference writer's: the
magic, the components in the order given, the manifest straight after the last component.

Example:
    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> with Writer1(path, attributes={"license": "MIT"}) as w:
    ...     w.add("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    ...     w.add("b", np.zeros(3, np.float16), compression="zstd", checksum="crc32c")
    >>> open(path, "rb").read(8)
    b'ZTEN1000'
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tensorfile._version import __version__ as _version
from tensorfile.core import dtypes
from tensorfile.core.catalog import ByteRange, Component, TensorInfo
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, ZTensorError, ZTensorUnsupportedError
from tensorfile.core.reader import brief, bytes_view
from tensorfile.formats.ztensor._codecs import (
    Digester,
    StreamCompressor,
    compress,
    make_digest,
)
from tensorfile.formats.ztensor._container_writer import (
    UNSET,
    ContainerWriter,
    chunk_views,
    path_of,
)
from tensorfile.formats.ztensor._inputs import (
    attributes_of,
    dense_array,
    sparse_of,
    text_of,
    ztensor_dtype,
)
from tensorfile.formats.ztensor._layouts import CSRTensor, shape_of, sorted_csr
from tensorfile.formats.ztensor.v1._manifest import (
    ALIGNMENT,
    MAGIC,
    component_dtype,
    encode_manifest,
    numel_within,
)

__all__ = ["GENERATOR", "Writer1"]

GENERATOR = f"tensorfile {_version}"
_MAX_U64 = (1 << 64) - 1
_ALONE = 256 << 20
"""save_file compresses dense tensors this large one at a time (on all cores)."""


class Writer1(ContainerWriter):
    """Append tensors to a new zTensor v1.0 file, one at a time: the writer behind
    :class:`tensorfile.ztensor.Writer` (whose docstring says what each argument means), which
    makes one unless ``version=2`` (:mod:`tensorfile.formats.ztensor._writer` chooses);
    ``align`` is a v2 option, refused here.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        compression: str | None = None,
        level: int = 3,
        checksum: str | None = None,
        fsync: bool = False,
        version: int = 1,
        align: int | None = None,
    ) -> None:
        if align is not None:
            raise InvalidArgumentError("align= is a zTensor v2 option (pass version=2)")
        self.path = path_of(path)
        self._attributes = attributes_of(attributes)
        self._set_options(compression, level, checksum)
        self._entries: dict[str, TensorInfo] = {}
        self._open(MAGIC, fsync)

    # -- adding tensors --------------------------------------------------------------------

    def add(
        self,
        name: str,
        tensor: Any,
        *,
        compression: Any = UNSET,
        level: Any = UNSET,
        checksum: Any = UNSET,
    ) -> None:
        """Append ``tensor``: a numpy array or torch tensor (dense), a :class:`CSRTensor`,
        :class:`COOTensor`, scipy.sparse CSR/COO matrix or torch sparse CSR/COO tensor.
        ``compression``, ``level`` and ``checksum`` override the writer's defaults."""
        self._check_name(name)
        opts = self._options(compression, level, checksum)
        sparse = sparse_of(name, tensor)
        if sparse is None:
            dt, shape, view, _keep = dense_array(name, tensor)
            comps = {"data": self._component(view, dt, *opts)}
            self._record(TensorInfo(name, dt, shape, comps, "dense"))
            return
        try:
            dt = ztensor_dtype(name, dtypes.from_numpy(sparse.values.dtype))
        except KeyError:
            raise ZTensorUnsupportedError(
                f"tensor {name!r}: numpy dtype {sparse.values.dtype} has no zTensor equivalent"
            ) from None
        values = np.ascontiguousarray(sparse.values, dtype=sparse.values.dtype.newbyteorder("<"))
        parts: list[tuple[str, Any]] = [("values", values)]
        if isinstance(sparse, CSRTensor):
            try:  # a cell stored twice is refused, as the reader refuses it
                values, indices = sorted_csr(values, sparse.indices, sparse.indptr)
            except ZTensorError as exc:
                raise InvalidArgumentError(
                    f"tensor {name!r} cannot be written as a zTensor sparse_csr tensor: {exc}"
                ) from None
            parts = [("values", values), ("indices", indices), ("indptr", sparse.indptr)]
            layout = "sparse_csr"
        else:
            parts += [("coords", sparse.coords)]
            layout = "sparse_coo"
        comps = {}
        for role, arr in parts:
            little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
            comps[role] = self._component(bytes_view(little), component_dtype(role, dt), *opts)
        self._record(TensorInfo(name, dt, sparse.shape, comps, layout))

    def add_stream(
        self,
        name: str,
        dtype: Any,
        shape: Sequence[int],
        chunks: Iterable[Any],
        *,
        compression: Any = UNSET,
        level: Any = UNSET,
        checksum: Any = UNSET,
    ) -> None:
        """Append a dense tensor whose bytes arrive in ``chunks`` (arrays or byte buffers, in
        row-major order), so a tensor larger than memory can be written. The chunks must add
        up to exactly shape × itemsize bytes."""
        self._check_name(name)
        try:
            dt = dtypes.from_name(dtype) if isinstance(dtype, str) else dtypes.from_numpy(dtype)
        except (KeyError, TypeError):
            raise ZTensorUnsupportedError(f"tensor {name!r}: unknown dtype {dtype!r}") from None
        ztensor_dtype(name, dt)
        dims = shape_of(shape, f"tensor {name!r}")
        numel = numel_within(dims, _MAX_U64 // dt.itemsize)
        if numel is None:
            raise InvalidArgumentError(
                f"tensor {name!r}: a shape of {len(dims):,} dimensions whose bytes overflow 64 bits"
            )
        total = dt.nbytes(0 if 0 in dims else numel)
        try:
            views = chunk_views(name, dt, dims, chunks)
        except TypeError:
            raise InvalidArgumentError(
                f"tensor {name!r}: chunks must be an iterable of arrays or byte buffers, got "
                f"{type(chunks).__name__}"
            ) from None
        encoding, lvl, checksum = self._options(compression, level, checksum)
        digester = Digester(checksum) if checksum else None
        packer = StreamCompressor(total, level=lvl) if encoding else None
        start = self._start_at(ALIGNMENT, fill=True)
        rng = self._stream(
            name,
            start,
            total,
            views,
            pack=None if packer is None else lambda view: (packer.compress(view),),
            flush=None if packer is None else lambda: (packer.flush(),),
            stored=digester,
        )
        digest = digester.value() if digester is not None else None
        comp = Component(rng, dt, encoding or "raw", digest)
        self._record(TensorInfo(name, dt, dims, {"data": comp}, "dense"))

    def _add_all(self, items: Iterable[tuple[str, Any]]) -> None:
        """:meth:`add` each ``(name, tensor)``. With zstd, dense tensors are compressed (and
        digested) two at a time on worker threads, one per core, while the one before is
        written; the file is the same as adding them one by one. At most three tensors are in
        flight, each under :data:`_ALONE` bytes; larger ones are compressed one at a time, on
        all cores, as :meth:`add` does."""
        if self._compression is None or (os.cpu_count() or 1) < 2:
            for name, tensor in items:
                self.add(name, tensor)
            return
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        level, checksum = self._level, self._checksum

        def pack(view: memoryview, threads: int) -> tuple[bytes, str | None]:
            stored = compress(view, level=level, threads=threads)
            return stored, make_digest(checksum, stored) if checksum else None

        window: deque[tuple[str, DType, tuple[int, ...], Any, Any]] = deque()
        with ThreadPoolExecutor(2, thread_name_prefix="tensorfile-zstd") as pool:
            try:
                for name, tensor in items:
                    self._check_name(name)
                    sparse = sparse_of(name, tensor)
                    dense = dense_array(name, tensor) if sparse is None else None
                    if dense is None or dense[2].nbytes >= _ALONE:
                        while window:
                            self._add_packed(*window.popleft())
                        self.add(name, tensor)
                        continue
                    dt, shape, view, keep = dense
                    window.append((name, dt, shape, keep, pool.submit(pack, view, 0)))
                    if len(window) > 2:
                        self._add_packed(*window.popleft())
                while window:
                    self._add_packed(*window.popleft())
            except BaseException:
                for *_, future in window:
                    future.cancel()
                self.abort()
                raise

    def _add_packed(
        self, name: str, dt: DType, shape: tuple[int, ...], _keep: Any, future: Any
    ) -> None:
        """Append a dense tensor compressed by :meth:`_add_all`'s workers."""
        stored, digest = self._guard(future.result)
        self._guard(self._drain)
        start = self._start_at(ALIGNMENT, fill=True)
        self._guard(lambda: self._write(memoryview(stored), reserve=True))
        comp = Component(ByteRange(start, self._pos), dt, "zstd", digest)
        self._record(TensorInfo(name, dt, shape, {"data": comp}, "dense"))

    # -- internals -------------------------------------------------------------------------

    def _name_rule(self, name: Any) -> None:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"tensor names are text, got {brief(name)}")
        text_of(name, "tensor name")

    def _record(self, info: TensorInfo) -> None:
        if numel_within(info.shape, _MAX_U64 // info.dtype.itemsize) is None:
            self.abort()
            raise InvalidArgumentError(
                f"tensor {info.name!r}: a shape of {len(info.shape):,} dimensions whose bytes "
                "overflow 64 bits (readers refuse it)"
            )
        self._entries[info.name] = info

    def _component(
        self, view: memoryview, dt: DType, encoding: str | None, level: int, checksum: str | None
    ) -> Component:
        stored: Any = view if encoding is None else self._guard(lambda: compress(view, level=level))
        digest = make_digest(checksum, stored) if checksum else None
        self._guard(self._drain)  # one compressed component in flight at a time
        start = self._start_at(ALIGNMENT, fill=True)
        if encoding is None:
            self._guard(lambda: self._write(memoryview(stored), reserve=True))
        else:  # written in the background while the next tensor is compressed
            self._write_behind(memoryview(stored))
        return Component(ByteRange(start, self._pos), dt, encoding or "raw", digest)

    def _tail(self) -> bytes:
        manifest = encode_manifest(self._entries, self._attributes, GENERATOR)
        return manifest + struct.pack("<Q", len(manifest))
