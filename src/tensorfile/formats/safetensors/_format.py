"""The safetensors format's hooks for the registry (:mod:`tensorfile.formats`): read the
catalog, open a reader, rewrite the ``__metadata__`` of a file, and write files
(:func:`save`: one file, or with ``shard_size`` a sharded checkpoint in a folder, as
huggingface_hub lays it out, its index written last).

A metadata edit writes a new file and renames it over the old one
(:func:`tensorfile.core.atomic.rewrite`): a process killed at any instant leaves the old file
or the new one, and readers see one or the other. The new header keeps the old one's size
when it fits (padded with spaces); a longer one grows by whole 4096-byte blocks (spaces
again), so the data region keeps its alignment and, on file systems that share blocks (xfs,
btrfs), is cloned rather than copied.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import load_file, save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(2, np.float32)}, path, metadata={"a": "1"})
    >>> cloned = edit_metadata(path, lambda m: {**m, "b": "2"})  # True: the data was cloned
    >>> from tensorfile.safetensors import safe_open
    >>> safe_open(path, "np").metadata()
    {'a': '1', 'b': '2'}
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensorfile.core.atomic import CLONE_BLOCK, check_editable, rewrite
from tensorfile.core.catalog import Catalog
from tensorfile.core.digests import Digest
from tensorfile.core.errors import InvalidArgumentError, UnsupportedError
from tensorfile.core.source import Source
from tensorfile.formats import GetTensor, MetadataChange, TensorSpec, metadata_text
from tensorfile.formats.safetensors._encode import encode_header
from tensorfile.formats.safetensors._parse import MAX_HEADER_SIZE, N_LEN
from tensorfile.formats.safetensors._reader import SafetensorsReader, catalog_of, read_header
from tensorfile.sources import LocalSource

__all__ = ["check_options", "edit_metadata", "open_reader", "read_catalog", "save"]


def read_catalog(source: Source) -> Catalog:
    """The catalog of the safetensors file in ``source``."""
    return catalog_of(read_header(source))


def open_reader(source: Source, *, verify: bool | None = None) -> SafetensorsReader:
    """A reader over ``source``; ``verify=True`` checks the digests the file records
    (``tensorfile.digests`` metadata) as tensors are read."""
    return SafetensorsReader(source, verify=bool(verify))


def _alignment(offset: int) -> int:
    align = 8
    while align < 4096 and offset % (align * 2) == 0:
        align *= 2
    return align


def edit_metadata(path: str, change: MetadataChange) -> bool:
    """Give the file at ``path`` the metadata ``change(old)`` by writing a new file renamed
    into place; True when its tensor bytes are shared with the old file (a reflink clone),
    False when they were copied."""
    real, expect = check_editable(path)  # follows symlinks; refuses hard links, read-only
    with LocalSource(real) as src:
        h = read_header(src)
        size = src.size
    items = []
    for pos, name in enumerate(h.names):
        dt, shape, start, end = h.info(pos)
        items.append((name, dt, shape, start, end))
    meta_arg = change(dict(h.metadata or {})) or None
    body = encode_header(items, meta_arg, align=8)[N_LEN:].rstrip(b" ")
    n = h.header_size
    if len(body) > n:  # grow by whole blocks: the data keeps its offset modulo a block
        n += -(-(len(body) - n) // CLONE_BLOCK) * CLONE_BLOCK
        if n > MAX_HEADER_SIZE:
            new = encode_header(items, meta_arg, align=_alignment(h.data_start))
            n = len(new) - N_LEN
    head = struct.pack("<Q", n) + body + b" " * (n - len(body))
    method = rewrite(path, head, h.data_start, size - h.data_start, b"", expect=expect)
    return method == "reflink"


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """safetensors output takes ``shard_size`` (bytes, or a size such as ``"5GB"``) and
    ``checksum`` (per-tensor digests in the metadata: ``xxh3``, ``crc32c`` or ``sha256``).

    Example:
        >>> check_options({"shard_size": "1KB"}), check_options({"checksum": "xxh3"})
        ({'shard_size': 1000}, {'checksum': 'xxh3'})
    """
    from tensorfile.core.sizes import parse_size

    out: dict[str, Any] = {}
    for key, value in options.items():
        if key == "shard_size":
            out[key] = parse_size(value)
        elif key == "checksum":
            Digest(value)  # an unknown algorithm: InvalidArgumentError naming the known ones
            out[key] = value
        else:
            raise InvalidArgumentError(
                f"{key.replace('_', '-')} does not apply to safetensors output"
            )
    return out


def _dense(spec: TensorSpec, get: GetTensor) -> Any:
    value = get(spec.name)
    if hasattr(value, "to_dense"):
        raise UnsupportedError(
            f"tensor {spec.name!r} is sparse ({spec.layout}); safetensors has no sparse layout"
        )
    return value


def save(
    path: str,
    tensors: Sequence[TensorSpec],
    get: GetTensor,
    metadata: Mapping[str, Any],
    *,
    tick: Callable[[str], None] | None = None,
    shard_size: int | None = None,
    checksum: str | None = None,
) -> list[str]:
    """Write ``tensors`` to the safetensors file ``path``, header first (every tensor's place
    is known from the specs), then each ``get(name)`` in turn; with ``shard_size``, a
    sharded checkpoint in the folder ``path``. Metadata values that are not text are
    written as JSON text. ``checksum`` adds each tensor's digest to its file's metadata
    (computed as the data streams; the header is rewritten in place before the file
    appears).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.core import dtypes
        >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> spec = TensorSpec("w", dtypes.from_name("I8"), (3,))
        >>> save(path, [spec], lambda n: np.arange(3, dtype=np.int8), {"epoch": 3}) == [path]
        True
    """
    meta = metadata_text(metadata)
    if shard_size is not None:
        import os

        from tensorfile.formats.safetensors._sharded import write_sharded

        by_name = {t.name: t for t in tensors}
        names = write_sharded(
            [(t.name, t.dtype.name, t.shape) for t in tensors],
            lambda n: _dense(by_name[n], get),
            path,
            max_shard_size=shard_size,
            metadata=meta,
            tick=tick,
            checksum=checksum,
        )
        return [os.path.join(path, n) for n in names]
    from tensorfile.formats.safetensors._writer import StreamWriter

    specs = {t.name: (t.dtype.name, t.shape) for t in tensors}
    with StreamWriter(path, specs, meta or None, checksum=checksum) as w:
        for spec in tensors:
            w.write(spec.name, _dense(spec, get))
            if tick is not None:
                tick(spec.name)
    return [path]
