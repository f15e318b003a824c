"""Write zTensor v2 files: blob by blob, atomically.

:class:`Writer2` (what ``ztensor.Writer(path, version=2)`` returns) appends each part of
each tensor to a temporary file at the next multiple of ``align`` (65536 by default, any
multiple of 4096), raw or encoded as ``zt.zstd-seekable/1`` (frames of 1 MiB with content
checksums and a seek table), with an ``xxh3:`` or ``sha256:`` digest of its decoded bytes
when asked; only the tensor in hand is in memory. A raw part byte-identical to one already
written is not written again: it refers to that blob (the hash match is confirmed by
comparing the bytes). :meth:`Writer2.close` appends the deterministic-CBOR manifest and the
40-byte footer and renames the file into place; an error, a ``with`` block left by an
exception or :meth:`Writer2.abort` leaves the destination as it was.

``save_file(..., version=2, checksum="xxh3")`` with the default ``align`` and no
compression writes canonical form (§6.3): tensors in name order, blobs at 64 KiB
boundaries from 65536, identical parts aliased, the manifest last, which is the file the
reference writer (ztensor 2.1.2) writes for the same tensors, byte for byte.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> with ztensor.Writer(path, version=2, checksum="xxh3", attributes={"step": 7}) as w:
    ...     w.add("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    ...     w.add("b", np.zeros(300_000, np.float16), compression="zstd")
    >>> open(path, "rb").read(8), ztensor.open(path).info("b").data.encoding
    (b'\\x89ZT2\\r\\n\\x1a\\n', 'zt.zstd-seekable/1')
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import xxhash

from tensorfile.core import dtypes
from tensorfile.core.catalog import ByteRange
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, TensorFileError
from tensorfile.core.parallel import workers
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor._container_writer import (
    UNSET,
    ContainerWriter,
    chunk_views,
    path_of,
)
from tensorfile.formats.ztensor._inputs import align_of, attributes_of, dtype_of, tensor_parts
from tensorfile.formats.ztensor._layouts import shape_of
from tensorfile.formats.ztensor.v2._format import (
    ALIGN_CANONICAL,
    MAGIC,
    MAX_MANIFEST_SIZE,
    MAX_RANK,
    MAX_U64,
    Hasher,
    check_name,
    encode_footer,
    manifest_hash,
)
from tensorfile.formats.ztensor.v2._seekable import FRAME_SIZE, SeekableEncoder

__all__ = ["Writer2", "to_bytes"]

_COMPARE = 8 << 20  # bytes compared at a time when confirming a duplicate blob


class Writer2(ContainerWriter):
    """Append tensors to a new zTensor v2 file, one at a time.

    Args:
        path: destination; it appears (atomically) when the writer is closed.
        attributes: file attributes: text keys, values of any CBOR type (text, numbers,
            booleans, None, bytes, lists, dicts).
        compression: ``None`` (raw) or ``"zstd"`` (``zt.zstd-seekable/1``), per part.
        level: zstd level.
        checksum: ``None``, ``"xxh3"`` or ``"sha256"``: a digest of each part's decoded bytes.
        align: blob placement, a multiple of 4096 (65536: every tensor on its own pages).
        fsync: flush the file and its folder entry to stable storage on close.
    """

    VERSION = 2

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, Any] | None = None,
        compression: str | None = None,
        level: int = 3,
        checksum: str | None = None,
        align: int | None = ALIGN_CANONICAL,
        fsync: bool = False,
    ) -> None:
        self.path = path_of(path)
        self._attributes = attributes_of(attributes, 2)
        self._set_options(compression, level, checksum)
        self._align = align_of(ALIGN_CANONICAL if align is None else align)
        self._entries: dict[str, dict[str, Any]] = {}
        self._blobs: dict[tuple[bytes, int], int] = {}
        self._rfd = -1
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
        layout, shape, parts, _keep = tensor_parts(name, tensor)
        self._check_shape(name, shape)
        entries = {}
        for role in sorted(parts):
            dt, view = parts[role]
            entries[role] = self._part(dt, view, *opts)
        self._entries[name] = {"shape": list(shape), "layout": layout, "parts": entries}

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
        row-major order, bit-packed for f4), so a tensor larger than memory can be written.
        The chunks must add up to exactly the bytes the shape and dtype need."""
        self._check_name(name)
        dt = dtype_of(name, dtype)
        dims = shape_of(shape, f"tensor {name!r}")
        self._check_shape(name, dims)
        count = 1
        for d in dims:
            count *= d
        total = dt.nbytes(count)
        try:
            views = chunk_views(name, dt, dims, chunks, rows=False)
        except TypeError:
            raise InvalidArgumentError(
                f"tensor {name!r}: chunks must be an iterable of arrays or byte buffers"
            ) from None
        encoding, lvl, digest = self._options(compression, level, checksum)
        hasher = Hasher(digest) if digest else None
        encoder = self._encoder(lvl, total) if encoding else None
        start = self._aligned()
        rng = self._stream(
            name,
            start,
            total,
            views,
            pack=None if encoder is None else encoder.feed,
            flush=None if encoder is None else encoder.finish,
            decoded=hasher,
        )
        entry = self._entry(dt, rng, encoding, total, hasher.value() if hasher else None)
        self._entries[name] = {"shape": list(dims), "layout": "dense", "parts": {"data": entry}}

    def _add_all(self, items: Iterable[tuple[str, Any]]) -> None:
        """:meth:`add` each ``(name, tensor)``, in name order (canonical form)."""
        try:
            ordered = sorted(items, key=lambda item: item[0])
        except TypeError:
            raise InvalidArgumentError("tensor names must all be text") from None
        for name, tensor in ordered:
            self.add(name, tensor)

    # -- internals -------------------------------------------------------------------------

    def _name_rule(self, name: Any) -> None:
        try:
            check_name(name, "the writer", "a tensor name")
            name.encode("utf-8")
        except (TensorFileError, UnicodeEncodeError) as exc:
            raise InvalidArgumentError(f"invalid tensor name: {exc}") from None

    def _check_shape(self, name: str, shape: tuple[int, ...]) -> None:
        count = 1
        for d in shape:
            count *= d
            if count > MAX_U64:
                break
        if len(shape) > MAX_RANK or count > MAX_U64:
            raise InvalidArgumentError(
                f"tensor {name!r}: zTensor v2 shapes have at most "
                f"{MAX_RANK} dimensions and fewer than 2**64 elements"
            )

    def _encoder(self, level: int, total: int) -> SeekableEncoder:
        return SeekableEncoder(level=level, frame_size=FRAME_SIZE, threads=workers(total))

    def _entry(
        self, dt: DType, rng: ByteRange, encoding: str | None, decoded: int, digest: str | None
    ) -> dict[str, Any]:
        storage, logical = dtypes.ztensor_v2_names(dt)
        entry: dict[str, Any] = {"dtype": storage, "blob": [rng.start, rng.length]}
        if logical is not None:
            entry["type"] = logical
        if encoding is not None:
            entry["encoding"] = encoding
            entry["decoded_length"] = decoded
        if digest is not None:
            entry["digest"] = digest
        return entry

    def _part(
        self, dt: DType, view: memoryview, encoding: str | None, level: int, checksum: str | None
    ) -> dict[str, Any]:
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        digest = None
        if checksum is not None:
            hasher = Hasher(checksum)
            hasher.update(view)
            digest = hasher.value()
        if encoding is not None:
            encoder = self._encoder(level, view.nbytes)
            start = self._aligned()
            for piece in self._guard(lambda: list(encoder.feed(view)) + encoder.finish()):
                self._guard(lambda p=piece: self._write(memoryview(p)))
            return self._entry(dt, ByteRange(start, self._pos), encoding, view.nbytes, digest)
        key = (xxhash.xxh3_128_digest(view), view.nbytes)
        start = self._blobs.get(key, -1)
        if start < 0 or not self._guard(lambda: self._same(start, view)):
            start = self._aligned()
            self._guard(lambda: self._write(view, reserve=True))
            self._blobs.setdefault(key, start)
        return self._entry(dt, ByteRange(start, start + view.nbytes), None, view.nbytes, digest)

    def _same(self, offset: int, view: memoryview) -> bool:
        """Whether the blob written at ``offset`` holds exactly ``view`` (read back)."""
        if self._rfd < 0:  # (the temporary file is open write-only)
            self._rfd = os.open(self._file.tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        for pos in range(0, view.nbytes, _COMPARE):
            piece = view[pos : pos + _COMPARE]
            if os.pread(self._rfd, piece.nbytes, offset + pos) != piece:
                return False
        return True

    def _release(self) -> None:
        if self._rfd >= 0:
            os.close(self._rfd)
            self._rfd = -1

    def _aligned(self) -> int:
        """Move to the next multiple of ``align`` (the gap reads as zeros) and return it."""
        return self._start_at(self._align, fill=False)

    def _tail(self) -> bytes:
        root: dict[str, Any] = {"objects": self._entries}
        if self._attributes:
            root["attributes"] = self._attributes
        manifest: bytes = self._guard(lambda: _cbor.encode(root, deterministic=True))
        if len(manifest) > MAX_MANIFEST_SIZE:
            self.abort()
            raise InvalidArgumentError(
                f"the manifest would be {len(manifest):,} bytes, over zTensor v2's 1 GiB limit"
            )
        at = self._aligned()
        return manifest + encode_footer(at, len(manifest), manifest_hash(manifest))


def to_bytes(tensors: Mapping[str, Any], **options: Any) -> bytes:
    """The bytes of the zTensor v2 file ``save_file(tensors, version=2, **options)`` writes.

    Example:
        >>> import numpy as np
        >>> to_bytes({"w": np.zeros(1, np.uint8)})[:4]
        b'\\x89ZT2'
    """
    with tempfile.TemporaryDirectory(prefix="tensorfile-zt2-") as tmp:
        path = os.path.join(tmp, "file.zt")
        if not isinstance(tensors, Mapping):
            raise InvalidArgumentError(
                f"expected a mapping of names to tensors, got {type(tensors).__name__}"
            )
        with Writer2(path, **options) as writer:
            writer._add_all(tensors.items())
        with open(path, "rb") as f:
            return f.read()
