"""Write zTensor v2 files: blob by blob, atomically.

:class:`Writer2` (what ``ztensor.Writer(path, version=2)`` returns) appends each part of
each tensor to a temporary file at an aligned offset (:mod:`._placement`: every blob at a
multiple of ``align`` when it is given; else 65536 in a raw file, and in a compressed one
4096 for encoded and small blobs, 65536 for large raw ones), raw or encoded as
``zt.zstd-seekable/1`` (frames of 1 MiB with content checksums and a seek table) where that
makes the part smaller, with an ``xxh3:`` or ``sha256:`` digest of its decoded bytes when
asked; only the tensor in hand is in memory. A part byte-identical to one already written
is not written again: it refers to that blob (the hash match is confirmed by comparing the
bytes, encoded ones as encoded). A compressed file is never bigger than the same tensors
raw; an explicit ``align`` that makes it so, or pads it heavily, warns (ZTensorWarning).
:meth:`Writer2.close` appends the deterministic-CBOR manifest and the
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
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import xxhash

from tensorfile.core import dtypes
from tensorfile.core.catalog import ByteRange
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, TensorFileError, ZTensorWarning
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
    ALIGN_FLOOR,
    MAGIC,
    MAX_MANIFEST_SIZE,
    MAX_RANK,
    MAX_U64,
    Hasher,
    check_name,
    encode_footer,
    manifest_hash,
)
from tensorfile.formats.ztensor.v2._placement import Placement, up
from tensorfile.formats.ztensor.v2._seekable import FRAME_SIZE, SeekableEncoder

__all__ = ["Writer2", "to_bytes"]

_COMPARE = 8 << 20  # bytes compared at a time when confirming a duplicate blob


class Writer2(ContainerWriter):
    """Append tensors to a new zTensor v2 file, one at a time.

    Args:
        path: destination; it appears (atomically) when the writer is closed.
        attributes: file attributes: text keys, values of any CBOR type (text, numbers,
            booleans, None, bytes, lists, dicts).
        compression: ``None`` (raw) or ``"zstd"`` (``zt.zstd-seekable/1``, for each part
            it makes smaller; the others stay raw).
        level: zstd level.
        checksum: ``None``, ``"xxh3"`` or ``"sha256"``: a digest of each part's decoded bytes.
        align: every blob at a multiple of this (of 4096); None: 65536 in a raw file
            (canonical), packed by size in a compressed one (:mod:`._placement`).
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
        align: int | None = None,
        fsync: bool = False,
    ) -> None:
        self.path = path_of(path)
        self._attributes = attributes_of(attributes, 2)
        self._set_options(compression, level, checksum)
        explicit = None if align is None else align_of(align)
        self._plan = Placement(explicit, packed=self._compression is not None)
        self._encoded = self._compression is not None  # whether any part asked for zstd
        self._entries: dict[str, dict[str, Any]] = {}
        self._blobs: dict[tuple[bytes, int], tuple[ByteRange, str | None]] = {}
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
        at = self._plan.raw_blob(object(), total)
        if encoder is None:
            start = self._start_at(self._plan.raw_align(self._pos, total), fill=False)
        else:
            self._encoded = True
            start = self._start_at(self._plan.encoded_align, fill=False)
        rng = self._stream(
            name,
            start,
            total,
            views,
            pack=None if encoder is None else encoder.feed,
            flush=None if encoder is None else encoder.finish,
            decoded=hasher,
        )
        digest = hasher.value() if hasher else None
        entry = self._entry(dt, rng, encoding, total, digest)
        raw_entry = self._entry(dt, ByteRange(at, at + total), None, total, digest)
        self._keep(entry, raw_entry, rng.length)
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
        n = view.nbytes
        digest = None
        if checksum is not None:
            hasher = Hasher(checksum)
            hasher.update(view)
            digest = hasher.value()
        key = (xxhash.xxh3_128_digest(view), n)
        at = self._plan.raw_blob(key, n)  # the same part in the raw file
        raw_entry = self._entry(dt, ByteRange(at, at + n), None, n, digest)
        stored: memoryview | None = None
        if encoding is not None:
            self._encoded = True
            encoder = self._encoder(level, n)
            pieces = self._guard(lambda: list(encoder.feed(view)) + encoder.finish())
            stored = memoryview(b"".join(pieces))
        found = self._blobs.get(key)
        if found is not None:  # a part already written: confirmed on the bytes, then shared
            rng, enc = found
            same = view if enc is None else stored if enc == encoding else None
            if (
                same is not None
                and same.nbytes == rng.length
                and self._guard(lambda: self._same(rng.start, same))
            ):
                return self._keep(self._entry(dt, rng, enc, n, digest), raw_entry, 0)
        if stored is not None:
            start = up(self._pos, self._plan.encoded_align)
            entry = self._entry(dt, ByteRange(start, start + stored.nbytes), encoding, n, digest)
            grow = _size(entry) - _size(raw_entry)
            if self._plan.keep_encoded(start + stored.nbytes, stored.nbytes, n, grow):
                self._start_at(self._plan.encoded_align, fill=False)
                self._guard(lambda: self._write(stored))
                self._blobs.setdefault(key, (ByteRange(start, self._pos), encoding))
                return self._keep(entry, raw_entry, stored.nbytes)
        start = self._start_at(self._plan.raw_align(self._pos, n), fill=False)
        self._guard(lambda: self._write(view, reserve=True))
        rng = ByteRange(start, start + n)
        self._blobs.setdefault(key, (rng, None))
        return self._keep(self._entry(dt, rng, None, n, digest), raw_entry, n)

    def _keep(
        self, entry: dict[str, Any], raw_entry: dict[str, Any], written: int
    ) -> dict[str, Any]:
        """Count ``entry`` (``written`` blob bytes) against the raw file's ``raw_entry``."""
        self._plan.wrote(written, _size(entry) - _size(raw_entry))
        return entry

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
        self._warn_padding(len(manifest))
        at = self._start_at(self._plan.manifest_align, fill=False)
        return manifest + encode_footer(at, len(manifest), manifest_hash(manifest))

    def _warn_padding(self, manifest: int) -> None:
        """Warn when the user's ``align`` makes a compressed file bigger than the same file
        raw, or mostly padding."""
        plan = self._plan
        if plan.align is None or not self._encoded:
            return
        size, raw, floor = plan.excess(self._pos, manifest)
        if size > raw or size - floor > plan.stored:
            what = (
                f"more than the {raw:,} bytes of the same file raw"
                if size > raw
                else f"{size - floor:,} more than at {ALIGN_FLOOR}-byte alignment, for "
                f"{plan.stored:,} bytes of blobs"
            )
            warnings.warn(
                f"{self.path}: align={plan.align} with compression writes {size:,} bytes, "
                f"{what}; leave align unset (small tensors packed at {ALIGN_FLOOR}) for a "
                "smaller file",
                ZTensorWarning,
                stacklevel=4,
            )


def _size(entry: dict[str, Any]) -> int:
    """The bytes a part's entry takes in the manifest."""
    return len(_cbor.encode(entry, deterministic=True))


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
