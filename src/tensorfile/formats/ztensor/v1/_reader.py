"""Read zTensor v1.0 files: the manifest into a Catalog, tensors through a Reader.

Opening reads the magic, the footer and the manifest (three small reads; nothing in
proportion to the data). Raw dense tensors are served zero-copy from the mapped file
(:meth:`ZTensorReader.view`, 64-byte aligned) or copied straight into new arrays; zstd
components are decompressed into the output buffer, which is allocated only once the stream
has shown an eighth of its declared size (a size the manifest only claims never decides an
allocation); digests are checked against the stored bytes before anything is handed out
(``verify=False`` skips that). Sparse tensors come back
as :class:`CSRTensor`/:class:`COOTensor`, tensors of unknown layouts as
:class:`ExtensionTensor` whose components are raw arrays.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> ztensor.save_file({"w": np.arange(4, dtype=np.int32)}, path, compression="zstd")
    >>> with ztensor.open(path) as f:
    ...     f.keys(), f.get_tensor("w").tolist(), f.info("w").data.encoding
    (['w'], [0, 1, 2, 3], 'zstd')
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo, file_name
from tensorfile.core.errors import (
    InvalidArgumentError,
    SourceError,
    TensorFileError,
    ZTensorError,
    ZTensorIOError,
    ZTensorMissingError,
    ZTensorUnsupportedError,
)
from tensorfile.core.parallel import workers
from tensorfile.core.plan import Pending
from tensorfile.core.reader import (
    Allocator,
    Reader,
    brief,
    bytes_view,
    index_copy,
    names_list,
    numpy_allocator,
)
from tensorfile.core.source import Source
from tensorfile.formats import ZTENSOR
from tensorfile.formats.ztensor._codecs import (
    MAX_ZSTD_RATIO,
    decompress_limited,
    decompress_to,
    verify_digest,
)
from tensorfile.formats.ztensor._layouts import (
    COOTensor,
    CSRTensor,
    ExtensionTensor,
    check_coo,
    check_csr,
    sorted_csr,
)
from tensorfile.formats.ztensor.v1._manifest import (
    FOOTER_SIZE,
    MAGIC,
    MAX_MANIFEST_SIZE,
    parse_manifest,
)

__all__ = ["ZTensorReader", "read_catalog"]

T = TypeVar("T")
NDArray = np.ndarray[Any, Any]


def read_catalog(source: Source) -> Catalog:
    """Read and validate the container and manifest of the zTensor file in ``source``."""
    name, size = source.name, source.size
    try:
        if size < len(MAGIC) + FOOTER_SIZE:
            raise ZTensorError(
                f"{name}: {size} bytes is too short for a zTensor file (the 8-byte magic and "
                "the 8-byte manifest size alone take 16)"
            )
        magic = source.read(0, len(MAGIC))
        if magic != MAGIC:
            if magic.startswith(ZTENSOR.magic):
                raise ZTensorUnsupportedError(
                    f"{name}: container {magic!r} is not zTensor v1.0 ({MAGIC!r})", offset=0
                )
            raise ZTensorError(f"{name}: not a zTensor file (magic {magic!r})", offset=0)
        (manifest_size,) = struct.unpack("<Q", source.read(size - FOOTER_SIZE, FOOTER_SIZE))
        if manifest_size > size - len(MAGIC) - FOOTER_SIZE:
            raise ZTensorError(
                f"{name}: the footer declares a {manifest_size:,}-byte manifest, more than "
                f"the {size - len(MAGIC) - FOOTER_SIZE:,} bytes between the magic and the "
                "footer: the file looks truncated or damaged at its end (how long it was "
                "cannot be told: the manifest size that ends a whole file is not there)",
                offset=size - FOOTER_SIZE,
            )
        if manifest_size > MAX_MANIFEST_SIZE:
            raise ZTensorError(
                f"{name}: the {manifest_size:,}-byte manifest is over tensorfile's "
                f"{MAX_MANIFEST_SIZE:,}-byte limit",
                offset=size - FOOTER_SIZE,
            )
        start = size - FOOTER_SIZE - manifest_size
        data = source.read(start, manifest_size)
    except SourceError as exc:
        raise ZTensorIOError(f"cannot read the manifest of {name}: {exc}") from exc
    return parse_manifest(data, manifest_start=start, file_size=size, name=name)


class ZTensorReader(Reader):
    """A :class:`~tensorfile.core.reader.Reader` for zTensor files.

    Args:
        source: the file.
        verify: check each component's digest (when it has one) before its data is used.
    """

    def __init__(self, source: Source, *, verify: bool = True) -> None:
        super().__init__(source, read_catalog(source), not_found=ZTensorMissingError)
        self.verify = verify
        self._verified: set[tuple[str, str]] = set()

    @property
    def attributes(self) -> dict[str, str]:
        """The file's attributes (the same as :attr:`metadata`)."""
        return dict(self.catalog.metadata)

    # -- dense, raw and zstd -----------------------------------------------------------------

    def _dense(self, info: TensorInfo) -> None:
        if info.layout != "dense":
            raise ZTensorUnsupportedError(
                f"tensor {info.name!r} is {info.layout}, not dense; get_tensor() returns it "
                "as a sparse or extension tensor",
                tensor=info.name,
            )

    def _unholdable(self, info: TensorInfo, exc: BaseException) -> TensorFileError:
        return ZTensorUnsupportedError(
            f"{self.source.name}: tensor {info.name!r} has a valid shape that numpy cannot "
            f"hold ({len(info.shape)} dimensions): {exc}",
            tensor=info.name,
        )

    def view(self, name: str) -> NDArray:
        """A read-only array over the mapped file (raw dense tensors): no copy."""
        info = self.info(name)
        self._dense(info)
        if info.data.encoding != "raw":
            raise ZTensorUnsupportedError(
                f"tensor {name!r} is {info.data.encoding}-compressed and cannot be viewed in "
                "place; get_tensor() decompresses it",
                tensor=name,
            )
        self._ensure_verified(info, "data")
        return super().view(name)

    def start_read(self, names: list[str], alloc: Allocator[T]) -> Pending[T]:
        """Read dense tensors into buffers from ``alloc``: raw ones with coalesced reads,
        zstd ones decompressed, their buffers allocated only once the stream has shown
        that much data (:func:`~tensorfile.formats.ztensor._codecs.decompress_to`);
        digests checked."""
        infos = [self.info(n) for n in names]
        for info in infos:
            self._dense(info)
        slots = {
            k: self._allocate(alloc, info)
            for k, info in enumerate(infos)
            if info.data.encoding == "raw"
        }
        raw = [(infos[k].name, infos[k].data.range, slot[0]) for k, slot in slots.items()]

        def finish() -> list[T]:
            for k, (view, _finish) in slots.items():
                self._check(infos[k], "data", view)
            packed = {k: info for k, info in enumerate(infos) if k not in slots}
            decoded = dict(zip(packed, self._decode_all(list(packed.values()), alloc), strict=True))
            return [slots[k][1]() if k in slots else decoded[k]() for k in range(len(infos))]

        return Pending(self.plan_reads(raw), finish)

    def _decode_all(self, infos: list[TensorInfo], alloc: Allocator[T]) -> list[Callable[[], T]]:
        """Decompress data components into buffers from ``alloc``, on all cores when there
        is a lot; each buffer's finish function."""
        total = sum(_decoded(info).data.range.length for info in infos)
        threads = workers(total)
        if len(infos) < 2 or threads < 2:
            return [self._decode(info, alloc) for info in infos]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(
            min(threads, len(infos)), thread_name_prefix="tensorfile-zstd"
        ) as pool:
            futures = [pool.submit(self._decode, info, alloc) for info in infos]
            return [future.result() for future in futures]

    def read_slice(self, name: str, key: Any) -> NDArray:
        """``tensor[key]``: raw tensors read only the rows the index needs; compressed ones
        are decompressed whole first."""
        info = self.info(name)
        self._dense(info)
        if info.data.encoding != "raw":
            return index_copy(self.get_tensor(name), key)
        self._ensure_verified(info, "data")
        return super().read_slice(name, key)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        try:
            self.source.readinto(offset, buffers)
        except SourceError as exc:
            raise ZTensorIOError(str(exc)) from exc

    # -- components ------------------------------------------------------------------------

    def component(self, name: str, role: str) -> Component:
        """The manifest entry of one component of ``name``."""
        info = self.info(name)
        try:
            return info.components[role]
        except TypeError:  # unhashable
            raise InvalidArgumentError(
                f"a component role is a string, got {type(role).__name__}"
            ) from None
        except KeyError:
            raise ZTensorMissingError(
                f"tensor {name!r} has no component {role!r} (it has "
                f"{', '.join(sorted(info.components))})",
                tensor=name,
            ) from None

    def read_component(self, name: str, role: str, dtype: Any = None) -> NDArray:
        """One component's decoded bytes as a 1-D array of ``dtype`` (by default the
        component's own type: the tensor dtype for data/values, uint64 for index arrays,
        uint8 for roles of unknown layouts)."""
        comp = self.component(name, role)
        info = self.info(name)
        try:
            dt = np.dtype(dtype) if dtype is not None else comp.dtype.numpy
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"dtype {brief(dtype)} is not a numpy dtype: {exc}"
            ) from None
        if dt.hasobject or dt.itemsize == 0:
            raise InvalidArgumentError(f"component bytes cannot be viewed as {dt}")
        if comp.encoding == "raw":
            out = np.empty(comp.range.length, np.uint8)
            self._read_ranges([(name, comp.range, bytes_view(out))])
            self._check(info, role, bytes_view(out))
        else:
            out = np.frombuffer(self._decode_unsized(info, role), np.uint8)
        if out.nbytes % dt.itemsize:
            raise ZTensorError(
                f"tensor {name!r} component {role!r} holds {out.nbytes} bytes, not a whole "
                f"number of {dt} elements",
                tensor=name,
            )
        return out.view(dt)

    def get_tensor(self, name: str) -> Any:
        """The tensor as an owned value: a numpy array (dense), :class:`CSRTensor`,
        :class:`COOTensor`, or :class:`ExtensionTensor` (unknown layouts)."""
        info = self.info(name)
        if info.layout == "dense":
            return self.read_into([name], numpy_allocator)[0]
        comps = {role: self.read_component(name, role) for role in sorted(info.components)}
        where = f"{self.source.name}: tensor {name!r}"
        try:
            if info.layout == "sparse_csr":
                check_csr(comps["values"], comps["indices"], comps["indptr"], info.shape)
                values, indices = sorted_csr(comps["values"], comps["indices"], comps["indptr"])
                return CSRTensor(values, indices, comps["indptr"], info.shape)
            if info.layout == "sparse_coo":
                values = comps["values"]
                ndim = len(info.shape)
                coords = comps["coords"]
                if coords.size != ndim * values.size:
                    raise ZTensorError(
                        f"{coords.size} coordinates for {values.size} values of a {ndim}-D "
                        f"tensor; {ndim * values.size} expected"
                    )
                coords = coords.reshape(ndim, values.size)
                check_coo(values, coords, info.shape)
                return COOTensor(values, coords, info.shape)
        except ZTensorError as exc:
            raise ZTensorError(f"{where}: {exc}", tensor=name) from None
        return ExtensionTensor(file_name(info.layout), info.dtype.numpy, info.shape, comps)

    def get_tensors(self, names: Any = None) -> dict[str, Any]:
        """Owned values of ``names`` (all tensors by default); see :meth:`get_tensor`."""
        names = self.keys() if names is None else names_list(names)
        dense = [n for n in names if self.info(n).layout == "dense"]
        got = dict(zip(dense, self.read_into(dense, numpy_allocator), strict=True))
        return {n: got[n] if n in got else self.get_tensor(n) for n in names}

    # -- bytes, digests, decompression -----------------------------------------------------

    def _stored(self, comp: Component) -> Any:
        buf = self.source.buffer()
        if buf is not None:
            return buf[comp.range.start : comp.range.stop]
        try:
            return self.source.read(comp.range.start, comp.range.length)
        except SourceError as exc:
            raise ZTensorIOError(str(exc)) from exc

    def _what(self, info: TensorInfo, role: str) -> str:
        return f"{self.source.name}: tensor {info.name!r} component {role!r}"

    def _check(self, info: TensorInfo, role: str, stored: Any) -> None:
        comp = info.components[role]
        if self.verify and comp.digest is not None and (info.name, role) not in self._verified:
            verify_digest(comp.digest, stored, what=self._what(info, role), tensor=info.name)
            self._verified.add((info.name, role))

    def _ensure_verified(self, info: TensorInfo, role: str) -> None:
        comp = info.components[role]
        if self.verify and comp.digest is not None and (info.name, role) not in self._verified:
            self._check(info, role, self._stored(comp))

    def _decode(self, info: TensorInfo, alloc: Allocator[T]) -> Callable[[], T]:
        """Decompress the data component of ``info`` into a buffer from ``alloc``, which is
        asked for only once an eighth of the declared size has come out of the stream; the
        buffer's finish function."""
        decoded = _decoded(info)
        stored = self._stored(info.data)
        self._check(info, "data", stored)
        slot: list[Callable[[], T]] = []

        def allocate() -> memoryview:
            view, done = self._allocate(alloc, decoded)
            slot.append(done)
            return view

        decompress_to(stored, decoded.data.range.length, allocate, what=self._what(info, "data"))
        return slot[0]

    def _decode_unsized(self, info: TensorInfo, role: str) -> bytearray:
        comp = info.components[role]
        stored = self._stored(comp)
        self._check(info, role, stored)
        limit = MAX_ZSTD_RATIO * comp.range.length + (1 << 20)
        if info.layout in ("sparse_csr", "sparse_coo"):
            # a sparse tensor stores at most one value per cell
            numel, ndim = math.prod(info.shape), len(info.shape)
            caps = {
                "values": numel * info.dtype.itemsize,
                "indices": numel * 8,
                "coords": numel * 8 * max(ndim, 1),
                "indptr": (info.shape[0] + 1) * 8 if ndim else 8,
            }
            limit = min(limit, caps.get(role, limit))
        return decompress_limited(stored, limit, what=self._what(info, role))


def _decoded(info: TensorInfo) -> TensorInfo:
    """``info`` as the allocators see it: the data component at its decoded size."""
    comp = info.data
    if comp.encoding == "raw":
        return info
    size = info.dtype.nbytes(math.prod(info.shape))
    data = comp._replace(range=ByteRange(comp.range.start, comp.range.start + size))
    return info._replace(components={"data": data})
