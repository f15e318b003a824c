"""Read zTensor v2 files through the interface of :class:`~tensorfile.ztensor.ZTensorReader`.

:class:`ZTensor2Reader` serves raw dense parts zero-copy from the mapped file
(:meth:`~ZTensor2Reader.view`), reads others into new arrays, decodes
``zt.zstd-seekable/1`` parts frame by frame into their output, verifies ``xxh3:`` and
``sha256:`` digests over the decoded bytes (``verify=False`` skips that), enforces the
logical types' content rules (bool bytes, the f4 padding nibble) and the sparse profiles'
data rules, and resolves parts that live in shard files next to a local root. Objects of
layouts, encodings or logical types tensorfile does not know are listed and readable as
stored bytes (:meth:`~ZTensor2Reader.read_stored`), and refused when decoded.

:attr:`~ZTensor2Reader.attributes` are the file's attributes as the CBOR values they are;
:attr:`~ZTensor2Reader.metadata` has them as text (see :mod:`._manifest`).

Example:
    >>> import numpy as np
    >>> from tensorfile import ztensor
    >>> from tensorfile.formats.ztensor.v2._writer import to_bytes
    >>> data = to_bytes({"w": np.eye(2, dtype=np.float32)}, attributes={"epoch": 3})
    >>> with ztensor.open(data) as f:
    ...     f.catalog.version, f.view("w").tolist(), f.attributes, f.metadata
    ('2', [[1.0, 0.0], [0.0, 1.0]], {'epoch': 3}, {'epoch': '3'})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from tensorfile.core.catalog import ByteRange, Component, TensorInfo, file_name
from tensorfile.core.errors import (
    InvalidArgumentError,
    SourceError,
    ZTensorIOError,
    ZTensorMissingError,
    ZTensorUnsupportedError,
)
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
from tensorfile.formats import ggml
from tensorfile.formats.ztensor._layouts import ExtensionTensor
from tensorfile.formats.ztensor.v2 import _seekable as _v2_seekable
from tensorfile.formats.ztensor.v2._container import open_shard, read_catalog, verify_shard
from tensorfile.formats.ztensor.v2._decode import (
    assemble_coo,
    assemble_csr,
    check_logical,
    elements,
)
from tensorfile.formats.ztensor.v2._format import LOGICAL_TYPES, verify_digest
from tensorfile.formats.ztensor.v2._manifest import (
    ENCODINGS,
    ShardEntry,
    decoded_length,
    storage_of,
)

__all__ = ["ZTensor2Reader"]

T = TypeVar("T")
NDArray = np.ndarray[Any, Any]


class ZTensor2Reader(Reader):
    """A reader of zTensor v2 files.

    Args:
        source: the file (the reader owns it).
        verify: check each part's digest (when it has one) before its data is used.
    """

    def __init__(self, source: Source, *, verify: bool = True) -> None:
        Reader.__init__(self, source, read_catalog(source), not_found=ZTensorMissingError)
        extra: Mapping[str, Any] = self.catalog.extra
        self._objects: dict[str, dict[str, Any]] = extra["objects"]
        self._table: dict[str, ShardEntry] = extra["shards"]
        self.verify = verify
        self._verified: set[tuple[str, str]] = set()
        self._shards: dict[str, Source] = {}
        from tensorfile.sources import LocalSource

        self._root = source.name if isinstance(source, LocalSource) else None

    @property
    def attributes(self) -> dict[str, Any]:
        """The file's attributes, as the CBOR values they are (text in :attr:`metadata`)."""
        found: dict[str, Any] = dict(self.catalog.extra.get("attributes", {}))  # type: ignore[call-overload]
        return found

    @property
    def is_data_shard(self) -> bool:
        """True for a data shard: a container with no manifest (and no tensors)."""
        return bool(self.catalog.extra.get("data_shard"))

    def object_attributes(self, name: str) -> dict[str, Any] | None:
        """The attributes of object ``name``, when it has any."""
        self.info(name)
        found: dict[str, Any] | None = self._objects[name]["attributes"]
        return found

    def checks_digest(self, name: str) -> bool:
        """Whether reading ``name`` compares a digest over each of its parts: the part's
        own, or for a part in a data shard, the shard table's digest of that whole shard."""
        comps = self.info(name).components.values()
        return (
            self.verify
            and bool(comps)
            and all(c.digest or (c.shard and self._table[c.shard].digest) for c in comps)
        )

    def stored_digest(self, name: str, algorithm: str) -> str | None:
        """The part's digest of its decoded bytes (see :meth:`Reader.stored_digest`), for a
        dense tensor this reader can decode: an encoded part of an encoding or logical type
        tensorfile does not know has no data bytes it could compute, so it offers none."""
        info = self.info(name)
        comp = info.components.get("data")
        if self._objects[name]["layout"] != "dense" or comp is None:
            return None
        if comp.encoding != "raw":
            try:
                self._decodable(info, "data", comp)
            except ZTensorUnsupportedError:
                return None
        return super().stored_digest(name, algorithm)

    # -- where bytes are ------------------------------------------------------------------

    def _source_of(self, info: TensorInfo, comp: Component) -> Source:
        if comp.shard is None:
            return self.source
        found = self._shards.get(comp.shard)
        if found is None:
            entry = self._table[comp.shard]
            found = open_shard(self._root, comp.shard, entry, info.name)
            if self.verify and entry.digest:  # the shard table's digest, before any use:
                try:  # a shard swapped or damaged (same size) never gives its values
                    verify_shard(found, entry, comp.shard)
                except BaseException:
                    found.close()
                    raise
            self._shards[comp.shard] = found
        return found

    def verify_shards(self) -> None:
        """Check the whole-file digest of every shard a part is in (reads them whole)."""
        for shard, entry in self._table.items():
            user = next(
                (
                    (info, comp)
                    for info in self.catalog.tensors.values()
                    for comp in info.components.values()
                    if comp.shard == shard
                ),
                None,
            )
            if user is not None:
                verify_shard(self._source_of(*user), entry, shard)

    def _stored_into(self, info: TensorInfo, comp: Component, out: memoryview) -> None:
        try:
            self._source_of(info, comp).readinto(comp.range.start, [out])
        except SourceError as exc:
            raise ZTensorIOError(f"{self._what(info, '')}: {exc}", tensor=info.name) from exc

    def _stored(self, comp: Component, info: TensorInfo | None = None) -> Any:
        source = self.source if info is None else self._source_of(info, comp)
        buf = source.buffer()
        if buf is not None:
            return buf[comp.range.start : comp.range.stop]
        out = np.empty(comp.range.length, np.uint8)
        if info is not None:
            self._stored_into(info, comp, bytes_view(out))
        return bytes_view(out)

    def _unholdable(self, info: TensorInfo, exc: BaseException) -> ZTensorUnsupportedError:
        return ZTensorUnsupportedError(
            f"{self.source.name}: tensor {info.name!r} of shape {list(info.shape)} cannot be "
            f"held in memory: {exc}",
            tensor=info.name,
        )

    def component(self, name: str, role: str) -> Component:
        """The manifest entry of one part of ``name``."""
        return self._role(self.info(name), role)

    def _what(self, info: TensorInfo, role: str) -> str:
        where = f"{self.source.name}: tensor {info.name!r}"
        return f"{where} part {role!r}" if role else where

    # -- decoding one part ----------------------------------------------------------------

    def _role(self, info: TensorInfo, role: str) -> Component:
        try:
            return info.components[role]
        except (KeyError, TypeError):
            raise ZTensorMissingError(
                f"tensor {info.name!r} has no part {brief(role)} (it has "
                f"{', '.join(sorted(info.components))})",
                tensor=info.name,
            ) from None

    def _decodable(self, info: TensorInfo, role: str, comp: Component) -> None:
        if comp.encoding != "raw" and comp.encoding not in ENCODINGS:
            raise ZTensorUnsupportedError(
                f"{self._what(info, role)} is encoded as {file_name(comp.encoding)!r}, an encoding "
                "tensorfile does not know; read_stored() gives its stored bytes",
                tensor=info.name,
            )
        if comp.logical is not None and comp.logical not in LOGICAL_TYPES:
            raise ZTensorUnsupportedError(
                f"{self._what(info, role)} has logical type {comp.logical!r}, which tensorfile "
                "does not know; read_stored() gives its stored bytes",
                tensor=info.name,
            )

    def _fill(self, info: TensorInfo, role: str, out: memoryview) -> None:
        """Fill ``out`` (the part's decoded size) with the decoded bytes of one part."""
        comp = info.components[role]
        what = self._what(info, role)
        if comp.encoding == "raw":
            self._stored_into(info, comp, out)
            return
        stored = self._stored(comp, info)
        jobs = _v2_seekable.plan(stored, decoded_length(comp), what=what)
        _v2_seekable.decode_planned(jobs, out, what=what)

    def _after(self, info: TensorInfo, role: str, data: NDArray, count: int | None) -> None:
        """The checks every decoded part passes before it is used: digest, content rules."""
        comp = info.components[role]
        check_logical(comp, data, count, self._what(info, role), info.name)
        if self.verify and comp.digest is not None and (info.name, role) not in self._verified:
            verify_digest(comp.digest, data, what=self._what(info, role), tensor=info.name)
            self._verified.add((info.name, role))

    def _planned_buffer(self, info: TensorInfo, role: str) -> NDArray:
        """A new buffer holding the decoded bytes of one part: an encoded part's frames are
        checked before the buffer (of ``decoded_length``) is allocated."""
        comp = self._role(info, role)
        self._decodable(info, role, comp)
        what = self._what(info, role)
        size = decoded_length(comp)
        if comp.encoding == "raw":
            out = np.empty(size, np.uint8)
            self._stored_into(info, comp, bytes_view(out))
            return out
        jobs = _v2_seekable.plan(self._stored(comp, info), size, what=what)
        try:
            out = np.empty(size, np.uint8)
        except (MemoryError, ValueError) as exc:
            raise self._unholdable(info, exc) from exc
        _v2_seekable.decode_planned(jobs, bytes_view(out), what=what)
        return out

    def read_stored(self, name: str, role: str) -> NDArray:
        """The stored bytes of one part, whatever its encoding and type: structural access,
        no decoding, no checks."""
        info = self.info(name)
        comp = self._role(info, role)
        out = np.empty(comp.range.length, np.uint8)
        self._stored_into(info, comp, bytes_view(out))
        return out

    def read_component(self, name: str, role: str, dtype: Any = None) -> NDArray:
        """One part's decoded bytes, checked, as a 1-D array of ``dtype`` (by default the
        part's element type; uint8 for sub-byte types)."""
        info = self.info(name)
        data = self._planned_buffer(info, role)
        comp = info.components[role]
        count = info.numel if info.layout == "dense" else None
        self._after(info, role, data, count)
        try:
            dt = (
                np.dtype(dtype)
                if dtype is not None
                else (np.dtype(np.uint8) if comp.dtype.is_subbyte else comp.dtype.numpy)
            )
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"dtype {brief(dtype)} is not a numpy dtype: {exc}"
            ) from None
        if dt.hasobject or dt.itemsize == 0 or data.nbytes % dt.itemsize:
            raise InvalidArgumentError(
                f"the {data.nbytes} bytes of {name!r}/{role!r} cannot be viewed as {dt}"
            )
        return data.view(dt)

    def verify_all(self) -> tuple[int, int]:
        """Decode every part that carries a digest and check it; ``(checked, undigested)``."""
        checked = undigested = 0
        for info in self.catalog.tensors.values():
            for role, comp in info.components.items():
                if comp.digest is None:
                    undigested += 1
                    continue
                data = self._planned_buffer(info, role)
                verify_digest(comp.digest, data, what=self._what(info, role), tensor=info.name)
                checked += 1
        return checked, undigested

    # -- dense tensors --------------------------------------------------------------------

    def _dense(self, info: TensorInfo) -> None:
        if info.layout == "quantized":
            super()._dense(info)  # says how: get_tensor(name, dequantize=True)
        if info.layout != "dense" or self._objects[info.name]["layout"] != "dense":
            raise ZTensorUnsupportedError(
                f"tensor {info.name!r} is {info.layout}, not dense; get_tensor() returns it "
                "as a sparse or extension tensor",
                tensor=info.name,
            )
        self._decodable(info, "data", info.data)

    def _ensure_verified(self, info: TensorInfo, role: str) -> None:
        comp = info.components[role]
        if (info.name, role) in self._verified:
            return
        if comp.digest is None and comp.logical not in ("bool", "f4_e2m1"):
            return
        data = np.frombuffer(self._stored(comp, info), np.uint8)
        check_logical(comp, data, info.numel, self._what(info, role), info.name)
        if self.verify and comp.digest is not None:
            verify_digest(comp.digest, data, what=self._what(info, role), tensor=info.name)
        self._verified.add((info.name, role))

    def view(self, name: str) -> NDArray:
        """A read-only array over the mapped file (raw dense parts of this file): no copy."""
        info = self.info(name)
        self._dense(info)
        comp = info.data
        if comp.encoding != "raw" or comp.shard is not None or comp.dtype.is_subbyte:
            why = (
                f"{comp.encoding}-encoded"
                if comp.encoding != "raw"
                else "in another file"
                if comp.shard is not None
                else "bit-packed"
            )
            raise ZTensorUnsupportedError(
                f"tensor {name!r} is {why} and cannot be viewed in place; get_tensor() reads it",
                tensor=name,
            )
        self._ensure_verified(info, "data")
        return Reader.view(self, name)

    def start_read(self, names: list[str], alloc: Allocator[T]) -> Pending[T]:
        """Read dense tensors into buffers from ``alloc``: raw parts of this file with
        coalesced reads, others decoded in place; each checked before it is returned."""
        infos = [self.info(n) for n in names]
        for info in infos:
            self._dense(info)
        slots: list[tuple[memoryview, Callable[[], T]]] = []
        for info in infos:
            comp = info.data
            if comp.encoding != "raw":  # frames checked before the output is allocated
                _v2_seekable.plan(
                    self._stored(comp, info), decoded_length(comp), what=self._what(info, "data")
                )
            slots.append(self._allocate(alloc, _as_decoded(info)))
        local = [
            (i.name, i.data.range, s[0])
            for i, s in zip(infos, slots, strict=True)
            if i.data.encoding == "raw" and i.data.shard is None
        ]

        def finish() -> list[T]:
            for info, (view, _finish) in zip(infos, slots, strict=True):
                if info.data.encoding != "raw" or info.data.shard is not None:
                    self._fill(info, "data", view)
                self._after(info, "data", np.frombuffer(view, np.uint8), info.numel)
            return [done() for _, done in slots]

        return Pending(self.plan_reads(local), finish)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        try:
            self.source.readinto(offset, buffers)
        except SourceError as exc:
            raise ZTensorIOError(str(exc)) from exc

    def read_slice(self, name: str, key: Any) -> NDArray:
        """``tensor[key]``: raw parts of this file read only the rows the index needs;
        others are read whole first."""
        info = self.info(name)
        self._dense(info)
        if info.data.encoding != "raw" or info.data.shard is not None:
            return index_copy(self.get_tensor(name), key)
        self._ensure_verified(info, "data")
        return Reader.read_slice(self, name, key)

    # -- any tensor -----------------------------------------------------------------------

    def get_tensor(self, name: str, *, dequantize: bool = False) -> Any:
        """The tensor as an owned value: a numpy array (dense), :class:`CSRTensor`,
        :class:`COOTensor`, or :class:`ExtensionTensor` (layouts tensorfile does not know,
        parts as arrays of their element type, or bytes for sub-byte types). An object of
        ggml blocks (``gguf.q8_0/1``, layout ``"quantized"``) is an ExtensionTensor of its
        bytes, or, with ``dequantize``, float32 values (see :mod:`tensorfile.formats.ggml`)."""
        info = self.info(name)
        if dequantize and info.layout == "quantized":
            blocks = self.read_component(name, "data", np.uint8)
            return ggml.dequantize(blocks, info.stored_dtype, info.shape, name)
        layout = self._objects[name]["layout"]
        if layout == "dense":
            return self.read_into([name], numpy_allocator)[0]
        if layout not in ("zt.sparse_csr/1", "zt.sparse_coo/1"):
            parts = {role: self.read_component(name, role) for role in sorted(info.components)}
            return ExtensionTensor(layout, info.dtype.numpy, info.shape, parts)
        raw = {role: self._planned_buffer(info, role) for role in sorted(info.components)}
        index_role = "indices" if layout == "zt.sparse_csr/1" else "coords"
        index = raw[index_role].view(
            np.uint64 if storage_of(info.components[index_role]) == "u64" else np.uint32
        )
        nnz = index.size if layout == "zt.sparse_csr/1" else index.size // len(info.shape)
        for role, data in raw.items():
            self._after(info, role, data, nnz if role == "values" else None)
        values = elements(info.components["values"], raw["values"], nnz)
        if layout == "zt.sparse_csr/1":
            ptr = raw["indptr"].view(index.dtype)
            return assemble_csr(values, index, ptr, info.shape, name, self._what(info, ""))
        return assemble_coo(values, index, info.shape, name, self._what(info, ""))

    def get_tensors(self, names: Any = None) -> dict[str, Any]:
        """Owned values of ``names`` (all tensors by default); see :meth:`get_tensor`."""
        names = self.keys() if names is None else names_list(names)
        objects = self._objects
        dense = [n for n in names if self.info(n) and objects[n]["layout"] == "dense"]
        got = dict(zip(dense, self.read_into(dense, numpy_allocator), strict=True))
        return {n: got[n] if n in got else self.get_tensor(n) for n in names}

    def close(self) -> None:
        """Close the file and any shard files opened for it."""
        for source in self._shards.values():
            source.close()
        self._shards.clear()
        super().close()

    def __repr__(self) -> str:
        return f"<tensorfile.ztensor v2 reader {self.source.name!r}: {len(self)} tensors>"


def _as_decoded(info: TensorInfo) -> TensorInfo:
    """``info`` as the allocators see it: its data part at its decoded size."""
    comp = info.data
    size = decoded_length(comp)
    if comp.range.length == size:
        return info
    data = comp._replace(range=ByteRange(comp.range.start, comp.range.start + size))
    return info._replace(components={"data": data})
