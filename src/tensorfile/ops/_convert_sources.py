"""What :func:`tensorfile.convert` reads: one interface over every source it takes, all of
them opened through the format registry (:func:`tensorfile.formats.open.open`, which
is ``tensorfile.open``): safetensors (one file, or a sharded checkpoint: an index or the
folder holding it), zTensor v1.0 and v2, GGUF, numpy ``.npz``/``.npy`` and PyTorch pickles
(tensorfile's own pickle reader, never unpickled; see :mod:`tensorfile.formats.torch_pickle`).

Quantized tensors (GGUF's, and those zTensor v2 stores in ggml's ``gguf.<type>/1`` layouts)
are dequantized to float32 by their reader (``get_tensor(name, dequantize=True)``; see
:mod:`tensorfile.formats.ggml`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import dtypes
from ..core.catalog import TensorInfo
from ..core.digests import STORED, uncovered
from ..core.errors import FormatError
from ..core.values import plain
from ..formats.ggml import DEQUANTIZED, layout_bytes
from ..formats.ztensor import MAX_ZSTD_RATIO
from ..sources import is_url
from ._convert_losses import Kept
from .inspect import not_tensors

__all__ = ["ConvertSource", "Item", "open_source"]


@dataclass(frozen=True)
class Item:
    """One tensor as a source describes it (before any data is read)."""

    name: str
    dtype: dtypes.DType
    shape: tuple[int, ...]
    layout: str = "dense"
    note: str | None = None  # e.g. "dequantized from q8_0"

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(int(np.prod(self.shape, dtype=np.int64)))


@dataclass
class ConvertSource:
    """A source: its items in order, its metadata, and a way to get each tensor."""

    format: str
    items: list[Item]
    metadata: dict[str, Any]
    _get: Any = field(repr=False)
    _close: Any = field(repr=False, default=None)
    single_safetensors: str | None = None  # a lone local safetensors file (copied as is)
    kept: Kept = field(default_factory=lambda: Kept("", {}))  # what a destination may lose
    not_tensors: dict[str, str] = field(default_factory=dict)  # a pickle's other entries
    in_order: Any = field(repr=False, default=None)  # the lone file's digests, as it is copied

    def get(self, name: str) -> Any:
        """The tensor: a numpy array, or a zTensor CSRTensor/COOTensor."""
        return self._get(name)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _values(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata with GGUF's typed values as plain values (float32 ones as the shortest
    float that reads back as the same float32: ``1e-12``, not ``9.999999960041972e-13``)."""
    return {str(key): plain(value) for key, value in meta.items()}


def open_source(
    src: str, *, allow_full_download: bool | None = None, key: str | None = None
) -> ConvertSource:
    """Open ``src`` (a file, URL, sharded checkpoint index or folder) for conversion
    (``allow_full_download``: see :func:`tensorfile.sources.open_path`; ``key``: one
    dictionary of a PyTorch pickle, see :mod:`tensorfile.formats.torch_pickle`)."""
    from ..formats.open import open as open_any

    reader: Any = open_any(src, allow_full_download=allow_full_download, verify=STORED, key=key)
    try:
        return _source(src, reader)
    except BaseException:
        reader.close()
        raise


def _check_backed(info: TensorInfo) -> None:
    """Refuse a tensor whose shape or parts claim more bytes than the file has for them,
    before any plan is made from the claim (an output's size, its preallocation): an
    encoded part that says it decodes to more than zstd (the only compression tensorfile
    decodes) can expand its stored bytes to, and an object of a ggml layout
    (``gguf.q8_0/1``) that is not the blocks of its shape, which its reader exposes as an
    extension layout. (Raw parts are checked against shapes by their readers, quantized
    tensors are their blocks, sparse ones hold what their parts say.)"""
    held = 0
    for role, c in info.components.items():
        if c.decoded_length is None:
            held += c.range.length
            continue
        if c.decoded_length > MAX_ZSTD_RATIO * c.range.length + (1 << 20):
            raise FormatError(
                f"tensor {info.name!r}: part {role!r} claims to decode to "
                f"{c.decoded_length:,} bytes from {c.range.length:,} stored ({c.encoding}); "
                f"zstd expands at most {MAX_ZSTD_RATIO:,} times: the file is not what it says",
                tensor=info.name,
            )
        held += c.decoded_length
    claimed = layout_bytes(info.layout, info.shape)
    if claimed is None or claimed == held:
        return
    blocks = "cannot be whole blocks of its type" if claimed < 0 else f"is {claimed:,} bytes"
    raise FormatError(
        f"tensor {info.name!r} (layout {info.layout!r}) claims shape {list(info.shape)}, which "
        f"{blocks}, but its parts hold {held:,} bytes: the file is not what it says",
        tensor=info.name,
    )


def _uncovered(reader: Any) -> tuple[str, ...]:
    """The tensors of ``reader`` no digest it stores covers, when its digests cover others
    (what fails ``verify``'s rule ``uncovered``); () when it stores none or covers all."""
    names = uncovered(reader)
    if not names or len(names) == sum(reader.info(n).numel != 0 for n in reader.keys()):
        return ()
    return tuple(names)


def _source(src: str, reader: Any) -> ConvertSource:
    shards = getattr(reader, "shards", None)
    sharded = bool(shards) and isinstance(shards, list)
    items: list[Item] = []
    digests: dict[str, int] = {}
    for name in sorted(reader.keys()):  # name order, whatever the file's: one output per input
        info = reader.info(name)
        if info.layout != "quantized":  # (a dequantized tensor's digest is of its blocks)
            for alg in {c.digest.partition(":")[0] for c in info.components.values() if c.digest}:
                digests[alg] = digests.get(alg, 0) + 1
        _check_backed(info)
        if info.layout == "quantized":
            note = f"dequantized from {info.dtype_name}"
            items.append(Item(name, DEQUANTIZED, info.shape, "dense", note))
        else:
            items.append(Item(name, info.dtype, info.shape, info.layout))

    def get(name: str) -> Any:
        if reader.info(name).layout == "quantized":
            return reader.get_tensor(name, dequantize=True)
        return reader.get_tensor(name)

    single = None
    if not sharded and reader.format == "safetensors" and not is_url(src):
        single = src if os.path.isfile(src) else None
    # zt2: CBOR values; GGUF: typed values (made plain by _values)
    metadata = _values(getattr(reader, "attributes", None) or reader.typed_metadata)
    attributes = getattr(reader, "object_attributes", None)
    owned = tuple(  # (those of ggml blocks describe the blocks, which are dequantized)
        i.name for i in items if attributes is not None and not i.note and attributes(i.name)
    )
    # a pickle's plain values (epoch, char2idx...) are its metadata: convert notes them once
    others = not_tensors(reader.catalog) if reader.format == "pytorch" else {}
    return ConvertSource(
        reader.format,  # a sharded checkpoint is safetensors, as inspect and verify say
        items,
        metadata,
        get,
        reader.close,
        single,
        Kept(
            reader.format,
            {k: v for k, v in metadata.items() if k not in others},
            digests,
            owned,
            _uncovered(reader),
        ),
        others,
        reader.in_order if single is not None else None,
    )
